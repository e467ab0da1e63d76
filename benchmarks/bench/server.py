"""The opt-in warm server (docs/design.md "The warm server"): a server started for the
benchmark's own environment, and the same commands run with and without it, alternated.

Through the server a command's work runs in a process forked from the server, not in the
client, so ``RUSAGE_CHILDREN`` sees only the client's CPU; the server's process reports its
own (PREFIXBENCH_SERVER_TIMES), and the CPU figure through the server is the sum. The
process had imported polars before the command came (off the command's path, but CPU the
machine spends per command): ``setup_cpu_s``.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

from .common import stats

_TINY = ["--set", "run.requests=20", "--set", "run.warmup_requests=2"]
PEERS = Path(os.environ.get("PREFIXBENCH_BLIS_PEERS", "/work/shared/peers/blis"))
SERVER_COMMANDS = {
    "help": ["--help"],
    "cost": ["cost", "qwen2-0.5b"],
    "run_20_one_policy": ["run", "--policy", "transfer_per_request", *_TINY, "--out", "{tmp}/r"],
    "run_10k_all_policies": ["run", "--out", "{tmp}/r"],
    "blis_w1": [
        "run",
        str(PEERS / "pb_w1.yaml"),
        "--out",
        "{tmp}/w1",
        "-p",
        "transfer_per_request",
        "--json",
    ],  # bench/blis.py's same work as BLIS
    "blis_w1_all_policies": ["run", str(PEERS / "pb_w1.yaml"), "--out", "{tmp}/w1"],
}


def _base() -> list[str]:
    exe = Path(sys.executable).with_name("prefixbench")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "prefixbench"]


@contextmanager
def warm_server(idle_s: float = 900.0):
    """A warm server for this process's environment (a private runtime folder, set in
    ``os.environ`` so every child of the benchmark finds it), stopped at the end."""
    runtime = tempfile.mkdtemp(prefix="pbb", dir="/tmp")  # a short socket path
    os.chmod(runtime, 0o700)
    old = os.environ.get("XDG_RUNTIME_DIR")
    os.environ["XDG_RUNTIME_DIR"] = runtime
    os.environ.pop("PREFIXBENCH_SERVER", None)
    try:
        t = time.perf_counter()
        p = subprocess.run([*_base(), "server", "start", "--idle", str(idle_s), "--json"],
                           capture_output=True, text=True)  # fmt: skip
        if p.returncode != 0:
            raise RuntimeError(f"the warm server did not start: {p.stderr[-500:]}")
        info = {**json.loads(p.stdout), "start_wall_s": time.perf_counter() - t}
        time.sleep(1.0)  # its spares finish their imports
        yield info
    finally:
        subprocess.run([*_base(), "server", "stop"], capture_output=True)
        shutil.rmtree(runtime, ignore_errors=True)
        if old is None:
            os.environ.pop("XDG_RUNTIME_DIR", None)
        else:
            os.environ["XDG_RUNTIME_DIR"] = old


def _once(argv: list[str], through_server: bool) -> tuple[float, float, float, float] | str:
    """(wall, CPU, the client's CPU, the spare's set-up CPU) of one fresh ``prefixbench
    argv``; the error text if it failed (or did not go through the server when it should
    have)."""
    env = {**os.environ, "COLUMNS": "100"}
    env["PREFIXBENCH_SERVER"] = "" if through_server else "0"
    with tempfile.TemporaryDirectory() as tmp:
        env["PREFIXBENCH_SERVER_TIMES"] = times = os.path.join(tmp, "times.jsonl")
        cmd = [*_base(), *(a.format(tmp=tmp) for a in argv)]
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t = time.perf_counter()
        p = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp)
        wall = time.perf_counter() - t
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        lines = Path(times).read_text().splitlines() if os.path.exists(times) else []
        served = [json.loads(x) for x in lines]
    if p.returncode != 0:
        return p.stderr[-1500:]
    if bool(served) != through_server:
        return f"went through the server: {bool(served)}"
    client = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    setup = sum(s["setup_cpu_s"] for s in served)
    return wall, client + sum(s["cpu_s"] for s in served), client, setup


def bench_server(n: int = 5) -> dict:
    """Each of ``SERVER_COMMANDS`` in fresh processes, in its own process and through a warm
    server, alternated (own, server, own, …) after one warm-up call of each; medians."""
    out: dict = {"repeats": n, "commands": {k: " ".join(v) for k, v in SERVER_COMMANDS.items()}}
    with warm_server() as info:
        out["server_start_wall_s"] = info["start_wall_s"]
        for name, argv in SERVER_COMMANDS.items():
            if name.startswith("blis") and not PEERS.exists():
                continue
            rows: dict[str, list] = {"own": [], "server": []}
            for i in range(n + 1):
                for side in ("own", "server"):
                    got = _once(argv, side == "server")
                    if isinstance(got, str):
                        out[name] = {"error": f"{side}: {got}"}
                        break
                    if i:  # the first call of each warms the page cache
                        rows[side].append(got)
                if name in out:
                    break
            else:
                out[name] = _summary(rows)
                _print(name, out[name])
    return out


def _summary(rows: dict[str, list]) -> dict:
    res = {}
    for side, pairs in rows.items():
        res[side] = {"wall_s": stats([p[0] for p in pairs]),
                     "cpu_s": stats([p[1] for p in pairs]),
                     "client_cpu_s": stats([p[2] for p in pairs]),
                     "spare_setup_cpu_s": stats([p[3] for p in pairs])}  # fmt: skip
    res["own_over_server_wall"] = res["own"]["wall_s"]["median"] / res["server"]["wall_s"]["median"]
    return res


def _print(name: str, row: dict) -> None:
    own, srv = row["own"], row["server"]
    print(f"  {name:22s} own wall {own['wall_s']['median']:6.3f} s CPU "
          f"{own['cpu_s']['median']:5.3f}   server wall {srv['wall_s']['median']:6.3f} s CPU "
          f"{srv['cpu_s']['median']:5.3f} (client {srv['client_cpu_s']['median']:5.3f}; spare's "
          f"imports before {srv['spare_setup_cpu_s']['median']:5.3f})   "
          f"{row['own_over_server_wall']:.1f}x", flush=True)  # fmt: skip
