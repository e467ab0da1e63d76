"""Large runs and the timeline, as a user runs them: `prefixbench run` in a fresh process,
its wall time, CPU time and peak RSS read by ``/usr/bin/time -v`` (or ``getrusage`` of the
child when that tool is missing).
"""

from __future__ import annotations

import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .common import ROOT, run_child, stats

RUN_1M = ["run", "--set", "run.requests=1000000"]  # the default scenario, every policy
RUN_10M = ["run", "--set", "run.requests=10000000", "-p", "replicate_all_lru"]


def _prefixbench() -> list[str]:
    exe = Path(sys.executable).with_name("prefixbench")
    return [str(exe)] if exe.is_file() else [sys.executable, "-m", "prefixbench.cli"]


def timed(argv: list[str], tmp: str) -> dict:
    """One ``prefixbench`` command in a fresh process: wall, CPU (user + sys) and peak RSS."""
    cmd = _prefixbench() + [a.replace("{tmp}", tmp) for a in argv]
    gnu = shutil.which("time") or ("/usr/bin/time" if os.path.exists("/usr/bin/time") else None)
    before = os.times()
    t = time.perf_counter()
    p = subprocess.run(
        ([gnu, "-v"] if gnu else []) + cmd, capture_output=True, text=True, cwd=ROOT,
        env={**os.environ, "COLUMNS": "80"},
    )  # fmt: skip
    wall = time.perf_counter() - t
    after = os.times()
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{p.stderr[-3000:]}")
    cpu = (after.children_user - before.children_user) + (
        after.children_system - before.children_system
    )
    rss = re.search(r"Maximum resident set size \(kbytes\): (\d+)", p.stderr)
    return {
        "command": " ".join(["prefixbench", *argv]),
        "wall_s": wall,
        "cpu_s": cpu,
        "peak_rss_mb": int(rss.group(1)) / 1024 if rss else None,
    }


def bench_timeline(repeats: int) -> dict:
    """`run` against `run --timeline` (default scenario, every policy), alternated, fresh
    processes; the ratio of the medians."""
    plain, tl = [], []
    with tempfile.TemporaryDirectory() as tmp:
        timed(["run", "--out", "{tmp}/warm"], tmp)  # load the compiled engine once
        for _ in range(repeats):
            plain.append(timed(["run", "--out", "{tmp}/run"], tmp))
            tl.append(timed(["run", "--out", "{tmp}/tl", "--timeline", "{tmp}/tl.json"], tmp))
    out = {}
    for key in ("wall_s", "cpu_s"):
        a = statistics.median(r[key] for r in plain)
        b = statistics.median(r[key] for r in tl)
        out[key] = {"run": stats([r[key] for r in plain]), "timeline": stats([r[key] for r in tl]),
                    "ratio": b / a}  # fmt: skip
    print(
        f"  run {out['wall_s']['run']['median']:.2f} s, --timeline "
        f"{out['wall_s']['timeline']['median']:.2f} s wall: {out['wall_s']['ratio']:.2f}x "
        f"(CPU {out['cpu_s']['ratio']:.2f}x)",
        flush=True,
    )
    return out


def bench_scale(trace: Path, ten_million: bool = True) -> dict:
    """Once each: 1M requests under every policy, 10M under one (the CLI, requests.parquet
    written), and the Mooncake trace tiled to 1M requests (scenario to summary row)."""
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        runs = [("run_1m_all_policies", RUN_1M)]
        if ten_million:
            runs.append(("run_10m_one_policy", RUN_10M))
        for key, argv in runs:
            out[key] = r = timed([*argv, "--out", "{tmp}/" + key], tmp)
            print(
                f"  {r['command']}: {r['wall_s']:.1f} s wall, {r['cpu_s']:.1f} s CPU, "
                f"peak RSS {r['peak_rss_mb'] or 0:.0f} MB",
                flush=True,
            )
            shutil.rmtree(Path(tmp) / key, ignore_errors=True)
    r = run_child(["--child", "million", "trace", "replicate_all_lru", str(trace)], wrap=True)
    out["trace_1m"] = r
    print(
        f"  Mooncake trace tiled to 1M, replicate_all_lru: {r['run_s']:.1f} s (prepare "
        f"{r['prepare_s']:.1f}, simulate {r['simulate_s']:.1f}, metrics {r['metrics_s']:.1f}, "
        f"bound {r['bound_s']:.1f}{'' if r.get('hindsight') else ' without hindsight'}), "
        f"peak RSS {r['peak_rss_mb']:.0f} MB",
        flush=True,
    )
    return out
