"""Prefill-side back-pressure (memory.prefill_hold; docs/model.md §1.4.1), checked by hand.

Round costs: a prefill step reads 10 weight bytes at 1000 B/s (0.01 s; no FLOPs, its own
KV bytes nil), the KV crosses the link at 100 B per token over 10⁴ B/s (a 10-token prompt:
0.1 s), a decode iteration takes 0.01 s (10 weight bytes at 1000 B/s; its KV read rate is
unbounded). The prefill instance's KV pool (its prefix cache) holds 15 tokens.
"""

from __future__ import annotations

import dataclasses

import pytest
from enginecases import make_requests

from prefixbench.engine import EngineConfig, simulate
from prefixbench.physics.costmodel import InstanceCost

_ZERO = {
    f.name: 0.0 for f in dataclasses.fields(InstanceCost) if f.default is dataclasses.MISSING
}
PREFILL = InstanceCost(
    **{**_ZERO, "flops_rate_prefill": 1e12, "flops_rate_decode": 1e12, "byte_rate": 1e3,
       "weights": 10.0}
)  # fmt: skip
DECODE = InstanceCost(
    **{**_ZERO, "flops_rate_prefill": 1e12, "flops_rate_decode": 1e15, "byte_rate": 1e3,
       "weights": 10.0, "kv_bpt": 100.0}
)  # fmt: skip


def _run(hold: bool):
    cfg = EngineConfig(
        policy="transfer_per_request",
        prefill_cost=PREFILL,
        decode_cost=DECODE,
        prefill_token_budget=10,
        prefill_cache_tokens=15,
        link_bytes_per_s=1e4,
        budget_tokens=10**6,
        prefill_hold=hold,
    )
    # R0 at 0 and R1 at 1 ms: prompts of 10 tokens, 5 output tokens each, no shared blocks
    return simulate(make_requests([0.0, 0.001], [10, 10], [5, 5], [[], []]), cfg).columns


def test_without_the_hold_the_second_step_follows_the_first():
    """R0's step 0 → 0.01, its KV 0.01 → 0.11; R1's step 0.01 → 0.02, its KV queues on the
    link behind R0's: 0.11 → 0.21, tokens 0.22 … 0.26."""
    c = _run(False)
    assert c["t_prefill_start"][1] == pytest.approx(0.01, rel=1e-12)
    assert c["t_transfer_end"].tolist() == pytest.approx([0.11, 0.21], rel=1e-12)
    assert c["t_done"][1] == pytest.approx(0.26, rel=1e-12)


def test_held_kv_stalls_the_next_step_until_the_pull_lands():
    """R0's 10 tokens are held from 0 until its pull lands at 0.11; at 0.01 R1's 10 more
    would make 20 > 15, so its step waits for 0.11: 0.11 → 0.12, its KV 0.12 → 0.22,
    tokens 0.23 … 0.27."""
    c = _run(True)
    assert c["t_prefill_start"][1] == pytest.approx(0.11, rel=1e-12)
    assert c["t_prefill_end"][1] == pytest.approx(0.12, rel=1e-12)
    assert c["t_transfer_end"].tolist() == pytest.approx([0.11, 0.22], rel=1e-12)
    assert c["t_done"][1] == pytest.approx(0.27, rel=1e-12)
