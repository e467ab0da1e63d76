"""The BLIS comparison reads BLIS's own output: its cluster block and its KV and P/D lines
(an excerpt of `blis run` stdout, inference-sim/inference-sim f90a1e3, W1), and sets the
figures beside prefixbench's. Expected values are worked by hand from the excerpt."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
blis = pytest.importorskip("bench.blis")

STDOUT = """=== Simulation Metrics ===
{
  "instance_id": "instance_7",
  "completed_requests": 2449,
  "ttft_mean_ms": 0,
  "itl_mean_ms": 4.1
}
=== Simulation Metrics ===
{
  "instance_id": "cluster",
  "completed_requests": 10000,
  "still_queued": 0,
  "still_running": 0,
  "injected_requests": 10000,
  "total_input_tokens": 20998144,
  "total_output_tokens": 2560000,
  "vllm_estimated_duration_s": 251.445747,
  "responses_per_sec": 39.77001050648114,
  "tokens_per_sec": 10181.122689659172,
  "e2e_mean_ms": 1047.5707095999999,
  "e2e_p90_ms": 1178.7561,
  "e2e_p95_ms": 1217.781,
  "e2e_p99_ms": 1336.8527600000002,
  "ttft_mean_ms": 17.0634492,
  "ttft_p90_ms": 19.8681,
  "ttft_p95_ms": 20.34,
  "ttft_p99_ms": 21.27006,
  "itl_mean_ms": 4.057004077254902,
  "itl_p90_ms": 4.602,
  "itl_p95_ms": 4.841,
  "itl_p99_ms": 5.296,
  "scheduling_delay_p99_ms": 0,
  "preemption_count": 0,
  "dropped_unservable": 0,
  "length_capped_requests": 0,
  "timed_out_requests": 0
}
=== KV Cache Metrics ===
Preemption Rate: 0.0000
Cache Hit Rate: 0.4373
KV Thrashing Rate: 0.0000
=== PD Metrics ===
Disaggregated Requests: 10000
Dropped at Decode KV: 0
Prefill Throughput: 39.7700 sub-req/s
Decode Throughput: 39.7700 sub-req/s
Load Imbalance Ratio: 1.0000
Parent TTFT (us): mean=17063.4 p50=17931.5 p95=20340.0 p99=21270.1
KV Transfer Duration (us): mean=11059.5 p50=12130.0 p95=12130.0 p99=12130.0
"""


def test_parse_blis_reads_the_cluster_block_not_an_instance():
    got = blis.parse_blis(STDOUT)
    assert got["completed_requests"] == 10000
    assert got["ttft_mean_ms"] == pytest.approx(17.0634492)
    assert got["itl_mean_ms"] == pytest.approx(4.057004077254902)
    assert got["cache_hit_rate"] == pytest.approx(0.4373)
    assert got["dropped_at_decode_kv"] == 0 and got["dropped_unservable"] == 0
    assert got["transfer_mean_us"] == pytest.approx(11059.5)
    # (11059.5 us - 50 us base latency) at 25 GB/s = 11009.5e-6 s * 25e9 B/s = 275.2375 MB
    assert got["transfer_mb_per_request"] == pytest.approx(275.2375)


def test_side_by_side_doubles_blis_hit_rate_for_the_prefill_pools():
    # BLIS averages 8 instances; the 4 decode ones hit nothing: 0.4373 * 8 / 4 = 0.8746
    pb = {"completed": 10000, "prefill_hit_rate": 0.8722, "transfer_mb_per_request": 275.4,
          "ttft_mean_ms": 61.8, "tpot_mean_ms": 10.0, "total_input_tokens": 21012480}  # fmt: skip
    rows = {name: (a, b) for name, a, b in blis.side_by_side(blis.parse_blis(STDOUT), pb)}
    assert rows["prefill hit rate"] == ("0.8746", "0.8722")
    assert rows["dropped / rejected"] == ("0", "n/a")
    assert rows["KV MB per request"] == ("275.2", "275.4")
    assert rows["TPOT mean ms"] == ("4.06", "10.00")
    assert rows["TTFT p99 ms"][1] == "n/a"  # missing figures are shown, not invented


def test_source_dir_is_the_folder_holding_defaults_yaml(tmp_path, monkeypatch):
    monkeypatch.delenv("PREFIXBENCH_BLIS_SRC", raising=False)
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "defaults.yaml").write_text("x: 1\n")
    assert blis.blis_source_dir(tmp_path / "blis") == tmp_path / "src"
    (tmp_path / "defaults.yaml").write_text("x: 1\n")
    assert blis.blis_source_dir(tmp_path / "blis") == tmp_path
    assert blis.blis_source_dir(tmp_path / "src" / "nothing" / "blis") is None
