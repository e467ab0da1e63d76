"""`crossover`: the simulated difference sits only on the system that was simulated."""

from __future__ import annotations

import json

import polars as pl
import pytest
from studyutil import make_tiny_study
from typer.testing import CliRunner

from prefixbench.cli import app

runner = CliRunner(env={"COLUMNS": "80", "NO_COLOR": "1", "TERM": "dumb"})


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    return make_tiny_study(tmp_path_factory.mktemp("study"))


def test_simulated_difference_only_on_the_simulated_row(study):
    xo = pl.read_parquet(study / "crossover.parquet")
    sim = xo.filter(pl.col("sim_ttft_transfer_minus_recompute_ms").is_not_null())
    # the tiny study's scenarios decode on one L4 joined by 25 GbE
    assert sim.select("model", "accelerator", "link").rows() == [("qwen2-0.5b", "l4", "eth-25g")]
    agg = pl.read_parquet(study / "agg.parquet")
    t = {
        (r["workload"], r["budget_factor"], r["policy"]): r["ttft_mean_ms"] for r in agg.to_dicts()
    }
    diffs = [
        t[(w, b, "transfer_per_request")] - t[(w, b, "recompute_on_decode")]
        for (w, b, p) in t
        if p == "transfer_per_request"
    ]
    assert sim["sim_ttft_transfer_minus_recompute_ms"][0] == pytest.approx(sum(diffs) / len(diffs))
    assert sim["sim_scenarios"][0] == len(diffs) == 4


def test_bandwidths_are_named_in_gigabytes(study):
    rows = json.loads(runner.invoke(app, ["crossover", str(study), "--json"]).stdout)
    assert all("tie_bandwidth_gbytes_per_s" in r and "tie_bandwidth_gbps" not in r for r in rows)
    eth = next(r for r in rows if r["link"] == "eth-25g")
    assert eth["link_gbytes_per_s"] == 3.125  # 25 Gbit/s = 3.125 GB/s
    cat = json.loads(runner.invoke(app, ["catalog", "--json"]).stdout)
    assert not any(k.endswith("_gbps") for kind in cat.values() for r in kind for k in r)
    show = json.loads(runner.invoke(app, ["catalog", "show", "eth-25g", "--json"]).stdout)
    assert show["bandwidth_gbytes_per_s"] == 3.125


def test_verdict_quotes_the_simulation_only_for_its_system(study):
    here = runner.invoke(app, ["crossover", str(study)]).stdout
    assert "simulated on l4 over eth-25g" in here and "GB/s" in here
    other = runner.invoke(
        app, ["crossover", str(study), "--accelerator", "a100-80gb", "--link", "eth-10g"]
    )
    assert other.exit_code == 0 and "simulated" not in other.stdout


# ---------------------------------------------------------------- layer-wise streaming


def _lw(model="qwen2-1.5b", link="eth-25g"):
    from prefixbench.study.crossover import analytic_row

    return analytic_row(model, "l4", link), analytic_row(model, "l4", link, streaming="layerwise")


def test_layerwise_charges_only_what_sticks_out_past_the_suffix_prefill():
    """At the 2,048-token reference prefix both options overlap the 256-token suffix's
    prefill (costmodel.prefill_time of one step: 256 new tokens after 2,048 cached)."""
    from prefixbench import catalog
    from prefixbench.physics.costmodel import Efficiency, InstanceCost, prefill_time

    after, lw = _lw()
    cost = InstanceCost.build(catalog.get_model("qwen2-1.5b"), catalog.get_accelerator("l4"), 1,
                              Efficiency())  # fmt: skip
    hide = prefill_time(cost, [256], [2048]) * 1e3
    assert lw["transfer_ms_at_ref"] == pytest.approx(max(after["transfer_ms_at_ref"] - hide, 0))
    assert lw["recompute_ms_at_ref"] == pytest.approx(max(after["recompute_ms_at_ref"] - hide, 0))
    assert lw["streaming"] == "layerwise" and after["streaming"] == "after_prefill"


def test_layerwise_hides_short_prefixes_entirely():
    """28,672 B/token at 3.125 GB/s is 9.18 µs a token, plus 30 µs of latency; the suffix's
    prefill is tens of ms, so prefixes of a thousand tokens or more move unseen, and the
    hidden length shrinks on a slower link."""
    _, lw25 = _lw(link="eth-25g")
    _, lw10 = _lw(link="eth-10g")
    assert lw25["hidden_until_prefix_tokens"] > 1000
    assert 0 < lw10["hidden_until_prefix_tokens"] < lw25["hidden_until_prefix_tokens"]
    after, _ = _lw()
    assert after["hidden_until_prefix_tokens"] != after["hidden_until_prefix_tokens"]  # NaN


def test_crossover_cli_takes_streaming(tmp_path):
    r = CliRunner().invoke(app, ["crossover", str(tmp_path), "--models", "qwen2-1.5b",
                                 "--accelerators", "l4", "--links", "eth-25g",
                                 "--streaming", "layerwise", "--json"])  # fmt: skip
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)[0]["streaming"] == "layerwise"
    bad = CliRunner().invoke(app, ["crossover", str(tmp_path), "--streaming", "layer"])
    assert bad.exit_code != 0 and "--streaming" in bad.output
