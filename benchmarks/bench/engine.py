"""The engine itself: its cold compile and warm load, simulated requests per second per core,
and cost against run length.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

from .common import POLICIES, ROOT, WORKLOADS, stats

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


# ------------------------------------------------------------------ cost per event

FLOOR_EVENTS = 2_000_000


def _floor_loop():
    """A compiled loop of the engine's structure doing nothing else: pop an event from the
    engine's own heap (engine/queues.py), push the next one; ``live`` events outstanding."""
    from numba import njit

    from prefixbench.engine.queues import pop, push

    @njit(cache=False)
    def loop(EHT, EHI, IS, n, live):
        for i in range(live):
            push(EHT, EHI, IS, 1e-3 * i, 0, i, 0)
        done = 0
        while done < n:
            t, kind, a, b = pop(EHT, EHI, IS)
            push(EHT, EHI, IS, t + 1e-3 * (1 + a % 7), kind, a, b)
            done += 1
        return done

    return loop


def bench_floor(live: int = 64, repeats: int = 3) -> dict:
    """ns per event of the bare heap loop (the floor the engine's cost is compared with)."""
    import numpy as np

    from prefixbench.engine import layout as L

    loop = _floor_loop()
    state = lambda: (  # noqa: E731
        np.zeros(live + 4),
        np.zeros(3 * (live + 4), np.int64),
        np.zeros(L.GI_TLN + 1, np.int64),
    )
    loop(*state(), 1000, live)  # compile
    cpu = []
    for _ in range(repeats):
        args = state()
        c = time.process_time()
        loop(*args, FLOOR_EVENTS, live)
        cpu.append(time.process_time() - c)
    return {"events": FLOOR_EVENTS, "live": live, "ns_per_event": 1e9 * min(cpu) / FLOOR_EVENTS}


def bench_event_cost(n: int, rates: list[float], repeats: int) -> dict:
    """The engine's CPU ns per event (events = pushes onto its heap) against the decode
    batch, which the arrival rate sets: ``enterprise_hotset`` (the default scenario) under
    ``replicate_all_lru``, with the ITL tracking ``prefixbench run`` turns on."""
    import dataclasses

    from prefixbench.engine import layout as L
    from prefixbench.engine import simulate
    from prefixbench.scenario.loader import load_scenario
    from prefixbench.system.runner import prepare

    rows = []
    for rate in rates:
        sets = [f"run.requests={n}", f"workload.arrivals.rate={rate}"]
        prep = prepare(load_scenario("enterprise_hotset", sets))
        cfg = dataclasses.replace(prep.base, policy="replicate_all_lru", track_gaps=True)
        simulate(prep.requests.slice(0, 2000), cfg)  # load the compiled code
        cpu = []
        for _ in range(repeats):
            c = time.process_time()
            res = simulate(prep.requests, cfg, keep_state=True)
            cpu.append(time.process_time() - c)
        events = int(res.state.IS[L.GI_SEQ])
        row = {
            "rate": rate,
            "requests": n,
            "events": events,
            "mean_decode_batch": res.stats["mean_decode_batch"],
            "simulate_cpu_s": stats(cpu),
            "ns_per_event": 1e9 * statistics.median(cpu) / events,
        }
        rows.append(row)
        print(
            f"  rate {rate:5.1f}/s: batch {row['mean_decode_batch']:6.1f}, "
            f"{events:>9,d} events, {row['ns_per_event']:6.0f} ns/event (cpu)",
            flush=True,
        )
    floor = bench_floor()
    print(f"  floor (bare heap loop, 64 live events): {floor['ns_per_event']:.0f} ns/event")
    return {"scenario": "enterprise_hotset", "policy": "replicate_all_lru", "rows": rows,
            "floor": floor}  # fmt: skip
