"""The recommendation rule and the crossover arithmetic."""

from __future__ import annotations

import math

import pytest

from prefixbench import catalog
from prefixbench.physics.costmodel import (
    Efficiency,
    InstanceCost,
    kv_bytes_per_token,
    recompute_time,
    transfer_time,
)
from prefixbench.study.crossover import analytic_row
from prefixbench.study.recommend import rank


def row(policy, ttft, reject=0.0, kv=0.0, budget=1.0):
    return {
        "policy": policy,
        "ttft_mean_ms": ttft,
        "reject_rate": reject,
        "mean_replica_kv_gb": kv,
        "kv_budget_gb": budget,
    }


def test_latency_excludes_policies_that_reject_more():
    rows = [row("a", 50, reject=0.10), row("b", 80, reject=0.0), row("c", 90, reject=0.005)]
    assert rank(rows, "latency")[0] == "b"


def test_memory_prefers_small_replicas_within_ten_percent():
    rows = [row("lru", 100, kv=0.9), row("hot", 108, kv=0.2), row("xfer", 130)]
    assert rank(rows, "memory")[0] == "hot"
    rows[1]["ttft_mean_ms"] = 120
    assert rank(rows, "memory")[0] == "lru"


def test_balanced_weighs_rejects_and_memory():
    rows = [row("lru", 100, reject=0.0, kv=0.5), row("xfer", 101, reject=0.0, kv=0.0)]
    # 100/100 + 0.25*0.5 = 1.125 vs 101/100 = 1.01
    assert rank(rows, "balanced")[0] == "xfer"
    rows[1]["reject_rate"] = 0.05  # + 5 * 0.05 = 0.25
    assert rank(rows, "balanced")[0] == "lru"


def test_crossover_tie_bandwidth_is_a_tie():
    r = analytic_row("qwen2-1.5b", "l4", "eth-25g")
    m = catalog.get_model("qwen2-1.5b")
    cost = InstanceCost.build(m, catalog.get_accelerator("l4"), 1, Efficiency())
    link = catalog.get_link("eth-25g").model_copy(
        update={"bandwidth_gbps": r["tie_bandwidth_gbytes_per_s"]}
    )
    t_x = float(transfer_time(link, 2048 * kv_bytes_per_token(m)))
    t_r = float(recompute_time(cost, 2048))
    assert t_x == pytest.approx(t_r, rel=1e-9)
    assert r["winner_at_ref"] == (
        "transfer_per_request"
        if r["transfer_ms_at_ref"] < r["recompute_ms_at_ref"]
        else "recompute_on_decode"
    )


def test_crossover_breakeven_is_where_the_winner_flips():
    r = analytic_row("qwen2-0.5b", "l4", "eth-10g")
    if not math.isnan(r["breakeven_prefix_tokens"]):
        m = catalog.get_model("qwen2-0.5b")
        cost = InstanceCost.build(m, catalog.get_accelerator("l4"), 1, Efficiency())
        link = catalog.get_link("eth-10g")
        L = r["breakeven_prefix_tokens"]
        before = recompute_time(cost, L - 1) < transfer_time(link, (L - 1) * kv_bytes_per_token(m))
        after = recompute_time(cost, L) < transfer_time(link, L * kv_bytes_per_token(m))
        assert bool(before) != bool(after)


def test_cli_recommend_runs_only_what_it_needs(tmp_path, monkeypatch):
    import json

    from typer.testing import CliRunner

    from prefixbench.cli import app
    from prefixbench.scenario.models import POLICIES

    monkeypatch.chdir(tmp_path)
    runner = CliRunner(env={"COLUMNS": "120"})
    args = [
        "recommend",
        "--model",
        "qwen2-0.5b",
        "--budget",
        "0.5",
        "--workload",
        "tool_call",
        "--json",
    ]
    r = runner.invoke(app, args)
    assert r.exit_code == 0, r.stderr
    (row,) = json.loads(r.stdout)
    assert row["workload"] == "tool_call" and row["recommended"] in POLICIES
    assert row["n_seeds"] == 3 and row["runner_up"] in POLICIES and row["reason"]
    assert (
        tmp_path / "results" / "recommend" / "qwen2-0.5b-0.5" / "recommendations.parquet"
    ).is_file()
    # a second question on the same scenarios reuses the finished runs
    again = runner.invoke(app, [*args[:-1], "--objective", "latency", "--json"])
    assert again.exit_code == 0 and "resuming: 3 of 3" in again.stderr
