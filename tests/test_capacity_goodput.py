"""Goodput never exceeds the offered rate nor the completions per second: checked on the
capacity table (`capacity --out`), where a sample arriving faster than nominal used to
report 14.66 req/s of goodput at 14 req/s offered."""

from __future__ import annotations

import polars as pl
import pytest

from prefixbench.io.artifacts import read_artifact
from prefixbench.scenario.loader import load_scenario
from prefixbench.study.capacity import _with_rate, probe
from prefixbench.study.capacity_table import write_probes
from prefixbench.study.runs import run_scenario

SHORT = ["run.requests=800", "run.warmup_requests=100", "memory.budget_factor=1.0"]


def test_goodput_is_at_most_the_offered_rate_in_the_capacity_table(tmp_path):
    s = load_scenario("tool_call", SHORT)
    probes = [probe(s, "transfer_per_request", r) for r in (3.5, 7.0, 14.0)]
    write_probes(tmp_path, s.name, "transfer_per_request", 0.9, 14.0, probes)
    table = read_artifact(tmp_path / "capacity.parquet", "capacity")
    assert table.height == 3
    assert (table["goodput_rps"] <= table["rate"] * (1 + 1e-12)).all()
    # and at most what completed per second in the same run
    for r in (3.5, 14.0):
        row = run_scenario(_with_rate(s, r), ["transfer_per_request"], keep_requests=False)
        got = row.summary.row(0, named=True)
        assert got["goodput_rps"] <= got["throughput_rps"] * (1 + 1e-12)
        assert got["goodput_rps"] == pytest.approx(
            got["slo_attainment"] * min(r, got["offered_rps"]), rel=1e-12
        )


def test_goodput_column_is_attainment_times_offered():
    s = load_scenario("tool_call", SHORT)
    row = run_scenario(s, ["replicate_hotset"], keep_requests=False).summary
    assert isinstance(row, pl.DataFrame)
    r = row.row(0, named=True)
    assert r["goodput_rps"] <= 14.0 * r["slo_attainment"] * (1 + 1e-12)


def test_a_probe_at_another_rate_keeps_the_scenarios_kv_budget():
    """`capacity` asks what the same system serves at other rates: the GB a budget factor
    stands for stay measured on the scenario as stated (docs/model.md §3.4), as they do with
    --set workload.arrivals.rate, instead of growing with each probe's rate."""

    def budget(s) -> float:
        out = run_scenario(s, ["transfer_per_request"], keep_requests=False)
        return out.summary.row(0, named=True)["kv_budget_gb"]

    short = SHORT[:2]  # run length only: the scenario is its own reference
    s = load_scenario("tool_call", short)
    stated = budget(s)
    via_set = budget(load_scenario("tool_call", [*short, "workload.arrivals.rate=42"]))
    assert budget(_with_rate(s, 42.0)) == stated == via_set
    assert budget(_with_rate(_with_rate(s, 3.5), 42.0)) == stated
