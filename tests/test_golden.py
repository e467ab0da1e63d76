"""Golden runs: every file in scenarios/ at a short horizon, against stored summaries.

A change to the model that moves any of these numbers fails here and must be deliberate:
regenerate with ``PREFIXBENCH_UPDATE_GOLDEN=1 pytest tests/test_golden.py`` and say why in
the CHANGELOG. Values are compared at 1e-9 relative (the engine is deterministic).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from goldens import check_golden

from prefixbench.scenario.loader import preset_names
from prefixbench.scenario.models import POLICIES
from prefixbench.study.runs import run_scenario

GOLDEN = Path(__file__).parent / "golden"
DATA = Path(__file__).parent / "data"
KEYS = [
    "completed",
    "rejected",
    "ttft_mean_ms",
    "ttft_p99_ms",
    "tpot_mean_ms",
    "e2e_mean_ms",
    "throughput_rps",
    "reject_rate",
    "shared_request_fraction",
    "replica_hit_rate",
    "mean_replica_kv_gb",
    "transfer_mb_per_request",
    "kv_budget_gb",
]


def _overrides(name: str) -> tuple[list[str], str | None]:
    if name == "trace_replay":
        return ["run.warmup_requests=50"], str(DATA / "conversation_trace_head300.jsonl")
    return ["run.requests=1000", "run.warmup_requests=100"], None


@pytest.mark.parametrize("name", preset_names())
def test_preset_matches_golden(name):
    from prefixbench.scenario.loader import load_scenario

    sets, trace = _overrides(name)
    s = load_scenario(name, sets, trace=trace)
    rows = run_scenario(s, list(POLICIES), keep_requests=False).summary.to_dicts()
    got = {r["policy"]: {k: r[k] for k in KEYS} for r in rows}
    check_golden(GOLDEN / f"{name}.json", got, name)
