"""Layer-wise KV streaming (engine/streaming.py, docs/model.md §1.7.1), by hand.

Qwen2-0.5B on one L4 each side (the raw numbers of test_engine_reference's
test_single_request_timeline_by_hand: 24 layers, hidden 896, 14 heads of 64, 2 KV heads,
MLP 4864, vocab 151,936, tied embeddings, QKV bias; L4 121 TFLOP/s, 300 GB/s; MFU 0.5,
MBU 0.7, 1 ms overheads), one NIC each end, 100 µs latency.
"""

from __future__ import annotations

import pytest
from enginecases import make_requests
from test_engine_reference import _compare

from prefixbench.errors import ScenarioError
from prefixbench.scenario.loader import load_scenario

H, LAYERS, INTER, VOCAB = 896, 24, 4864, 151_936
ATTN_PARAMS = H * 896 + 2 * H * 128 + 896 * H + (896 + 2 * 128)
BODY = LAYERS * (ATTN_PARAMS + 3 * H * INTER + 2 * H) + H
F_LIN, F_HEAD = 2.0 * BODY, 2.0 * VOCAB * H
A = 2.0 * LAYERS * 14 * (64 + 64)
K = 2 * LAYERS * 2 * 64 * 2  # 12,288 B/token
WEIGHTS = (BODY + VOCAB * H) * 2
PEAK, BW = 121e12 * 0.5, 300e9 * 0.7  # the GEMMs at 0.5 · T / (T + 96), the weights at 0.7
PEAK_ATTN, BW_KV = 121e12 * 0.72, 300e9 * 0.88  # attention and the KV stream (defaults)


def ops(gemm: float, tokens: float, attn: float, kv: float) -> float:
    """A step by hand: the GEMMs' max(compute at eff(tokens), weights) plus attention's
    max(compute, KV bytes) (docs/model/cost-model.md "Per-operator roofline")."""
    t_gemm = max(gemm * (tokens + 96) / (tokens * PEAK), WEIGHTS / BW)
    return t_gemm + max(attn / PEAK_ATTN, kv / BW_KV)


LAT = 1e-4


def prefill_step(new: int, hit: int) -> float:
    attn = A * (new * hit + new * (new + 1) / 2)
    return ops(new * F_LIN + F_HEAD, new, attn, K * (new + hit)) + 1e-3


def _run(req, **kw):
    kw = {"layers": LAYERS, "link_latency_s": LAT, **kw}
    return _compare(req, **kw)[0]


def test_link_that_keeps_pace_exposes_only_the_last_layer():
    """2,000 new tokens: the step is ~30 ms, 1.25 ms a layer; a layer's KV (1.02 MB) takes
    41 µs at 25 GB/s, so each layer's chunk is done before the next layer is computed and
    only the last one (plus the latency) is left after the prefill ends."""
    n, bw = 2000, 25e9
    req = make_requests([0.1], [n], [2], [[]])
    step = prefill_step(n, 0)
    layer = n * K / LAYERS / bw
    assert layer < step / LAYERS  # the link keeps pace
    cols = _run(req, link_bytes_per_s=bw, streaming="layerwise")
    assert cols["t_prefill_end"][0] == pytest.approx(0.1 + step, rel=1e-12)
    assert cols["t_admit"][0] == 0.1  # admitted when the prefill step starts
    assert cols["t_transfer_start"][0] == pytest.approx(0.1 + step / LAYERS, rel=1e-12)
    assert cols["t_transfer_end"][0] == pytest.approx(0.1 + step + layer + LAT, rel=1e-12)
    after = _run(req, link_bytes_per_s=bw)
    assert after["t_transfer_end"][0] == pytest.approx(0.1 + step + n * K / bw + LAT, rel=1e-12)


def test_link_slower_than_compute_runs_back_to_back_from_the_first_layer():
    """At 0.1 GB/s a layer's chunk takes 10 ms, far more than the 1.25 ms a layer computes:
    the chunks run back to back from the end of layer 0, so the transfer ends n·K/B after
    it and hides one layer of compute."""
    n, bw = 2000, 0.1e9
    req = make_requests([0.1], [n], [2], [[]])
    step = prefill_step(n, 0)
    cols = _run(req, link_bytes_per_s=bw, streaming="layerwise")
    expect = 0.1 + step / LAYERS + n * K / bw + LAT
    assert cols["t_transfer_end"][0] == pytest.approx(expect, rel=1e-12)


def test_cached_prefix_streams_from_admission():
    """Request 0 puts a 1,024-token block in the prefill cache. Request 1 (that block + 976
    new tokens) moves all 2,000 tokens under transfer_per_request: the cached 1,024 go from
    its admission, at its prefill start, so on a slow link the transfer ends n·K/B after the
    prefill *starts*, a whole step earlier than after_prefill."""
    blk = [(7, 1024)]
    req = make_requests([0.0, 5.0], [1100, 2000], [2, 2], [blk, blk])
    bw = 0.1e9
    cols = _run(req, link_bytes_per_s=bw, streaming="layerwise")
    step = prefill_step(976, 1024)
    assert cols["prefill_hit_tokens"][1] == 1024
    assert cols["t_prefill_end"][1] == pytest.approx(5.0 + step, rel=1e-12)
    assert cols["t_transfer_start"][1] == 5.0
    assert cols["t_transfer_end"][1] == pytest.approx(5.0 + 2000 * K / bw + LAT, rel=1e-12)
    after = _run(req, link_bytes_per_s=bw)
    assert after["t_transfer_end"][1] == pytest.approx(5.0 + step + 2000 * K / bw + LAT, rel=1e-12)


def test_one_step_streams_its_requests_layer_by_layer():
    """Requests 1 and 2 (1,000 new tokens each) queue behind request 0's short prefill and
    share the next step and the prefill NIC: layer by layer, request 1's chunk then request
    2's. A pair takes 2·41 µs at 12.5 GB/s, well within a layer's compute, so request 1 is
    done one chunk after the step and request 2 two chunks after."""
    n, bw = 1000, 12.5e9
    req = make_requests([0.0, 0.001, 0.0011], [100, n, n], [2, 2, 2], [[], [], []])
    ts = prefill_step(100, 0)
    step = ops(2 * (n * F_LIN + F_HEAD), 2 * n, 2 * A * n * (n + 1) / 2, K * 2 * n) + 1e-3
    chunk = n * K / LAYERS / bw
    assert 2 * chunk < step / LAYERS
    cols = _run(req, link_bytes_per_s=bw, streaming="layerwise")
    assert cols["t_prefill_start"][1] == cols["t_prefill_start"][2] == pytest.approx(ts)
    assert cols["t_prefill_end"][2] == pytest.approx(ts + step, rel=1e-12)
    assert cols["t_transfer_end"][1] == pytest.approx(ts + step + chunk + LAT, rel=1e-12)
    assert cols["t_transfer_end"][2] == pytest.approx(ts + step + 2 * chunk + LAT, rel=1e-12)


def test_layerwise_needs_shared_nics():
    with pytest.raises(ScenarioError, match="shared NICs only"):
        load_scenario(
            "tool_call",
            ["cluster.link.streaming=layerwise", "cluster.link.topology=private_paths"],
        )
