#!/usr/bin/env python
"""prefixbench performance benchmark (BRIEF §7): a benchmark, not a timed test.

    python benchmarks/run.py [--quick] [--out benchmarks/results.json]

Measures, and prints and writes as JSON (median / min / max over repeats):

* throughput: simulated requests per second per core on one long run of each seed workload
  and policy (completed + rejected requests), by wall clock and by CPU time;
* commands: wall time of `run`, `run --timeline`, `compare`, `capacity` and
  `sweep --study disagg` in fresh processes (median of 3); with ``--baseline REF`` the same
  commands also run on the source of git revision REF, so before/after ratios come from one
  run on one machine state;
* cold start: the first `prefixbench sweep` after `pip install .` into a fresh virtualenv
  (compile included);
* study: wall time of the full default sweep (576 runs, 10,000 requests each) with 2 workers,
  each repeat in a fresh process writing into a fresh temporary directory;
* million: a 1,000,000-request synthetic run and a real trace tiled to 1,000,000 requests,
  each in its own process (phase timings, wall, and peak RSS read with
  ``resource.getrusage(RUSAGE_CHILDREN)`` by a wrapper process whose only child is the run);
* help: ``prefixbench --help`` wall time (fresh process, median of 5);
* scaling: cost against requests (10k → 1M) and against grid size (1 → 384 runs), with the
  log-log slope (1.0 = linear);
* compile: the engine's cold numba compile (empty cache directory) and warm load.

``--only a,b`` runs only the named sections (compile, throughput, study, commands, cold, startup,
help, million, scaling).

The machine is recorded too (CPU, cores, versions, load average: on a shared machine the
load of other processes inflates wall times; CPU-time figures are less affected).
Environment variables such as OPENBLAS_CORETYPE are passed through unchanged.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
POLICIES = ("transfer_per_request", "recompute_on_decode", "replicate_hotset", "replicate_all_lru")
WORKLOADS = ("enterprise_hotset", "long_context_support", "medium_chat", "tool_call")
TARGETS = {
    "study_wall_s": ("<=", 8.0),
    "timeline_over_run": ("<=", 2.0),
    "cold_first_sweep_s": ("<=", 20.0),
    "fast_requests_per_s_per_core_min": (">=", 250_000.0),
    "million_synthetic_wall_s": ("<=", 10.0),
    "million_trace_wall_s": ("<=", 10.0),
    "million_peak_rss_mb_max": ("<=", 2048.0),
    "help_wall_s": ("<=", 0.5),
}


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


# ---------------------------------------------------------------- machine


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
        "memory_gb": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 1e9, 1),
    }


def product_engine() -> str:
    """Whether the engine runs compiled (numba) or interpreted (NUMBA_DISABLE_JIT=1)."""
    from prefixbench.engine import loop

    return "compiled" if hasattr(loop.run_disaggregated, "py_func") else "interpreted"


# ---------------------------------------------------------------- child processes


def child(argv: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), *argv],
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


def mode_wrap(argv: list[str]) -> None:
    """Run the child given by ``argv``; add its peak RSS, read from RUSAGE_CHILDREN (this
    process has no other child)."""
    p = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), *argv],
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
        "metrics_s": t5 - t4,
        "run_s": t5 - t1,  # scenario → summary row, interpreter start-up and imports excluded
        "completed": row["completed"],
        "rejected": row["rejected"],
        "self_peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,
        "engine": product_engine(),
        **phases,
    }
    print(json.dumps(out))


COMPILE_PROBE = """
import json, time
t0 = time.perf_counter()
import prefixbench.engine
t1 = time.perf_counter()
from prefixbench.scenario.loader import load_scenario
from prefixbench.system.runner import prepare, simulate_policy
prep = prepare(load_scenario("medium_chat", ["run.requests=200", "run.warmup_requests=0"]))
co = prepare(load_scenario("medium_chat", ["run.requests=200", "run.warmup_requests=0",
                                           "cluster.mode=colocated"]))
