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
* study: wall time of the full default sweep (672 runs, 10,000 requests each) with 2 workers,
  each repeat in a fresh process writing into a fresh temporary directory, and the CPU time
  of every process it starts (fork server and workers included);
* million: a 1,000,000-request synthetic run and a real trace tiled to 1,000,000 requests,
  each in its own process (phase timings, wall, and peak RSS read with
  ``resource.getrusage(RUSAGE_CHILDREN)`` by a wrapper process whose only child is the run);
* help: ``prefixbench --help`` wall time (fresh process, median of 5);
* startup: one process's fixed cost phase by phase (CPU seconds), and each command's CPU and
  wall time with the least work it can do (`--help`, `cost`, a 20-request `run`, `sweep`
  and `recommend`), plus the default `run` (10,000 requests, all policies);
* scaling: cost against requests (10k → 1M) and against grid size (1 → 672 runs), with the
  log-log slope (1.0 = linear);
* compile: the engine's cold numba compile (empty cache directory) and warm load;
* events: the engine's CPU ns per event against the decode batch, and a bare heap loop's;
* timeline: `run --timeline` against `run` (fresh processes, alternated);
* scale: `run` with 1M requests under every policy and 10M under one (wall, CPU, peak RSS
  by ``/usr/bin/time -v``), and the Mooncake trace tiled to 1M requests.

``--blis PATH`` (a built BLIS binary; benchmarks/blis/BUILD.md) also times the shared W1 and
W2 workloads in BLIS and in prefixbench (/work/shared/peers/blis/README.md): alternated fresh
processes, median wall and CPU of ``--blis-repeats``, and the outputs side by side.
``--only a,b`` runs only the named sections (compile, throughput, study, commands, cold,
startup, help, million, scaling, events, timeline, scale, server; ``--only blis`` runs the
BLIS comparison alone). ``--server`` runs the sections' commands through an opt-in warm
server started for the benchmark (docs/design.md "The warm server"); the ``server`` section
times its commands with and without one, alternated.

The machine is recorded too (CPU, cores, versions, load average: on a shared machine the
load of other processes inflates wall times; CPU-time figures are less affected).
Environment variables such as OPENBLAS_CORETYPE are passed through unchanged.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from bench.blis import bench_blis
from bench.commands import (
    bench_cold_start,
    bench_command_startup,
    bench_commands,
    bench_help,
    bench_startup,
)
from bench.common import POLICIES, ROOT, default_trace, machine_info, product_engine
from bench.engine import bench_compile, bench_event_cost, bench_scaling_requests, bench_throughput
from bench.modes import mode_million, mode_study, mode_wrap
from bench.scale import bench_scale, bench_timeline
from bench.server import bench_server, warm_server
from bench.study import bench_million, bench_scaling_grid, bench_study
from bench.verdicts import verdicts

SECTIONS = (
    "compile", "throughput", "study", "commands", "cold", "help", "startup", "million", "scaling",
    "events", "timeline", "scale", "server",
)  # fmt: skip


def _parser() -> argparse.ArgumentParser:
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
    ap.add_argument(
        "--blis", default=None, help="a built BLIS binary: also compare it on the shared workloads"
    )
    ap.add_argument("--blis-repeats", type=int, default=3, help="alternated runs of each side")
    ap.add_argument("--blis-workloads", default="w1,w2", help="shared workloads to compare")
    ap.add_argument(
        "--server", action="store_true",
        help="run the sections' commands through an opt-in warm server (docs/design.md)",
    )  # fmt: skip
    ap.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    ap.add_argument("--wrap", action="store_true", help=argparse.SUPPRESS)
    return ap


def main() -> None:
    args, rest = _parser().parse_known_args()
    if args.wrap:
        mode_wrap([a for a in sys.argv[1:] if a != "--wrap"])
        return
    if args.child:
        name, *cargs = args.child
        {"study": mode_study, "million": mode_million}[name](*cargs)
        return

    t_start = time.perf_counter()
    r = _record(args.quick)
    r["sections"] = sorted(set(args.only.split(",")))
    r["through_warm_server"] = args.server
    if args.server:  # every command below runs in a process forked from the server
        with warm_server() as info:
            r["warm_server"] = info
            _sections(args, r)
    else:
        _sections(args, r)
    _finish(r, Path(args.out), t_start)


def _sections(args: argparse.Namespace, r: dict) -> None:
    """The sections asked for, each recorded into ``r``."""
    quick, only = args.quick, set(args.only.split(","))
    trace = Path(args.trace) if args.trace else default_trace()

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
        print("start-up per command (fresh process, median of 3):", flush=True)
        r["startup_commands"] = bench_command_startup()
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
                [1, 7, 28] if quick else [1, 7, 28, 112], r["study"]
            )
            fit = r["scaling_grid"]["linear_fit"]
            print(f"  wall ≈ {fit['fixed_s']:.2f} s + {fit['per_run_s'] * 1e3:.1f} ms x runs")

    _scale_sections(r, only, quick, trace)
    if "server" in only and not args.server:
        print("the warm server: the same commands without and with it, alternated:", flush=True)
        r["server"] = bench_server(3 if quick else 5)
    if args.blis:
        r["blis"] = _blis_section(args)


def _record(quick: bool) -> dict:
    """The run's record: command, machine, load, and which core the product dispatches to."""
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
    return r


def _blis_section(args: argparse.Namespace) -> dict:
    """The BLIS comparison (benchmarks/bench/blis.py) on the workloads asked for."""
    print(
        f"BLIS comparison ({args.blis_workloads}; fresh processes alternated, "
        f"median of {args.blis_repeats}):",
        flush=True,
    )
    works = tuple(args.blis_workloads.split(","))
    res = bench_blis(Path(args.blis), args.blis_repeats, works)
    if "error" in res:
        print(f"  {res['error']}", flush=True)
    return res


def _finish(r: dict, out: Path, t_start: float) -> None:
    """Each figure against its target, printed; the record written as JSON."""
    r["loadavg_end"] = os.getloadavg()
    r["benchmark_wall_s"] = time.perf_counter() - t_start
    r["targets"] = verdicts(r)
    print("targets:")
    for k, v in r["targets"].items():
        mark = {True: "met", False: "MISSED", None: "n/a"}[v["met"]]
        val = "n/a" if v["value"] is None else f"{v['value']:,.3f}"
        print(f"  {k:36s} {val:>14s}  (target {v['target']}) {mark}")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(r, indent=2) + "\n")
    print(f"wrote {out}")


def _scale_sections(r: dict, only: set, quick: bool, trace: Path) -> None:
    """The engine's cost per event against batch size, `--timeline` against a plain run,
    and the large runs (1M x every policy, 10M x one, the 1M trace), each measured once."""
    if "events" in only:
        print("cost per event against the decode batch (enterprise_hotset):", flush=True)
        r["events"] = bench_event_cost(
            20_000 if quick else 50_000, [1.0, 3.0, 6.0, 9.0], 2 if quick else 5
        )
    if "timeline" in only:
        print("run --timeline against run (fresh processes, alternated):", flush=True)
        r["timeline"] = bench_timeline(1 if quick else 3)
    if "scale" in only:
        print("large runs (fresh processes, once each):", flush=True)
        r["scale"] = bench_scale(trace, ten_million=not quick)


if __name__ == "__main__":
    main()
