"""`run --jobs N`: policies simulated in worker processes give the in-process run's bytes
(docs/design.md "Policies in worker processes")."""

from __future__ import annotations

import os

import pytest
from robustness_util import assert_one_stderr_line
from typer.testing import CliRunner

from prefixbench.cli import app
from prefixbench.errors import SimulationError
from prefixbench.study import runpool

POLICIES = "transfer_per_request,recompute_on_decode,replicate_hotset,cost_aware"
SMALL = ["--set", "run.requests=600", "--set", "run.warmup_requests=50"]


def _run(tmp_path, jobs: int, *extra: str):
    out = tmp_path / f"jobs{jobs}"
    args = ["run", "--policy", POLICIES, *SMALL, "--out", str(out), "--jobs", str(jobs)]
    return CliRunner().invoke(app, [*args, *extra]), out


@pytest.mark.parametrize("extra", [(), ("--json",)])
def test_two_workers_write_the_in_process_runs_bytes(tmp_path, extra):
    one, out1 = _run(tmp_path, 1, *extra)
    two, out2 = _run(tmp_path, 2, *extra)
    assert one.exit_code == 0 and two.exit_code == 0, (one.output, two.output)
    for name in ("requests.parquet", "summary.parquet"):
        assert (out1 / name).read_bytes() == (out2 / name).read_bytes(), name
    assert two.stdout == one.stdout
    assert two.stderr.replace(str(out2), str(out1)) == one.stderr
    assert sorted(os.listdir(out2)) == ["requests.parquet", "summary.parquet"]  # no temp left


def test_a_workers_error_is_the_serial_runs_one_line(tmp_path):
    """recompute_on_decode (the second policy) needs chunk room beside a full decode batch:
    the engine refuses it when that policy's run starts, in the worker."""
    bad = ["--set", "cluster.chunk_token_budget=64", "--set", "cluster.max_decode_batch=128"]
    one, out1 = _run(tmp_path, 1, *bad)
    two, out2 = _run(tmp_path, 2, *bad)
    line = assert_one_stderr_line(one, code=2)
    assert assert_one_stderr_line(two, code=2) == line
    assert "cluster.chunk_token_budget" in line and "recompute chunk" in line
    assert not any(out2.iterdir())  # nothing half-written
    assert two.stdout == one.stdout == ""


def test_the_worker_task_returns_its_error_for_the_parent_to_raise(tmp_path):
    """In-process check that the error above is the worker's (``policy_task``), and that it
    crosses the pipe with its parts (errors.py ``__reduce__``)."""
    import pickle

    from prefixbench.scenario.loader import load_scenario
    from prefixbench.system.runner import prepare

    sets = ["run.requests=200", "run.warmup_requests=10"]
    bad = ["cluster.chunk_token_budget=64", "cluster.max_decode_batch=128"]
    s = load_scenario(None, [*sets, *bad])
    path = tmp_path / "prepared.pickle"
    path.write_bytes(pickle.dumps(prepare(s)))
    keys = {"scenario": "k"}
    got = runpool.policy_task((1, "recompute_on_decode", str(path), True, keys))
    assert isinstance(got.error, SimulationError)
    back = pickle.loads(pickle.dumps(got.error))
    assert (type(back), back.what, back.where, back.fix) == (
        SimulationError, got.error.what, "cluster.chunk_token_budget", got.error.fix
    )
    ok = runpool.policy_task((0, "transfer_per_request", str(path), True, keys))
    assert ok.error is None and ok.row["policy"] == "transfer_per_request"
    assert ok.row["scenario"] == "k"  # the parent's keys lead the row
    assert ok.row["requests"] == 200
    assert sorted(p.name for p in tmp_path.iterdir() if p.suffix == ".npy")[:2] == [
        "policy0.0.npy", "policy0.1.npy"
    ]


@pytest.mark.parametrize(
    "jobs,n,policies,want",
    [
        (None, 10_000, 7, 1),  # 70,000 requests simulated: start-up would cost more
        (None, 280_000, 7, 1),  # 1.96M: still below the threshold
        (None, 300_000, 7, 2),  # 2.1M
        (None, 1_000_000, 7, 2),  # one per core (this test pins 2 cores below)
        (None, 1_000_000, 1, 1),  # one policy: nothing to share
        (4, 100, 3, 3),  # forced: never more workers than policies
        (1, 1_000_000, 7, 1),
    ],
)
def test_auto_uses_workers_only_for_large_multi_policy_runs(monkeypatch, jobs, n, policies, want):
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    assert runpool.pool_jobs(jobs, n, policies) == want


def test_one_core_runs_in_process(monkeypatch):
    monkeypatch.setattr(os, "cpu_count", lambda: 1)
    assert runpool.pool_jobs(None, 1_000_000, 7) == 1


def test_a_bad_worker_count_is_one_line(tmp_path):
    result, _ = _run(tmp_path, 0)
    assert "--jobs" in assert_one_stderr_line(result, code=2)
