"""Shared by every measurement: the repository root, the seed workloads and policies, the
targets, statistics, the machine record and child processes of run.py.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RUN_PY = ROOT / "benchmarks" / "run.py"  # child modes re-run the entry script


POLICIES = ("transfer_per_request", "recompute_on_decode", "replicate_hotset", "replicate_all_lru")


WORKLOADS = ("enterprise_hotset", "long_context_support", "medium_chat", "tool_call")


TARGETS = {  # the speed targets of docs/performance.md "Targets at a glance"
    "study_wall_s": ("<=", 4.0),
    "timeline_over_run": ("<=", 1.5),
    "cold_first_over_warm_sweep_s": ("<=", 3.0),  # first sweep after install - the second
    "fast_requests_per_s_per_core_min": (">=", 250_000.0),
    "million_synthetic_wall_s": ("<=", 10.0),
    "million_trace_wall_s": ("<=", 5.0),
    "million_peak_rss_mb_max": ("<=", 2048.0),
    "run_1m_all_policies_wall_s": ("<=", 10.0),
    "run_10m_one_policy_wall_s": ("<=", 30.0),
    "run_10m_one_policy_peak_rss_mb": ("<=", 4096.0),
    "events_over_floor_max": ("<=", 3.0),
    "help_wall_s": ("<=", 0.2),
    "startup_first_run_cpu_s": ("<=", 0.3),
    "run_all_policies_wall_s": ("<=", 0.8),
    "blis_w1_wall_ratio": (">=", 15.0),
}


# An installed package has its bytecode compiled (pip writes the .pyc files); a process
# that may not write them compiles prefixbench's ~115 imported sources from scratch, about
# 0.2 CPU-s of every fresh process, which no user pays. So the children may write bytecode
# (into the source tree's __pycache__, git-ignored), and the figures are an installed user's.
DONT_WRITE_BYTECODE_WAS = os.environ.pop("PYTHONDONTWRITEBYTECODE", None)


def stats(xs: list[float]) -> dict:
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs), "n": len(xs)}


def default_trace() -> Path:
    for p in (
        ROOT.parent / "shared" / "traces" / "conversation_trace.jsonl",
        ROOT / "tests" / "data" / "conversation_trace_head300.jsonl",
    ):
        if p.is_file():
            return p
    raise SystemExit("no Mooncake trace found; pass --trace")


def machine_info() -> dict:
    import numpy as np

    cpu = platform.processor()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        import numba

        numba_v = numba.__version__
    except ImportError:
        numba_v = None
    import polars as pl

    return {
        "nproc": os.cpu_count(),
        "cpu_model": cpu,
        "platform": platform.platform(),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "numba": numba_v,
        "polars": pl.__version__,
        "OPENBLAS_CORETYPE": os.environ.get("OPENBLAS_CORETYPE"),
        "NUMBA_DISABLE_JIT": os.environ.get("NUMBA_DISABLE_JIT"),
        "PYTHONDONTWRITEBYTECODE (unset for the children)": DONT_WRITE_BYTECODE_WAS,
        "memory_gb": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 1e9, 1),
    }


def product_engine() -> str:
    """Whether the engine runs compiled (numba) or interpreted (NUMBA_DISABLE_JIT=1)."""
    from prefixbench.engine import loop

    return "compiled" if hasattr(loop.run_disaggregated, "py_func") else "interpreted"


def child(argv: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(RUN_PY), *argv],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=os.environ.copy(),
    )


def run_child(argv: list[str], wrap: bool = False) -> dict:
    """Run a child mode of this script; return its JSON (plus the process wall time)."""
    t = time.perf_counter()
    p = child((["--wrap"] if wrap else []) + argv)
    wall = time.perf_counter() - t
    if p.returncode != 0:
        raise RuntimeError(f"child {argv} failed:\n{p.stderr[-3000:]}")
    out = json.loads(p.stdout.strip().splitlines()[-1])
    out["process_wall_s"] = wall
    return out
