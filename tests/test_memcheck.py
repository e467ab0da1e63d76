"""The memory guard (support/memcheck.py): what scales is estimated before it is allocated
and checked against the limit that binds it (RAM and cgroup shared by every process,
``ulimit -v`` per process)."""

from __future__ import annotations

import pytest
from robustness_util import assert_one_stderr_line
from typer.testing import CliRunner

from prefixbench.errors import SimulationError
from prefixbench.support import memcheck

runner = CliRunner(env={"COLUMNS": "80", "NO_COLOR": "1", "TERM": "dumb"})


def _machine(monkeypatch, ram: float, rlimit_room: float | None = None, cgroup=None) -> None:
    monkeypatch.setattr(memcheck, "_meminfo_available", lambda: ram)
    monkeypatch.setattr(memcheck, "_cgroup_available", lambda: cgroup)
    monkeypatch.setattr(memcheck, "_cgroup_v1_available", lambda: None)
    monkeypatch.setattr(memcheck, "_rlimit_available", lambda: rlimit_room)


def test_workers_share_ram_and_the_cgroup_but_each_has_its_own_ulimit(monkeypatch):
    """4 workers of 10⁶ requests (2.25 GB each, 9 GB together) under ulimit -v with 3 GB of
    room in the parent: each worker is its own process with its own 3 GB, so the pool fits
    in 64 GB of RAM; it is refused only when RAM (or the cgroup) cannot hold all four."""
    _machine(monkeypatch, ram=64e9, rlimit_room=3e9)
    memcheck.check_fits(1_000_000)  # one point under the per-process limit
    memcheck.check_workers(1_000_000, 4)
    _machine(monkeypatch, ram=64e9, rlimit_room=3e9, cgroup=8e9)
    with pytest.raises(SimulationError, match=r"4 workers .* 9\.0 GB .* 8\.0 GB.*--jobs 3"):
        memcheck.check_workers(1_000_000, 4)
    _machine(monkeypatch, ram=64e9, rlimit_room=2e9)
    with pytest.raises(SimulationError, match="run.requests"):
        memcheck.check_fits(1_000_000)  # one point alone past ulimit -v


def test_map_workers_are_checked_before_any_cell_runs(monkeypatch):
    """`map -j 8` over 2 rows of 300-request cells: two workers of 0.25 GB each do not fit in
    0.4 GB; refused with one line before a cell is simulated (map never checked before)."""
    import prefixbench.study.decision_map as dm
    from prefixbench.cli import app

    _machine(monkeypatch, ram=0.4e9)

    def no_cells(*_a, **_k):
        raise AssertionError("a cell ran before the memory check")

    monkeypatch.setattr(dm, "run_row", no_cells)
    r = runner.invoke(app, ["map", "qwen2-0.5b", "--points", "2", "--seeds", "2", "-j", "8",
                            "--requests", "300", "--out", "/nonexistent-map-out"])  # fmt: skip
    line = assert_one_stderr_line(r)
    assert "2 workers" in line and "--jobs 1" in line, line
