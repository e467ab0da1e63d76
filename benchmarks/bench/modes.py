"""The child modes run.py runs itself in: a wrapper that measures its child's peak memory, one
study, one million-request run.
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .common import ROOT, RUN_PY, product_engine


def mode_wrap(argv: list[str]) -> None:
    """Run the child given by ``argv``; add its peak RSS, read from RUSAGE_CHILDREN (this
    process has no other child)."""
    p = subprocess.run(
        [sys.executable, str(RUN_PY), *argv],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    if p.returncode != 0:
        sys.stderr.write(p.stderr)
        raise SystemExit(p.returncode)
    out = json.loads(p.stdout.strip().splitlines()[-1])
    out["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024.0
    print(json.dumps(out))


def mode_study(spec_json: str) -> None:
    """One sweep into a fresh temporary directory, 2 workers."""
    t0 = time.perf_counter()
    from prefixbench.study.grid import SweepSpec
    from prefixbench.study.sweep import run_sweep

    spec = SweepSpec.model_validate(json.loads(spec_json))
    t1 = time.perf_counter()
    with tempfile.TemporaryDirectory() as d:
        run_sweep(spec, Path(d), jobs=2)
        t2 = time.perf_counter()
    runs = len(spec.points()) * len(spec.policies)
    print(
        json.dumps(
            {"runs": runs, "import_s": t1 - t0, "wall_s": t2 - t1, "engine": product_engine()}
        )
    )


def mode_million(kind: str, policy: str, trace: str) -> None:
    """One 1,000,000-request run: workload, prepare, simulate, per-request table and summary."""
    T = time.perf_counter
    t0 = T()
    import prefixbench.system.runner as runner
    from prefixbench.metrics.summary import requests_frame, summarize
    from prefixbench.scenario.loader import load_scenario
    from prefixbench.system.runner import prepare, simulate_policy

    t1 = T()
    phases = {}
    if kind == "synthetic":
        s = load_scenario("enterprise_hotset", ["run.requests=1000000"])
    else:
        from prefixbench.workload.controls import tile

        s = load_scenario("trace_replay", [], trace=trace)
        orig = runner.build_requests

        def tiled(sc):  # the trace's requests, tiled to 1M (prepare has no hook for this)
            ta = T()
            req, notes = orig(sc)
            tb = T()
            req = tile(req, 1_000_000)
            phases["read_trace_s"], phases["tile_s"] = tb - ta, T() - tb
            return req, notes

        runner.build_requests = tiled
    t2 = T()
    prep = prepare(s)
    t3 = T()
    res = simulate_policy(prep, policy)
    t4 = T()
    from prefixbench.metrics.bound import _resident

    _resident(prep)  # the bound's schedules (memoized for summarize)
    phases["bound_s"] = T() - t4
    # above run.hindsight_max_requests the Belady schedule is skipped (docs/model/bounds.md)
    phases["hindsight"] = runner.hindsight_on(prep.scenario, len(prep.requests))
    df = requests_frame(prep, policy, res)
    row = summarize(prep, policy, df, res)
    t5 = T()
    out = {
        "kind": kind,
        "policy": policy,
        "requests": len(prep.requests),
        "import_s": t1 - t0,
        "prepare_s": t3 - t2,
        "simulate_s": t4 - t3,
        "metrics_s": t5 - t4,  # the bound included
        "run_s": t5 - t1,  # scenario → summary row, interpreter start-up and imports excluded
        "completed": row["completed"],
        "rejected": row["rejected"],
        "self_peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,
        "engine": product_engine(),
        **phases,
    }
    print(json.dumps(out))
