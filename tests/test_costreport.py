"""`prefixbench cost`: its figures are the simulator's, its JSON strict, its tables fit 80 columns."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from prefixbench.catalog import ACCELERATORS, LINKS, MODELS
from prefixbench.cli import app
from prefixbench.physics import costmodel as cm
from prefixbench.physics.costreport import cost_report

runner = CliRunner(env={"COLUMNS": "80", "NO_COLOR": "1", "TERM": "dumb"})


def test_report_times_are_the_simulators():
    rep = cost_report("llama-3.1-8b", "h100-sxm", tokens=[2048], batch=[16], context=[4096])
    cost = cm.InstanceCost.build(
        MODELS["llama-3.1-8b"], ACCELERATORS["h100-sxm"], 1, cm.Efficiency()
    )
    assert rep["prefill"][0]["ms"] == pytest.approx(cm.prefill_time(cost, [2048], [0]) * 1e3)
    d = rep["decode"][0]
    assert d["ms"] == pytest.approx(float(cm.decode_iteration_time(cost, 16, 16 * 4096)) * 1e3)
    # the parts shown add up to the step time the simulator uses
    for r in rep["prefill"] + rep["decode"] + rep["recompute"]:
        assert r["ms"] == pytest.approx(max(r["compute_ms"], r["memory_ms"]) + r["overhead_ms"])
    assert rep["recompute"][0]["ms"] == pytest.approx(float(cm.recompute_time(cost, 2048)) * 1e3)


def test_bounds_by_regime():
    rep = cost_report("llama-3.1-8b", "h100-sxm", tokens=[8192], batch=[1], context=[1024])
    assert rep["prefill"][0]["bound"] == "compute"
    assert rep["decode"][0]["bound"] == "memory"


def test_break_even_interval_is_where_recompute_wins():
    rep = cost_report("llama-3.1-8b", "h100-sxm", links=["eth-25g"], tokens=[2048])
    cost = cm.InstanceCost.build(
        MODELS["llama-3.1-8b"], ACCELERATORS["h100-sxm"], 1, cm.Efficiency()
    )
    be = rep["break_even"][0]
    lo, hi = be["recompute_wins_from"], be["recompute_wins_to"]
    link = LINKS["eth-25g"]

    def wins(n):
        return float(cm.recompute_time(cost, n)) < float(cm.transfer_time(link, cost.kv_bpt * n))

    assert wins(lo) and wins(hi) and not wins(lo - 1) and not wins(hi + 1)


def test_cli_table_fits_80_columns():
    r = runner.invoke(app, ["cost", "llama-3.1-8b", "--accelerator", "h100-sxm"])
    assert r.exit_code == 0, r.output
    assert "…" not in r.output
    assert max(len(line) for line in r.output.splitlines()) <= 80
    for title in ("Prefill step", "Decode iteration", "KV transfer", "Recompute", "beats transfer"):
        assert title in r.output


def test_cli_json_is_strict_and_complete(tmp_path):
    r = runner.invoke(
        app,
        [
            "cost",
            "deepseek-v2-lite",
            "-a",
            "a100-80gb",
            "--link",
            "eth-10g",
            "--tokens",
            "512,2048",
            "--batch",
            "1,64",
            "--context",
            "1024",
            "--json",
        ],
    )
    assert r.exit_code == 0, r.output
    rep = json.loads(r.output, parse_constant=lambda c: pytest.fail(f"non-strict JSON {c}"))
    assert [p["tokens"] for p in rep["prefill"]] == [512, 2048]
    assert [(d["batch"], d["context"]) for d in rep["decode"]] == [(1, 1024), (64, 1024)]
    assert rep["figures"]["kv_bytes_per_token"] == 27 * (512 + 64) * 2  # MLA latent, bf16


def test_cli_reads_a_config_json(tmp_path):
    cfg = {
        "architectures": ["Qwen2ForCausalLM"],
        "model_type": "qwen2",
        "hidden_size": 896,
        "intermediate_size": 4864,
        "num_attention_heads": 14,
        "num_hidden_layers": 24,
        "num_key_value_heads": 2,
        "vocab_size": 151936,
        "max_position_embeddings": 131072,
        "tie_word_embeddings": True,
        "torch_dtype": "bfloat16",
    }
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    r = runner.invoke(app, ["cost", str(path), "--json", "--tokens", "512"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["figures"]["kv_bytes_per_token"] == 2 * 24 * 2 * 64 * 2


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--tokens", "0,512"], "--tokens"),
        (["--batch", "x"], "--batch"),
        (["--accelerator", "h100"], "accelerator"),
        (["--link", "roce-400g"], "link"),
        (["--devices", "0"], "--devices"),
    ],
)
def test_cli_bad_input_is_one_line(args, needle):
    r = runner.invoke(app, ["cost", "llama-3.1-8b", *args])
    assert r.exit_code != 0
    lines = [ln for ln in r.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and needle in lines[0], r.output


def test_cli_uses_a_calibrated_efficiency_file(tmp_path):
    eff = tmp_path / "eff.yaml"
    eff.write_text("efficiency:\n  mbu: 0.9\n  decode_overhead_ms: 0.25\n")
    r = runner.invoke(app, ["cost", "llama-3.1-8b", "--efficiency", str(eff), "--batch", "1",
                            "--context", "4096", "--tokens", "512", "--json"])  # fmt: skip
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)["decode"][0]
    # 16.06 GB of weights less the untied input table (128,256 × 4,096, bf16), which a step
    # does not read, at 0.9 × 3.35 TB/s, + 4096 · 131,072 B of KV at the KV stream's default
    # 0.88 × 3.35 TB/s (the file sets the weights' MBU only), + 0.25 ms
    weights = 2 * (8_030_261_248 - 128256 * 4096) / (0.9 * 3350e9)
    expected = (weights + 4096 * 131072 / (0.88 * 3350e9)) * 1e3 + 0.25
    assert d["ms"] == pytest.approx(expected, rel=1e-9)


def test_prompts_beyond_the_max_context_are_flagged():
    rep = cost_report("llama-2-7b", tokens=[4096, 8192], batch=[1], context=[1024])
    assert [r["beyond_max_context"] for r in rep["prefill"]] == [False, True]  # 4,096 max
    r = runner.invoke(app, ["cost", "llama-2-7b", "--tokens", "4096,8192"])
    assert "8,192*" in r.output and "extrapolated" in r.output


def test_the_efficiency_shown_is_the_accelerators_own_gemm_curve(tmp_path):
    # A hardware file with its own GEMM curve: `cost` shows (and prices with) 0.9 and 40
    # tokens, not the H100-fitted 0.68 and 96 it shows for the catalog's H100.
    hw = tmp_path / "mine.yaml"
    hw.write_text(
        "hardware: accelerator\nname: mine\npeak_tflops: 500\nhbm_gbps: 2000\n"
        "memory_gb: 64\ngemm_mfu: 0.9\ngemm_half_tokens: 40\nsource: user\n",
        encoding="utf-8",
    )
    own = cost_report("llama-3.1-8b", str(hw))
    assert (own["efficiency"]["mfu_prefill"], own["efficiency"]["mfu_decode"]) == (0.9, 0.9)
    assert own["efficiency"]["gemm_half_tokens"] == 40.0
    # ridge after efficiency: 500 TFLOP/s · 0.9 over 2,000 GB/s · 0.7
    assert own["figures"]["effective_ridge_prefill"] == pytest.approx(450e12 / 1400e9)
    h100 = cost_report("llama-3.1-8b", "h100-sxm")
    assert h100["efficiency"]["mfu_prefill"] == 0.68
    assert h100["efficiency"]["gemm_half_tokens"] == 96.0
