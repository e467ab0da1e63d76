"""A tiny sweep + crossover results folder for tests of the commands that read one."""

from __future__ import annotations

from pathlib import Path

from prefixbench.study.crossover import run_crossover
from prefixbench.study.grid import build_spec
from prefixbench.study.sweep import run_sweep

TINY_STUDY = {
    "models": ["qwen2-0.5b"],
    "workloads": ["enterprise_hotset", "tool_call"],
    "budgets": [0.35, 1.0],
    "seeds": [0, 1],
    "set": ["run.requests=600", "run.warmup_requests=100"],
}


def make_tiny_study(out: Path) -> Path:
    run_sweep(build_spec(TINY_STUDY), out, jobs=1)
    run_crossover(out)
    return out
