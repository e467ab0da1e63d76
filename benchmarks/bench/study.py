"""The study: the default sweep's wall time, cost against grid size, and a million requests
(synthetic and a tiled trace).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from .common import run_child, stats

GRIDS = {  # sweep grids of 1, 4, 16, 64 runs (384: the default study)
    1: {
        "models": ["qwen2-0.5b"],
        "workloads": ["enterprise_hotset"],
        "budgets": [0.35],
        "seeds": [0],
        "policies": ["replicate_all_lru"],
    },
    4: {
        "models": ["qwen2-0.5b"],
        "workloads": ["enterprise_hotset"],
        "budgets": [0.35],
        "seeds": [0],
    },
    16: {"models": ["qwen2-0.5b"], "workloads": ["enterprise_hotset"], "seeds": [0]},
    64: {"budgets": [0.35, 1.0], "seeds": [0]},
}


def bench_study(repeats: int) -> dict:
    walls, procs, engines = [], [], set()
    for i in range(repeats):
        r = run_child(["--child", "study", "{}"])
        walls.append(r["wall_s"])
        procs.append(r["process_wall_s"])
        engines.add(r["engine"])
        print(
            f"  repeat {i + 1}: run_sweep {r['wall_s']:.2f} s "
            f"(process {r['process_wall_s']:.2f} s, "
            f"engine {r['engine']}, load {os.getloadavg()[0]:.1f})",
            flush=True,
        )
    return {
        "runs": 384,
        "jobs": 2,
        "wall_s": stats(walls),
        "process_wall_s": stats(procs),
        "engine": sorted(engines),
    }


def bench_scaling_grid(sizes: list[int], study: dict) -> dict:
    rows = []
    for runs in sizes:
        r = run_child(["--child", "study", json.dumps(GRIDS[runs])])
        assert r["runs"] == runs, r
        rows.append({"runs": runs, "wall_s": r["wall_s"]})
        print(f"  {runs:>4d} runs: {r['wall_s']:.2f} s", flush=True)
    rows.append({"runs": 384, "wall_s": study["wall_s"]["median"]})
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
