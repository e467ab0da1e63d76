"""Commands as a user runs them, each in a fresh process: `run`, `--timeline`, `compare`,
`capacity`, the disagg study, the first run after installing, start-up (phase by phase, and
per command) and `--help`.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .common import ROOT, stats

COMMANDS = {
    "run": ["run", "--out", "{tmp}/run"],
    "run_timeline": ["run", "--out", "{tmp}/run", "--timeline", "{tmp}/tl.json"],
    "compare": ["compare"],
    "capacity": ["capacity"],
    "disagg_study": ["sweep", "--study", "disagg", "--out", "{tmp}/disagg"],
}


def baseline_source(ref: str, into: Path) -> Path:
    """The ``src`` tree of git revision ``ref``, extracted into ``into``."""
    arch = subprocess.run(
        ["git", "-C", str(ROOT), "archive", ref, "src"], capture_output=True, check=True
    )
    subprocess.run(["tar", "-x", "-C", str(into)], input=arch.stdout, check=True)
    return into / "src"


def time_command(argv: list[str], src: Path | None, repeats: int) -> dict:
    """Median wall time of ``prefixbench argv`` in fresh processes, on the product or on the
    source tree ``src`` (whose numba cache ``warm`` filled first)."""
    env = {**os.environ, "COLUMNS": "100"}
    if src is not None:
        env["PYTHONPATH"] = str(src)
    walls = []
    for _ in range(repeats):
        with tempfile.TemporaryDirectory() as tmp:
            cmd = [sys.executable, "-m", "prefixbench", *(a.format(tmp=tmp) for a in argv)]
            t = time.perf_counter()
            p = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp)
            walls.append(time.perf_counter() - t)
        if p.returncode != 0:
            return {"error": p.stderr[-1500:]}
    return stats(walls)


def warm(src: Path | None) -> None:
    """One small run of each mode, so the timed runs load compiled code from the cache."""
    for extra in ([], ["--set", "cluster.mode=colocated"]):
        time_command(["run", "--set", "run.requests=300", "--out", "{tmp}/w", *extra], src, 1)


def bench_commands(
    repeats: int, baseline: str | None, baseline_repeats: int, after: str | None
) -> dict:
    out: dict = {
        "baseline": baseline,
        "after_revision": after or "working tree",
        "repeats": repeats,
        "baseline_repeats": baseline_repeats,
        "commands": {k: " ".join(v) for k, v in COMMANDS.items()},
    }
    with tempfile.TemporaryDirectory() as d, tempfile.TemporaryDirectory() as d2:
        src = baseline_source(baseline, Path(d)) if baseline else None
        now = baseline_source(after, Path(d2)) if after else None
        warm(now)
        if src is not None:
            warm(src)
        for name, argv in COMMANDS.items():
            row = {"after": time_command(argv, now, repeats)}
            if src is not None:
                row["before"] = time_command(argv, src, baseline_repeats)
                if "median" in row["before"] and "median" in row["after"]:
                    row["after_over_before"] = row["after"]["median"] / row["before"]["median"]
            out[name] = row
            before = row.get("before", {}).get("median")
            after = row["after"].get("median", float("nan"))
            ratio = row.get("after_over_before", float("nan"))
            tail = f"   before {before:7.2f} s   after/before {ratio:.2f}" if before else ""
            print(f"  {name:14s} after {after:7.2f} s{tail}", flush=True)
            for side in ("after", "before"):
                if "error" in row.get(side, {}):
                    print(f"    {side} failed: {row[side]['error'][-300:]}", flush=True)
    run, tl = out["run"]["after"], out["run_timeline"]["after"]
    if "median" in run and "median" in tl:
        out["timeline_over_run"] = tl["median"] / run["median"]
        print(f"  run --timeline / run: {out['timeline_over_run']:.2f}")
    return out


def bench_cold_start() -> dict:
    """`pip install .` into a fresh virtualenv (dependencies from the shared base; the build
    compiles the engine into the package), then the first `prefixbench sweep` and a second."""
    base_sp = Path(
        os.environ.get("PREFIXBENCH_BASE_SITE", "/work/venv-base/lib/python3.11/site-packages")
    )
    with tempfile.TemporaryDirectory() as d:
        venv = Path(d) / "venv"
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        sp = next((venv / "lib").glob("python3*/site-packages"))
        (sp / "base.pth").write_text(str(base_sp) + "\n")
        t = time.perf_counter()  # the build compiles the engine into the package (setup.py)
        subprocess.run(
            [str(venv / "bin" / "pip"), "install", "-q", "--no-deps", str(ROOT)],
            check=True, capture_output=True,
        )  # fmt: skip
        install_s = time.perf_counter() - t
        print(f"  pip install . (engine compile included): {install_s:.2f} s", flush=True)
        walls = []
        for label in ("first", "second"):
            with tempfile.TemporaryDirectory() as out:
                t = time.perf_counter()
                p = subprocess.run(
                    [str(venv / "bin" / "prefixbench"), "sweep", "--out", out],
                    capture_output=True, text=True, cwd=d,
                )  # fmt: skip
                walls.append(time.perf_counter() - t)
            if p.returncode != 0:
                return {"error": p.stderr[-1500:]}
            print(f"  {label} sweep after install: {walls[-1]:.2f} s", flush=True)
    return {
        "install_s": install_s,
        "first_sweep_s": walls[0],
        "second_sweep_s": walls[1],
        "base_site": str(base_sp),
    }


# One process's fixed cost, phase by phase, in CPU seconds (a loaded machine inflates wall
# time, not these): imports, the engine check, the engine's import, and a 20-request run
# (its first call loads the run loop from the cache and initialises numba's CPU target).
_STARTUP = """
import json, time
T = time.process_time
out, t0 = {}, T()
def mark(k):
    out[k] = round(T() - t0, 4)
