"""The comparison with BLIS (inference-sim/inference-sim) on the shared workloads: the same
work in both simulators, each run in a fresh process, the sides alternated, median of
``repeats`` for wall and CPU time (user + system of the child, from ``os.wait4``).

The workload files and BLIS's command line are in /work/shared/peers/blis/README.md
(``blis_w1.yaml`` for BLIS, ``pb_w1.yaml`` for prefixbench; W2 adds KV pressure:
``--total-kv-blocks 2000`` and ``pb_w2.yaml``). BLIS runs from its source folder, so its
``defaults.yaml`` and model configs resolve, in its fast ``--lazy-generation`` mode. That
folder is ``PREFIXBENCH_BLIS_SRC``, else the binary's folder or its ``src/`` child
(whichever holds ``defaults.yaml``); benchmarks/blis/BUILD.md builds it that way.

prefixbench runs twice per repeat: ``-p transfer_per_request --json`` (the same work as
BLIS: one configuration, its metrics printed as JSON) and the plain ``run`` (all seven
policies, tables). The outputs of the last repeat are set side by side (hit rate, KV
bytes, TTFT, TPOT).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .common import stats

PEERS = Path(os.environ.get("PREFIXBENCH_BLIS_PEERS", "/work/shared/peers/blis"))

BLIS_ARGS = [
    "run", "--model", "meta-llama/llama-3.1-8b-instruct", "--latency-model", "roofline",
    "--hardware", "H100", "--tp", "1", "--num-instances", "8", "--prefill-instances", "4",
    "--decode-instances", "4", "--pd-decider", "always", "--pd-transfer-bandwidth", "25",
    "--pd-transfer-base-latency", "0.05", "--workload-spec", "{spec}", "--max-num-seqs", "256",
    "--max-num-batched-tokens", "8192", "--seed", "42", "--routing-policy", "weighted",
    "--cache-signal-delay", "0", "--lazy-generation",
]  # fmt: skip
BLIS_BANDWIDTH_GB_S = 25.0  # --pd-transfer-bandwidth above (GB/s, BLIS's help text)
BLIS_BASE_LATENCY_US = 50.0  # --pd-transfer-base-latency 0.05 ms
WORKLOADS = {  # name: (BLIS spec, extra BLIS flags, prefixbench scenario)
    "w1": ("blis_w1.yaml", [], "pb_w1.yaml"),
    "w2": ("blis_w1.yaml", ["--total-kv-blocks", "2000"], "pb_w2.yaml"),
}
SAME_WORK_POLICY = "transfer_per_request"  # BLIS's always-disaggregate P/D with transfer


def blis_source_dir(blis: Path) -> Path | None:
    """The folder BLIS must run from (it reads ``defaults.yaml`` relative to the cwd)."""
    env = os.environ.get("PREFIXBENCH_BLIS_SRC")
    for d in ([Path(env)] if env else []) + [blis.parent, blis.parent / "src"]:
        if (d / "defaults.yaml").is_file():
            return d
    return None


def _timed(cmd: list[str], cwd: Path) -> dict:
    """One fresh process: wall, CPU (user + sys), peak RSS, and its stdout."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        t = time.perf_counter()
        try:
            p = subprocess.Popen(cmd, stdout=out, stderr=err, cwd=cwd, text=True)
        except OSError as e:  # not executable, not a binary for this machine
            return {"error": f"cannot run {cmd[0]}: {e.strerror}"}
        _, status, ru = os.wait4(p.pid, 0)
        p.returncode = os.waitstatus_to_exitcode(status)
        wall = time.perf_counter() - t
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    if p.returncode != 0:
        return {"error": (stderr or stdout)[-1500:]}
    return {
        "wall_s": wall,
        "cpu_s": ru.ru_utime + ru.ru_stime,
        "peak_rss_mb": ru.ru_maxrss / 1024,
        "stdout": stdout,
    }


