"""`run` and `sweep` answer the same question the same way: one admission default (paged),
one memory size, the same numbers for the same grid point."""

from __future__ import annotations

import polars as pl
from typer.testing import CliRunner

from prefixbench.cli import app

SETS = ["run.requests=600", "run.warmup_requests=100"]
METRICS = ["ttft_mean_ms", "ttft_p99_ms", "tpot_mean_ms", "reject_rate", "kv_budget_gb"]


def _sets(extra=()):
    return [a for s in [*SETS, *extra] for a in ("--set", s)]


def test_run_and_sweep_agree_on_a_point(tmp_path):
    runner = CliRunner()
    r = runner.invoke(
        app,
        ["run", "medium_chat", "-p", "transfer_per_request", "-p", "replicate_hotset",
         *_sets(["memory.budget_factor=0.35"]), "--out", str(tmp_path / "run"), "--json"],
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    s = runner.invoke(
        app,
        ["sweep", "--models", "qwen2-1.5b", "--workloads", "medium_chat", "--budgets", "0.35",
         "--seeds", "0", "--policies", "transfer_per_request,replicate_hotset", *_sets(),
         "--out", str(tmp_path / "sweep"), "--json"],
    )  # fmt: skip
    assert s.exit_code == 0, s.output
    one = pl.read_parquet(tmp_path / "run" / "summary.parquet").sort("policy")
    grid = pl.read_parquet(tmp_path / "sweep" / "runs.parquet").sort("policy")
    assert one["policy"].to_list() == grid["policy"].to_list() == [
        "replicate_hotset", "transfer_per_request"
    ]  # fmt: skip
    assert set(grid["admission"]) == {"paged"}
    for col in METRICS:
        assert one[col].to_list() == grid[col].to_list(), col


def test_admission_reserve_reproduces_the_first_grid(tmp_path):
    """--admission reserve is the first published grid's admission, and differs from paged
    at the admission cliff."""
    runner = CliRunner()
    out = {}
    for mode in ("reserve", "paged"):
        s = runner.invoke(
            app,
            ["sweep", "--models", "qwen2-1.5b", "--workloads", "medium_chat", "--budgets",
             "0.35", "--seeds", "0", "--policies", "transfer_per_request", "--admission", mode,
             *_sets(), "--out", str(tmp_path / mode), "--json"],
        )  # fmt: skip
        assert s.exit_code == 0, s.output
        runs = pl.read_parquet(tmp_path / mode / "runs.parquet")
        assert set(runs["admission"]) == {mode}
        out[mode] = runs.row(0, named=True)
    assert out["reserve"]["kv_budget_gb"] != 0
    assert out["reserve"]["reject_rate"] != out["paged"]["reject_rate"]
