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
