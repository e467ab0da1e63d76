"""Golden runs of the colocated mode: every preset under both schedulers, at a short
horizon, against stored summaries (as tests/test_golden.py does for the disaggregated mode).

Regenerate with ``PREFIXBENCH_UPDATE_GOLDEN=1 pytest tests/test_golden_colocated.py`` and
say in the CHANGELOG which number changed and why.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from goldens import check_golden

from prefixbench.scenario.loader import load_scenario
from prefixbench.study.runs import run_scenario

GOLDEN = Path(__file__).parent / "golden"
PRESETS = ("enterprise_hotset", "long_context_support", "medium_chat", "tool_call")
KEYS = [
    "completed",
    "rejected",
    "ttft_mean_ms",
    "ttft_p99_ms",
    "tpot_mean_ms",
    "e2e_mean_ms",
    "itl_max_p99_ms",
    "throughput_rps",
    "reject_rate",
    "prefill_hit_rate",
    "decode_util",
    "mean_decode_batch",
    "peak_kv_used_gb",
]


@pytest.mark.parametrize("name", PRESETS)
def test_colocated_preset_matches_golden(name):
    got = {}
    for sched in ("prefill_priority", "chunked"):
        for on_full in ("reject", "wait"):
            s = load_scenario(
                name,
                ["run.requests=1000", "run.warmup_requests=100", "cluster.mode=colocated",
                 f"cluster.colocated_scheduler={sched}", f"memory.on_full={on_full}",
                 "memory.budget_factor=0.5"],
            )  # fmt: skip
            row = run_scenario(s, ["transfer_per_request"], keep_requests=False, track_gaps=True)
            r = row.summary.to_dicts()[0]
            got[f"{sched}/{on_full}"] = {k: r[k] for k in KEYS}
    check_golden(GOLDEN / f"colocated_{name}.json", got, name)
