"""Inputs that used to hang: periods with no floor, a stalled event loop, unbounded futures
sets, grids and worker counts without bounds, a gzip of blank lines (docs/reliability.md)."""

from __future__ import annotations

import pytest
from enginecases import make_requests
from test_engine_reference import _pair

from prefixbench.engine.api import simulate
from prefixbench.errors import PrefixbenchError, ScenarioError, SimulationError
from prefixbench.scenario.loader import load_scenario

A = (1, 512)


@pytest.mark.parametrize("period", ["1e-300", "1e-9", "0.0005"])
def test_a_refresh_period_below_a_millisecond_is_refused_with_its_range(period):
    with pytest.raises(ScenarioError, match=r"hotset_refresh_s.*>= 0.001 and <= 1000000000"):
        load_scenario("enterprise_hotset", [f"memory.hotset_refresh_s={period}"])


def test_the_engine_config_refuses_a_tiny_refresh_period_too():
    cfg, _ = _pair(policy="replicate_hotset", hot_blocks=[A], hot_refresh_s=1e-300)
    req = make_requests([0.0], [600], [2], [[A]])
    with pytest.raises(PrefixbenchError, match="hotset_refresh_s"):
        simulate(req, cfg)


def test_a_refresh_that_cannot_advance_the_clock_stops_with_the_field_named():
    """At t = 1e16 s a 1 ms period is below the clock's resolution (ulp(1e16) = 2 s):
    t + period == t, so the refresh event would repeat for ever; the progress guard stops it."""
    assert 1e16 + 1e-3 == 1e16
    cfg, _ = _pair(policy="replicate_hotset", hot_blocks=[A], hot_refresh_s=1e-3)
    req = make_requests([1e16, 1e16 + 4.0], [600, 600], [2, 2], [[A], [A]])
    with pytest.raises(SimulationError, match=r"memory.hotset_refresh_s.*stopped advancing"):
        simulate(req, cfg)


def test_a_gzip_of_blank_lines_is_refused_without_reading_it_all(tmp_path):
    """A 0.1 MB gzip that inflates to 256 MiB of newlines: refused after 64 MiB of blank
    text (the whole file took minutes to report "no records")."""
    import gzip
    import time

    from prefixbench.errors import TraceFormatError
    from prefixbench.workload.traces import read_trace

    p = tmp_path / "blank.jsonl"
    with gzip.open(p, "wb", compresslevel=1) as fh:
        block = b"\n" * (1 << 20)
        for _ in range(256):
            fh.write(block)
    t0 = time.perf_counter()
    with pytest.raises(TraceFormatError, match="MiB of blank lines in a row"):
        read_trace(p)
    assert time.perf_counter() - t0 < 20


@pytest.mark.parametrize("fmt,head", [("mooncake", b'{"timestamp": '), ("azure", b"TIMESTAMP,")])
def test_a_huge_trace_line_is_refused_before_polars_reads_it(tmp_path, fmt, head):
    """A 17 MiB line (past the 16 MiB cap; polars aborted the process on 300 MB ones)."""
    from prefixbench.errors import TraceFormatError
    from prefixbench.workload.traces import read_trace

    p = tmp_path / ("t.jsonl" if fmt == "mooncake" else "t.csv")
    p.write_bytes(head + b"1" * (17 << 20) + b"\n")
    with pytest.raises(TraceFormatError, match="a line longer than 16 MiB"):
        read_trace(p, fmt)


class _CountingPool:
    """A stand-in for ProcessPoolExecutor that runs each point at submit and records how many
    futures were outstanding at most."""

    def __init__(self, *a, **kw):
        self.live, self.peak, self.workers = 0, 0, kw.get("max_workers")

    def submit(self, fn, item):
        from concurrent.futures import Future

        f: Future = Future()
        f.set_result(fn(item))
        self.live += 1
        self.peak = max(self.peak, self.live)
        f.add_done_callback(lambda _f: None)
        return f

    def shutdown(self, **kw):
        pass


def test_the_pool_never_holds_more_than_a_small_window_of_futures(monkeypatch):
    """10,000 points on 2 workers: at most 4 are submitted and not yet handed back, so an
    interrupt cancels a handful of futures (waiting on 100k left the parent deadlocked)."""
    from prefixbench.study import backends

    pools = []

    def make(*a, **kw):
        pools.append(_CountingPool(*a, **kw))
        return pools[-1]

    monkeypatch.setattr(backends, "ProcessPoolExecutor", make)
    b = backends.LocalPoolBackend(2)
    got = 0
    for _item, _res in b.map_unordered(abs, range(10_000)):
        pools[0].live -= 1
        got += 1
    assert got == 10_000 and pools[0].peak <= 4 and pools[0].workers == 2


@pytest.mark.parametrize("jobs", [-5, 0, 100_000])
def test_jobs_outside_one_to_four_per_core_is_refused(jobs):
    from prefixbench.study.backends import make_backend

    with pytest.raises(ScenarioError, match=r"--jobs.*out of range.*give 1 to \d+"):
        make_backend("local", jobs=jobs)


def test_a_pool_never_starts_more_workers_than_points(monkeypatch):
    from prefixbench.study import backends

    pools = []
    monkeypatch.setattr(
        backends,
        "ProcessPoolExecutor",
        lambda *a, **kw: pools.append(_CountingPool(**kw)) or pools[-1],
    )
    jobs = min(8, backends.check_jobs(None) * 4)
    list(backends.LocalPoolBackend(jobs).map_unordered(abs, [1, 2]))
    assert pools[0].workers == 2


def test_a_sweep_grid_over_the_cap_is_refused_unless_raised():
    from prefixbench.study.grid import build_spec

    base = {"models": ["qwen2-0.5b"], "workloads": ["tool_call"], "budgets": [0.5]}
    with pytest.raises(ScenarioError, match=r"100,000 runs exceed the cap of 20,000.*--max-runs"):
        build_spec(base, seeds=list(range(100_000)), policies=["recompute_on_decode"])
    spec = build_spec(
        base, seeds=list(range(30_000)), policies=["recompute_on_decode"], max_runs=30_000
    )
    assert len(spec.points()) == 30_000


def test_a_map_over_the_cap_is_refused_before_any_simulation():
    from prefixbench.study.decision_map import MapSpec, run_map

    with pytest.raises(ScenarioError, match=r"map grid.*exceed the cap"):
        run_map(MapSpec(model="qwen2-0.5b", seeds=1_000_000, nx=2, ny=2))