def _alternate(cmds: dict[str, tuple[list[str], Path]], repeats: int) -> dict:
    """Run the commands in turn, ``repeats`` rounds; medians per side, last stdout kept."""
    rows: dict[str, dict] = {k: {"command": " ".join(c)} for k, (c, _) in cmds.items()}
    samples: dict[str, list[dict]] = {k: [] for k in cmds}
    for _ in range(repeats):
        for side, (cmd, cwd) in cmds.items():
            if "error" in rows[side]:
                continue
            one = _timed(cmd, cwd)
            if "error" in one:
                rows[side]["error"] = one["error"]
                continue
            samples[side].append(one)
    for side, xs in samples.items():
        if "error" in rows[side] or not xs:
            continue
        for key in ("wall_s", "cpu_s", "peak_rss_mb"):
            rows[side][key] = stats([x[key] for x in xs])
        rows[side]["stdout"] = xs[-1]["stdout"]
    return rows


def parse_blis(stdout: str) -> dict:
    """The cluster figures BLIS prints: its ``cluster`` JSON block and the KV and P/D lines."""
    out: dict = {}
    m = re.search(r'\{\s*"instance_id": "cluster".*?\n\}', stdout, re.S)
    if m:
        c = json.loads(m.group(0))
        for k in ("completed_requests", "total_input_tokens", "total_output_tokens",
                  "ttft_mean_ms", "ttft_p99_ms", "itl_mean_ms", "itl_p99_ms", "e2e_mean_ms",
                  "preemption_count", "dropped_unservable"):  # fmt: skip
            out[k] = c.get(k)
    m = re.search(r"^Cache Hit Rate: ([0-9.]+)", stdout, re.M)
    if m:
        out["cache_hit_rate"] = float(m.group(1))
    m = re.search(r"^Dropped at Decode KV: (\d+)", stdout, re.M)
    if m:
        out["dropped_at_decode_kv"] = int(m.group(1))
    m = re.search(r"^KV Transfer Duration \(us\): mean=([0-9.]+)", stdout, re.M)
    if m:
        out["transfer_mean_us"] = float(m.group(1))
        seconds = (out["transfer_mean_us"] - BLIS_BASE_LATENCY_US) / 1e6
        out["transfer_mb_per_request"] = seconds * BLIS_BANDWIDTH_GB_S * 1e3
    return out


def parse_prefixbench(stdout: str) -> dict:
    """The one policy's figures from ``run --json``."""
    r = json.loads(stdout)["results"][0]
    pb = r["prefixbench"]
    keys = ("completed", "rejected", "prefill_hit_rate", "transfer_mb_per_request", "ttft_mean_ms",
            "ttft_p99_ms", "tpot_mean_ms", "tpot_p99_ms", "e2e_mean_ms")  # fmt: skip
    out = {k: pb.get(k) for k in keys}
    out["total_input_tokens"] = r.get("total_input_tokens")
    return out


def side_by_side(blis_out: dict, pb_out: dict) -> list[tuple[str, str, str]]:
    """The outputs that should agree (hits, bytes) and those that differ by the models'
    constants (TTFT, TPOT). BLIS's ``Cache Hit Rate`` is the mean over all 8 instances of
    each one's block hit rate, and a decode instance's transferred blocks count as misses
    (``ReserveTransferredKV`` allocates with no cached blocks, sim/cluster/instance.go;
    the mean is in sim/cluster/cluster.go), so the prefill pools' mean is twice it."""
    hit = blis_out.get("cache_hit_rate")
    drops = [blis_out.get(k) for k in ("dropped_unservable", "dropped_at_decode_kv")]
    dropped = None if None in drops else sum(drops)

    def f(v, fmt):
        return "n/a" if v is None else format(v, fmt)

    return [
        ("completed requests", f(blis_out.get("completed_requests"), ","),
         f(pb_out.get("completed"), ",")),
        ("dropped / rejected", f(dropped, ","),
         f(pb_out.get("rejected"), ",")),
        ("input tokens", f(blis_out.get("total_input_tokens"), ","),
         f(pb_out.get("total_input_tokens"), ",")),
        ("prefill hit rate", f(None if hit is None else 2 * hit, ".4f"),
         f(pb_out.get("prefill_hit_rate"), ".4f")),
        ("KV MB per request", f(blis_out.get("transfer_mb_per_request"), ".1f"),
         f(pb_out.get("transfer_mb_per_request"), ".1f")),
        ("TTFT mean ms", f(blis_out.get("ttft_mean_ms"), ".1f"),
         f(pb_out.get("ttft_mean_ms"), ".1f")),
        ("TTFT p99 ms", f(blis_out.get("ttft_p99_ms"), ".1f"), f(pb_out.get("ttft_p99_ms"), ".1f")),
        ("TPOT mean ms", f(blis_out.get("itl_mean_ms"), ".2f"),
         f(pb_out.get("tpot_mean_ms"), ".2f")),
        ("E2E mean ms", f(blis_out.get("e2e_mean_ms"), ".0f"), f(pb_out.get("e2e_mean_ms"), ".0f")),
    ]  # fmt: skip


