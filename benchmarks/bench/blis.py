"""The comparison with BLIS (inference-sim/inference-sim) on the shared W1 workload: the
same work in both simulators, wall time of each in a fresh process, median of ``repeats``.

The workload files and BLIS's command line are in /work/shared/peers/blis/README.md
(``blis_w1.yaml`` for BLIS, ``pb_w1.yaml`` for prefixbench); BLIS runs from its source
folder (the binary's), so its defaults and model configs resolve, in its fast
``--lazy-generation`` mode.
"""

from __future__ import annotations

import os
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


def _wall(cmd: list[str], cwd: Path, repeats: int) -> dict:
    walls = []
    for _ in range(repeats):
        t = time.perf_counter()
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, cwd=cwd)
        except OSError as e:  # not executable, not a binary for this machine
            return {"error": f"cannot run {cmd[0]}: {e.strerror}", "command": " ".join(cmd)}
        walls.append(time.perf_counter() - t)
        if p.returncode != 0:
            return {"error": (p.stderr or p.stdout)[-1500:], "command": " ".join(cmd)}
    return {"wall_s": stats(walls), "command": " ".join(cmd)}


def bench_blis(blis: Path, repeats: int = 3) -> dict:
    """W1 in BLIS (``blis``: its binary, in its source folder) and in prefixbench."""
    blis = Path(blis).resolve()
    spec = PEERS / "blis_w1.yaml"
    ours = PEERS / "pb_w1.yaml"
    if not blis.is_file() or not spec.is_file() or not ours.is_file():
        return {"error": f"needs {blis} (a built BLIS binary), {spec} and {ours}"}
    theirs = [str(blis), *(a.format(spec=spec) for a in BLIS_ARGS)]
    with tempfile.TemporaryDirectory() as tmp:
        exe = Path(sys.executable).with_name("prefixbench")
        base = [str(exe)] if exe.exists() else [sys.executable, "-m", "prefixbench"]
        pb = [*base, "run", str(ours), "--out", str(Path(tmp) / "w1")]
        out = {
            "blis": _wall(theirs, blis.parent, repeats),
            "prefixbench": _wall(pb, Path(tmp), repeats),
        }
    if "wall_s" in out["blis"] and "wall_s" in out["prefixbench"]:
        out["blis_over_prefixbench"] = (
            out["blis"]["wall_s"]["median"] / out["prefixbench"]["wall_s"]["median"]
        )
    for side in ("blis", "prefixbench"):
        row = out[side]
        shown = f"{row['wall_s']['median']:.2f} s" if "wall_s" in row else "failed"
        print(f"  W1 {side:12s} {shown}", flush=True)
    if "blis_over_prefixbench" in out:
        print(f"  BLIS / prefixbench: {out['blis_over_prefixbench']:.1f}x", flush=True)
    return out
