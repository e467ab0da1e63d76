"""The report's "where the host tier changes the recommendation" section."""

from __future__ import annotations

import polars as pl

from prefixbench.study.tier_effect import tier_changes, tier_md


def _row(workload, budget, policy, ttft, host=0.0):
    return {
        "model": "m", "workload": workload, "budget_factor": budget, "policy": policy,
        "stable": True, "ttft_mean_ms": ttft, "reject_rate": 0.0,
        "mean_replica_kv_gb": 1.0, "kv_budget_gb": 4.0, "host_hit_rate": host,
    }  # fmt: skip


AGG = pl.DataFrame(
    [
        # tight: the tier serves 30% of blocks and wins by 20 ms over all-LRU
        _row("chat", 0.35, "transfer_per_request", 100.0),
        _row("chat", 0.35, "replicate_all_lru", 80.0),
        _row("chat", 0.35, "replicate_tiered", 60.0, 0.3),
        # relaxed: nothing to spill, all-LRU stays first
        _row("chat", 1.0, "transfer_per_request", 100.0),
        _row("chat", 1.0, "replicate_all_lru", 50.0),
        _row("chat", 1.0, "replicate_tiered", 55.0),
    ]
)


def test_changes_found_and_reported():
    t = tier_changes(AGG).to_dicts()
    assert [(r["budget_factor"], r["without_tier"], r["with_tier"], r["changed"]) for r in t] == [
        (0.35, "replicate_all_lru", "replicate_tiered", True),
        (1.0, "replicate_all_lru", "replicate_all_lru", False),
    ]
    text = "\n".join(tier_md(AGG, 0.5))
    assert "changes the recommendation in 1 of 2 scenarios, 1 of the 1 with a tight budget" in text
    assert (
        "| `m` | `chat` | 0.35 | `replicate_all_lru` | 80.0 ms | `replicate_tiered` | 60.0 ms | 0.300 |"
        in text
    )


def test_a_study_without_the_tier_says_so():
    text = "\n".join(tier_md(AGG.filter(pl.col("policy") != "replicate_tiered"), 0.5))
    assert "No stable scenario ran `replicate_tiered`" in text