def _commands(blis: Path, src: Path, work: str, tmp: Path) -> dict:
    spec, extra, scenario = WORKLOADS[work]
    theirs = [str(blis), *(a.format(spec=PEERS / spec) for a in BLIS_ARGS), *extra]
    exe = Path(sys.executable).with_name("prefixbench")
    base = [str(exe)] if exe.exists() else [sys.executable, "-m", "prefixbench"]
    ours = [*base, "run", str(PEERS / scenario), "--out", str(tmp / work)]
    cmds = {
        "blis": (theirs, src),
        "prefixbench": ([*ours, "-p", SAME_WORK_POLICY, "--json"], tmp),
    }
    if work == "w1":
        cmds["prefixbench_all_policies"] = (ours, tmp)
    return cmds


def _print_workload(work: str, out: dict) -> None:
    for side in ("blis", "prefixbench", "prefixbench_all_policies"):
        row = out.get(side)
        if row is None:
            continue
        if "wall_s" not in row:
            print(f"  {work} {side:24s} failed: {row.get('error', '')[-300:]}", flush=True)
            continue
        print(
            f"  {work} {side:24s} wall {row['wall_s']['median']:6.2f} s  "
            f"CPU {row['cpu_s']['median']:6.2f} s  RSS {row['peak_rss_mb']['median']:5.0f} MB",
            flush=True,
        )
    for k in ("wall", "cpu"):
        if f"blis_over_prefixbench_{k}" in out:
            print(f"  {work} BLIS / prefixbench ({k}): {out[f'blis_over_prefixbench_{k}']:.1f}x")
    if out.get("outputs"):
        print(f"  {'':20s} {'BLIS':>12s} {'prefixbench':>12s}")
        for name, a, b in out["outputs"]:
            print(f"  {name:20s} {a:>12s} {b:>12s}")


def bench_workload(blis: Path, src: Path, work: str, repeats: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = _alternate(_commands(blis, src, work, Path(tmp)), repeats)
    both = [out[s] for s in ("blis", "prefixbench")]
    if all("wall_s" in r for r in both):
        for k in ("wall", "cpu"):
            a, b = (r[f"{k}_s"]["median"] for r in both)
            out[f"blis_over_prefixbench_{k}"] = a / b
        out["outputs"] = side_by_side(
            parse_blis(both[0]["stdout"]), parse_prefixbench(both[1]["stdout"])
        )
    for row in out.values():
        if isinstance(row, dict):
            row.pop("stdout", None)
    _print_workload(work, out)
    return out


def bench_blis(blis: Path, repeats: int = 3, works: tuple[str, ...] = ("w1", "w2")) -> dict:
    """The shared workloads in BLIS (``blis``: its binary) and in prefixbench, alternated."""
    blis = Path(blis).resolve()
    src = blis_source_dir(blis)
    if unknown := [w for w in works if w not in WORKLOADS]:
        return {"error": f"unknown workload {', '.join(unknown)}: use {', '.join(WORKLOADS)}"}
    need = [PEERS / WORKLOADS[w][2] for w in works] + [PEERS / "blis_w1.yaml"]
    if not blis.is_file() or src is None or not all(p.is_file() for p in need):
        return {
            "error": f"needs {blis} (a built BLIS binary), its source folder (defaults.yaml: "
            f"set PREFIXBENCH_BLIS_SRC) and {', '.join(map(str, need))}"
        }
    r: dict = {"binary": str(blis), "source": str(src), "repeats": repeats}
    commit = src / "BLIS_COMMIT"  # written by the build steps in benchmarks/blis/BUILD.md
    r["blis_commit"] = commit.read_text().strip() if commit.is_file() else None
    r["loadavg_start"] = os.getloadavg()
    for work in works:
        r[work] = bench_workload(blis, src, work, repeats)
    r["loadavg_end"] = os.getloadavg()
    return r
