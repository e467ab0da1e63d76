"""KV transfer = latency + setup + bytes / (η · NICs · line rate) (docs/model.md "KV transfer
cost"); every expectation below is written out by hand from the link catalog's datasheet and
measured figures and a Qwen3-8B config.json's shape."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from prefixbench.catalog import LINKS
from prefixbench.cli import app
from prefixbench.physics import costmodel as cm

runner = CliRunner(env={"COLUMNS": "80", "NO_COLOR": "1", "TERM": "dumb"})

# Qwen/Qwen3-8B config.json (huggingface.co/Qwen/Qwen3-8B/blob/main/config.json): the
# fields prefixbench reads.
QWEN3_8B = {
    "architectures": ["Qwen3ForCausalLM"],
    "model_type": "qwen3",
    "hidden_size": 4096,
    "intermediate_size": 12288,
    "num_hidden_layers": 36,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "vocab_size": 151936,
    "max_position_embeddings": 40960,
    "tie_word_embeddings": False,
    "attention_bias": False,
    "torch_dtype": "bfloat16",
    "rope_theta": 1000000.0,
}
# KV per token: 2 (K, V) · 36 layers · 8 KV heads · 128 dims · 2 bytes = 147,456 bytes.
KV = 147_456


def test_rdma_links_carry_measured_efficiency_ceiling_and_setup():
    # Mooncake transfer engine: 87 GB/s over 4×200 Gbps (100 GB/s line: η 0.87 per NIC),
    # 190 GB/s over 8×400 Gbps (8 × 0.87 × 50 = 348 > 190: the instance's ceiling);
    # 450 µs per request's transfer.
    for name in ("roce-100g", "roce-200g", "ib-ndr400"):
        assert LINKS[name].efficiency == 0.87
        assert LINKS[name].ceiling_gbps == 190.0
        assert LINKS[name].setup_us == 450.0
    assert LINKS["nvlink4"].efficiency == 1.0 and LINKS["nvlink4"].setup_us == 0.0
    assert LINKS["nvlink4"].ceiling_gbps is None


def test_the_ceiling_binds_only_past_it():
    link = LINKS["ib-ndr400"]
    one_gb = 1e9
    # 1 NIC: 0.87 × 50 GB/s = 43.5; 4 NICs: 174; 8 NICs: 348 → the 190 GB/s ceiling
    for nics, rate in ((1, 43.5e9), (4, 174e9), (8, 190e9)):
        assert cm.link_rate(link, nics) == pytest.approx(rate, rel=1e-12)
        want = 2e-6 + 450e-6 + one_gb / rate
        assert float(cm.transfer_time(link, one_gb, nics)) == pytest.approx(want, rel=1e-12)


def test_the_engine_shares_the_ceiling_over_the_nics():
    from prefixbench.scenario.loader import load_scenario
    from prefixbench.system.runner import prepare

    sets = ["cluster.link.name=ib-ndr400", "cluster.link.nics_per_instance=8"]
    run = ["run.requests=50", "run.warmup_requests=5"]
    prep = prepare(load_scenario("medium_chat", [*sets, *run]))
    cfg = prep.base
    # shared NICs: a transfer spans 8 NICs, each carrying 190 / 8 = 23.75 GB/s (not 43.5)
    assert cfg.link_bytes_per_s == pytest.approx(23.75e9, rel=1e-12)


def test_transfer_time_by_hand():
    link = LINKS["roce-200g"]
    # 2,048 tokens over 8 NICs: 3 µs + 450 µs + 301,989,888 B / (0.87 · 8 · 25e9 B/s)
    want = 3e-6 + 450e-6 + 301_989_888 / 174e9
    assert float(cm.transfer_time(link, 2048 * KV, nics=8)) == pytest.approx(want, rel=1e-12)
    # one NIC: the same fixed part, 8× the wire time
    want1 = 453e-6 + 301_989_888 / 21.75e9
    assert float(cm.transfer_time(link, 2048 * KV)) == pytest.approx(want1, rel=1e-12)


def test_cost_cli_prices_each_token_count_with_its_terms(tmp_path):
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(QWEN3_8B))
    args = ["cost", str(cfg), "--devices", "8", "--link", "roce-200g", "--nics", "8"]
    r = runner.invoke(app, [*args, "--tokens", "128,2048,32768", "--json"])
    assert r.exit_code == 0, r.output
    rows = json.loads(r.output)["transfer"]
    assert [x["tokens"] for x in rows] == [128, 2048, 32768]
    wire = {128: 18_874_368 / 174e9, 2048: 301_989_888 / 174e9, 32768: 4_831_838_208 / 174e9}
    for x in rows:
        assert x["bytes"] == KV * x["tokens"]
        assert (x["nics"], x["efficiency"], x["setup_ms"]) == (8, 0.87, 0.45)
        assert x["latency_ms"] == pytest.approx(0.003)
        assert x["effective_gbps"] == pytest.approx(174.0)
        assert x["wire_ms"] == pytest.approx(wire[x["tokens"]] * 1e3, rel=1e-12)
        assert x["ms"] == pytest.approx((453e-6 + wire[x["tokens"]]) * 1e3, rel=1e-12)
    table = runner.invoke(app, [*args, "--tokens", "128,2048,32768"])
    assert table.exit_code == 0, table.output
    assert max(len(line) for line in table.output.splitlines()) <= 80
    assert "fixed" in table.output and "28.22" in table.output  # 0.453 + 27.769 ms


def test_bad_nics_is_one_line():
    r = runner.invoke(app, ["cost", "qwen2-1.5b", "--nics", "0"])
    assert r.exit_code != 0
    assert "Traceback" not in r.output and "--nics" in r.output


def test_cost_cli_says_when_the_ceiling_binds(tmp_path):
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(QWEN3_8B))
    args = ["cost", str(cfg), "--devices", "8", "--link", "ib-ndr400", "--nics", "8"]
    r = runner.invoke(app, [*args, "--tokens", "2048", "--json"])
    assert r.exit_code == 0, r.output
    (row,) = json.loads(r.output)["transfer"]
    # 8 × 0.87 × 50 GB/s = 348 > 190: the ceiling is the rate
    assert row["ceiling_gbps"] == 190.0 and row["effective_gbps"] == pytest.approx(190.0)
    assert row["wire_ms"] == pytest.approx(301_989_888 / 190e9 * 1e3, rel=1e-12)
    table = runner.invoke(app, [*args, "--tokens", "2048"])
    assert "ceiling 190" in table.output and "348.0" in table.output