t2 = time.perf_counter()
simulate_policy(prep, "replicate_all_lru")
t3 = time.perf_counter()
simulate_policy(co, "transfer_per_request")
t4 = time.perf_counter()
print(json.dumps({"import_s": t1 - t0, "first_call_s": t3 - t2, "colocated_first_call_s": t4 - t3,
                  "total_s": (t1 - t0) + (t3 - t2)}))
"""


def bench_compile() -> dict:
    """Cold compile (empty NUMBA_CACHE_DIR) then warm load from that cache, fresh processes."""
    with tempfile.TemporaryDirectory() as d:
        env = {**os.environ, "NUMBA_CACHE_DIR": d}
        out = {}
        for label in ("cold", "warm", "warm2"):
            t = time.perf_counter()
            p = subprocess.run(
                [sys.executable, "-c", COMPILE_PROBE],
                capture_output=True,
                text=True,
                env=env,
                cwd=ROOT,
            )
            if p.returncode != 0:
                return {"error": p.stderr[-2000:]}
            r = json.loads(p.stdout.strip().splitlines()[-1])
            r["process_wall_s"] = time.perf_counter() - t
            out[label] = r
    return {
        "cold_compile_s": out["cold"]["total_s"],
        "warm_load_s": min(out["warm"]["total_s"], out["warm2"]["total_s"]),
        "detail": out,
    }


# ---------------------------------------------------------------- in-process measurements


def bench_throughput(n: int, repeats: int) -> dict:
    import dataclasses

    from prefixbench.engine import simulate
    from prefixbench.scenario.loader import load_scenario
    from prefixbench.system.runner import prepare

    rows = []
    for wl in WORKLOADS:
        prep = prepare(load_scenario(wl, [f"run.requests={n}"]))
        for pol in POLICIES:
            cfg = dataclasses.replace(prep.base, policy=pol)
            simulate(prep.requests.slice(0, 2000), cfg)  # load the compiled code
            wall, cpu = [], []
            for _ in range(repeats):
                t, c = time.perf_counter(), time.process_time()
                res = simulate(prep.requests, cfg)
                cpu.append(time.process_time() - c)
                wall.append(time.perf_counter() - t)
            out = res.columns["outcome"]
            counted = int(((out == 1) | (out == 2)).sum())
            rows.append(
                {
                    "workload": wl,
                    "policy": pol,
                    "requests": counted,
                    "fast_wall_s": stats(wall),
                    "fast_cpu_s": stats(cpu),
                    "fast_rps_wall": counted / statistics.median(wall),
                    "fast_rps_cpu": counted / statistics.median(cpu),
                }
            )
            print(
                f"  {wl:22s} {pol:22s} {rows[-1]['fast_rps_cpu'] / 1e3:8.0f}k req/s (cpu) "
                f"{rows[-1]['fast_rps_wall'] / 1e3:8.0f}k (wall)",
                flush=True,
            )
    return {
        "n": n,
        "repeats": repeats,
        "rows": rows,
        "fast_rps_cpu": stats([r["fast_rps_cpu"] for r in rows]),
        "fast_rps_wall": stats([r["fast_rps_wall"] for r in rows]),
    }


# ---------------------------------------------------------------- commands, before and after

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


def slope(xs: list[float], ys: list[float]) -> float:
    """Least-squares slope of log y on log x (1.0 = cost linear in x)."""
    import numpy as np

    return float(np.polyfit(np.log(xs), np.log(ys), 1)[0])


def bench_scaling_requests(sizes: list[int], repeats: int) -> dict:
    import dataclasses

    from prefixbench.engine import simulate
    from prefixbench.scenario.loader import load_scenario
    from prefixbench.system.runner import prepare

    rows = []
    for n in sizes:
        t = time.perf_counter()
        prep = prepare(
            load_scenario(
                "enterprise_hotset", [f"run.requests={n}", f"run.warmup_requests={n // 10}"]
            )
        )
        t_prep = time.perf_counter() - t
        cfg = dataclasses.replace(prep.base, policy="replicate_all_lru")
        simulate(prep.requests.slice(0, min(n, 2000)), cfg)
        wall, cpu = [], []
        for _ in range(repeats):
            t, c = time.perf_counter(), time.process_time()
            simulate(prep.requests, cfg)
            cpu.append(time.process_time() - c)
            wall.append(time.perf_counter() - t)
        rows.append(
            {
                "requests": n,
                "prepare_s": t_prep,
                "simulate_wall_s": stats(wall),
                "simulate_cpu_s": stats(cpu),
                "us_per_request_cpu": 1e6 * statistics.median(cpu) / n,
            }
        )
        print(
            f"  {n:>9,d} requests: simulate {statistics.median(wall):7.3f} s wall, "
            f"{rows[-1]['us_per_request_cpu']:.2f} µs/request (cpu)",
            flush=True,
        )
    xs = [r["requests"] for r in rows]
    return {
        "workload": "enterprise_hotset",
        "policy": "replicate_all_lru",
        "rows": rows,
        "loglog_slope_simulate_cpu": slope(xs, [r["simulate_cpu_s"]["median"] for r in rows]),
        "loglog_slope_simulate_wall": slope(xs, [r["simulate_wall_s"]["median"] for r in rows]),
    }


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


# ---------------------------------------------------------------- main


def verdicts(r: dict) -> dict:
    m = r.get("million", {})
    g = lambda *keys: _dig(r, keys)  # noqa: E731
    figures = {
        "study_wall_s": g("study", "wall_s", "median"),
        "timeline_over_run": g("commands", "timeline_over_run"),
        "cold_first_sweep_s": g("cold", "first_sweep_s"),
        "fast_requests_per_s_per_core_min": g("throughput", "fast_rps_cpu", "min"),
        "million_synthetic_wall_s": m.get("synthetic", {}).get("run_s", {}).get("max"),
        "million_trace_wall_s": m.get("trace", {}).get("run_s", {}).get("max"),
        "million_peak_rss_mb_max": max(
            (m[k]["peak_rss_mb"]["max"] for k in ("synthetic", "trace") if k in m), default=None
        ),
        "help_wall_s": g("help", "wall_s", "median"),
    }
    out = {}
    for k, (op, target) in TARGETS.items():
        v = figures[k]
        ok = None if v is None else (v <= target if op == "<=" else v >= target)
        out[k] = {"value": v, "target": f"{op} {target:g}", "met": ok}
    return out


def _dig(d: dict, keys: tuple):
    for k in keys:
        if not isinstance(d, dict) or k not in d:
            return None
        d = d[k]
    return d


SECTIONS = (
    "compile", "throughput", "study", "commands", "cold", "help", "startup", "million", "scaling"
)  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--quick", action="store_true", help="fewer repeats and smaller sizes (a few minutes)"
    )
    ap.add_argument(
        "--out", default=str(ROOT / "benchmarks" / "results.json"), help="JSON output path"
    )
    ap.add_argument("--trace", default=None, help="Mooncake trace to tile to 1M requests")
    ap.add_argument("--baseline", default=None, help="git revision to time the commands against")
    ap.add_argument(
        "--baseline-repeats", type=int, default=1, help="repeats of each baseline command"
    )
    ap.add_argument(
        "--after", default=None, help="git revision to time as 'after' (default: working tree)"
    )
    ap.add_argument("--only", default=",".join(SECTIONS), help="comma-separated sections to run")
    ap.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    ap.add_argument("--wrap", action="store_true", help=argparse.SUPPRESS)
    args, rest = ap.parse_known_args()
    if args.wrap:
        mode_wrap([a for a in sys.argv[1:] if a != "--wrap"])
        return
    if args.child:
        name, *cargs = args.child
        {"study": mode_study, "million": mode_million}[name](*cargs)
        return

    quick = args.quick
    trace = Path(args.trace) if args.trace else default_trace()
    t_start = time.perf_counter()
    r: dict = {
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "quick": quick,
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "machine": machine_info(),
        "loadavg_start": os.getloadavg(),
    }
    print(
        f"machine: {r['machine']['nproc']} x {r['machine']['cpu_model']}, "
        f"python {r['machine']['python']}, numpy {r['machine']['numpy']}, "
        f"numba {r['machine']['numba']}; load {r['loadavg_start'][0]:.1f}"
    )
    r["engine_in_product_path"] = product_engine()
    print(f"engine: {r['engine_in_product_path']}")
    only = set(args.only.split(","))
    r["sections"] = sorted(only)

    if "compile" in only:
        print("compile (numba, fresh cache directory):", flush=True)
        r["compile"] = bench_compile()
        if "error" not in r["compile"]:
            print(
                f"  cold compile {r['compile']['cold_compile_s']:.2f} s, "
                f"warm load {r['compile']['warm_load_s']:.2f} s"
            )
    if "throughput" in only:
        print("throughput (one long run per workload and policy):", flush=True)
        r["throughput"] = bench_throughput(50_000 if quick else 200_000, 1 if quick else 3)
    if "study" in only:
        from prefixbench.study.grid import SweepSpec

        spec = SweepSpec()
        runs = len(spec.points()) * len(spec.policies)
        print(f"study (default sweep, {runs} runs, 2 workers):", flush=True)
        r["study"] = bench_study(1 if quick else 3)
    if "commands" in only:
        print(f"commands (fresh processes; baseline {args.baseline}):", flush=True)
        r["commands"] = bench_commands(
            1 if quick else 3, args.baseline, args.baseline_repeats, args.after
        )
    if "cold" in only:
        print("cold start (fresh virtualenv, pip install ., first sweep):", flush=True)
        r["cold"] = bench_cold_start()
    if "help" in only:
        print("help:", flush=True)
        r["help"] = bench_help()
        print(f"  prefixbench --help {r['help']['wall_s']['median']:.3f} s (median of 5)")
    if "startup" in only:
        print("start-up (CPU s, cumulative, median of 3):", flush=True)
        r["startup"] = st = bench_startup()
        print(
            "  " + ", ".join(f"{k} {v['median']:.3f}" for k, v in st.items() if isinstance(v, dict))
        )
    if "million" in only:
        print("1M-request runs (own process each):", flush=True)
        r["million"] = bench_million(["replicate_all_lru"] if quick else list(POLICIES), trace)
    if "scaling" in only:
        print("scaling with requests:", flush=True)
        sizes = (
            [10_000, 30_000, 100_000] if quick else [10_000, 30_000, 100_000, 300_000, 1_000_000]
        )
        r["scaling_requests"] = bench_scaling_requests(sizes, 1 if quick else 3)
        print(
            f"  log-log slope {r['scaling_requests']['loglog_slope_simulate_cpu']:.3f} (1 = linear)"
        )
        if "study" in r:
            print("scaling with grid size:", flush=True)
            r["scaling_grid"] = bench_scaling_grid(
                [1, 4, 16] if quick else [1, 4, 16, 64], r["study"]
            )
            fit = r["scaling_grid"]["linear_fit"]
            print(f"  wall ≈ {fit['fixed_s']:.2f} s + {fit['per_run_s'] * 1e3:.1f} ms x runs")

    r["loadavg_end"] = os.getloadavg()
    r["benchmark_wall_s"] = time.perf_counter() - t_start
    r["targets"] = verdicts(r)
    print("targets:")
    for k, v in r["targets"].items():
        mark = {True: "met", False: "MISSED", None: "n/a"}[v["met"]]
        val = "n/a" if v["value"] is None else f"{v['value']:,.3f}"
        print(f"  {k:36s} {val:>14s}  (target {v['target']}) {mark}")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(r, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