import numpy; mark("numpy")
import numba; mark("numba")
from prefixbench.support.firstrun import engine_compiled
ok = engine_compiled(); mark("engine_check")
import prefixbench.engine; mark("engine_import")
import polars; mark("polars")
from prefixbench.study.runs import run_scenario; mark("study_import")
from prefixbench.scenario.loader import load_scenario
s = load_scenario(None, ["run.requests=20", "run.warmup_requests=2"])
run_scenario(s, ["transfer_per_request"], track_gaps=True); mark("first_run")
out["engine_compiled"] = ok
print(json.dumps(out))
"""


def bench_startup(n: int = 3) -> dict:
    """Cumulative CPU seconds at each start-up phase of a fresh process (median of n), and
    the CPU seconds of `--help` calls."""
    rows = []
    for _ in range(n):
        p = subprocess.run([sys.executable, "-c", _STARTUP], capture_output=True, text=True,
                           cwd=ROOT, check=True)  # fmt: skip
        rows.append(json.loads(p.stdout.strip().splitlines()[-1]))
    out = {k: stats([r[k] for r in rows]) for k in rows[0] if k != "engine_compiled"}
    out["engine_compiled"] = all(r["engine_compiled"] for r in rows)
    exe = Path(sys.executable).with_name("prefixbench")
    base = [str(exe)] if exe.exists() else [sys.executable, "-m", "prefixbench"]
    for label, argv in (("help", ["--help"]), ("run_help", ["run", "--help"])):
        cpu = []
        for _ in range(n):
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            subprocess.run(base + argv, capture_output=True, check=True, cwd=ROOT)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
        out[f"{label}_cpu_s"] = stats(cpu)
    return out


def bench_help(n: int = 5) -> dict:
    exe = Path(sys.executable).with_name("prefixbench")
    cmd = [str(exe), "--help"] if exe.exists() else [sys.executable, "-m", "prefixbench", "--help"]
    walls = []
    for _ in range(n):
        t = time.perf_counter()
        subprocess.run(cmd, capture_output=True, check=True, cwd=ROOT)
        walls.append(time.perf_counter() - t)
    return {"command": " ".join(cmd), "wall_s": stats(walls)}


# Each command with the least work it can do, in a fresh process: what a user pays before
# (and around) the work itself. The runs are 20 requests, so the figures are start-up.
_TINY = ["--set", "run.requests=20", "--set", "run.warmup_requests=2"]
STARTUP_COMMANDS = {
    "help": ["--help"],
    "run_help": ["run", "--help"],
    "cost": ["cost", "qwen2-0.5b"],
    "run": ["run", "--policy", "transfer_per_request", *_TINY, "--out", "{tmp}/r"],
    "sweep": ["sweep", "--models", "qwen2-0.5b", "--workloads", "tool_call", "--budgets", "1.0",
              "--seeds", "0", "--policies", "transfer_per_request", *_TINY, "--jobs", "1",
              "--out", "{tmp}/s"],
    "recommend": ["recommend", "-m", "qwen2-0.5b", "-w", "tool_call", *_TINY, "--jobs", "1"],
    "run_10k_all_policies": ["run", "--out", "{tmp}/r"],  # the full default run, for its target
}  # fmt: skip


def bench_command_startup(n: int = 3) -> dict:
    """CPU seconds (user + system) and wall seconds of each of ``STARTUP_COMMANDS`` in a
    fresh process, median of ``n`` (a warm-up call first fills caches)."""
    exe = Path(sys.executable).with_name("prefixbench")
    base = [str(exe)] if exe.exists() else [sys.executable, "-m", "prefixbench"]
    env = {**os.environ, "COLUMNS": "100"}
    out: dict = {"repeats": n, "commands": {k: " ".join(v) for k, v in STARTUP_COMMANDS.items()}}
    for name, argv in STARTUP_COMMANDS.items():
        cpu, walls = [], []
        for i in range(n + 1):
            with tempfile.TemporaryDirectory() as tmp:
                cmd = base + [a.format(tmp=tmp) for a in argv]
                before = resource.getrusage(resource.RUSAGE_CHILDREN)
                t = time.perf_counter()
                p = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp)
                wall = time.perf_counter() - t
                after = resource.getrusage(resource.RUSAGE_CHILDREN)
            if p.returncode != 0:
                out[name] = {"error": p.stderr[-1500:]}
                break
            if i:  # the first call warms the page cache and numba's index files
                walls.append(wall)
                cpu.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
        else:
            out[name] = {"cpu_s": stats(cpu), "wall_s": stats(walls)}
            print(
                f"  {name:22s} cpu {out[name]['cpu_s']['median']:6.3f} s   "
                f"wall {out[name]['wall_s']['median']:6.3f} s",
                flush=True,
            )
    return out
