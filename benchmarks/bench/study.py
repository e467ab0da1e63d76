"""The study: the default sweep's wall time, cost against grid size, and a million requests
(synthetic and a tiled trace).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from .common import run_child, stats

GRIDS = {  # sweep grids of 1, 7, 28, 112 runs (the default study: 672)
    1: {
        "models": ["qwen2-0.5b"],
        "workloads": ["enterprise_hotset"],
        "budgets": [0.35],
        "seeds": [0],
        "policies": ["replicate_all_lru"],
    },
    7: {
        "models": ["qwen2-0.5b"],
        "workloads": ["enterprise_hotset"],
        "budgets": [0.35],
        "seeds": [0],
    },
    28: {"models": ["qwen2-0.5b"], "workloads": ["enterprise_hotset"], "seeds": [0]},
    112: {"budgets": [0.35, 1.0], "seeds": [0]},
}


def bench_study(repeats: int) -> dict:
    """The default study (2 workers) in a fresh process per repeat: wall time, and CPU
    seconds of every process it started (workers and fork server included)."""
    from prefixbench.study.grid import SweepSpec

    spec = SweepSpec()
    walls, procs, cpus, engines = [], [], [], set()
    for i in range(repeats):
        r, cpu = _with_descendants_cpu(lambda: run_child(["--child", "study", "{}"]))
        walls.append(r["wall_s"])
        procs.append(r["process_wall_s"])
        cpus.append(cpu)
        engines.add(r["engine"])
        print(
            f"  repeat {i + 1}: run_sweep {r['wall_s']:.2f} s "
            f"(process {r['process_wall_s']:.2f} s, CPU {cpu:.2f} s, "
            f"engine {r['engine']}, load {os.getloadavg()[0]:.1f})",
            flush=True,
        )
    return {
        "runs": len(spec.points()) * len(spec.policies),
        "jobs": 2,
        "wall_s": stats(walls),
        "process_wall_s": stats(procs),
        "cpu_s": stats(cpus),
        "engine": sorted(engines),
    }


def _with_descendants_cpu(fn):
    """``fn()`` and the CPU seconds of every process it started, grandchildren included:
    this process becomes their subreaper (Linux), so a fork server and its workers, left
    when the sweep exits, are reaped here and counted."""
    import ctypes
    import resource
    import time

    try:
        ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
    except (OSError, AttributeError):
        pass
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    result = fn()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # the orphans exit after the sweep: reap them
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            break
        if pid == 0:
            time.sleep(0.02)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    return result, cpu


def bench_scaling_grid(sizes: list[int], study: dict) -> dict:
    rows = []
    for runs in sizes:
        r = run_child(["--child", "study", json.dumps(GRIDS[runs])])
        assert r["runs"] == runs, r
        rows.append({"runs": runs, "wall_s": r["wall_s"]})
        print(f"  {runs:>4d} runs: {r['wall_s']:.2f} s", flush=True)
    rows.append({"runs": study["runs"], "wall_s": study["wall_s"]["median"]})
    import numpy as np

    x = np.array([r["runs"] for r in rows], dtype=float)
    y = np.array([r["wall_s"] for r in rows])
    per_run, fixed = np.polyfit(x, y, 1)
    return {
        "rows": rows,
        "linear_fit": {"fixed_s": float(fixed), "per_run_s": float(per_run)},
        "note": "wall = fixed (worker start-up, imports, combine) + per_run x runs",
    }


def bench_million(policies: list[str], trace: Path) -> dict:
    out = {}
    for kind in ("synthetic", "trace"):
        rows = []
        for pol in policies:
            r = run_child(["--child", "million", kind, pol, str(trace)], wrap=True)
            rows.append(r)
            extra = (
                f", read {r['read_trace_s']:.2f} s + tile {r['tile_s']:.2f} s"
                if kind == "trace"
                else ""
            )
            print(
                f"  {kind:9s} {pol:22s} run {r['run_s']:6.2f} s "
                f"(prepare {r['prepare_s']:.2f}{extra}, simulate {r['simulate_s']:.2f}, "
                f"metrics {r['metrics_s']:.2f}), process {r['process_wall_s']:.2f} s, "
                f"peak RSS {r['peak_rss_mb']:.0f} MB",
                flush=True,
            )
        out[kind] = {
            "rows": rows,
            "run_s": stats([r["run_s"] for r in rows]),
            "simulate_s": stats([r["simulate_s"] for r in rows]),
            "peak_rss_mb": stats([r["peak_rss_mb"] for r in rows]),
        }
    out["trace_file"] = str(trace)
    return out
