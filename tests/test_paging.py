"""Paged decode KV and preemption (engine/paging.py), checked by hand.

Round step costs make every time a sum written out below: a decode iteration reads 10
weight bytes at 1000 B/s (0.01 s; its FLOPs and the KV bytes are nil), prefill and the link
take no time (no weights, no KV bytes), and a re-prefill of m tokens costs
max(m · 1e9 FLOP / 1e12 FLOP/s, 10 B / 1000 B/s) + 5 ms overhead.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from enginecases import make_requests

from prefixbench.engine import EngineConfig, simulate
from prefixbench.errors import SimulationError
from prefixbench.physics.costmodel import InstanceCost

# the cost terms without a default, zero (power and speculative terms keep their defaults)
_ZERO = {
    f.name: 0.0 for f in dataclasses.fields(InstanceCost) if f.default is dataclasses.MISSING
}
PREFILL = InstanceCost(
    **{**_ZERO, "flops_rate_prefill": 1e12, "flops_rate_decode": 1e12, "byte_rate": 1e3}
)
DECODE = InstanceCost(
    **{
        **_ZERO,
        "flops_rate_prefill": 1e12,
        "flops_rate_decode": 1e15,  # B · 1e9 / 1e15 s of compute per iteration: under 0.01 s
        "byte_rate": 1e3,
        "linear_flops": 1e9,
        "weights": 10.0,
        "prefill_overhead": 0.005,
    }
)


def _cfg(**kw) -> EngineConfig:
    base = dict(
        policy="transfer_per_request",
        prefill_cost=PREFILL,
        decode_cost=DECODE,
        max_batch=2,
        admission="paged",
        block_size=1,
    )
    return EngineConfig(**{**base, **kw})


def _two_requests():
    # R0 at 0 and R1 at 1 ms: prompts of 10 tokens, 5 output tokens each
    return make_requests([0.0, 0.001], [10, 10], [5, 5], [[], []])


def test_preempted_once_under_recompute_finishes_one_reprefill_later():
    """Budget 24 tokens, blocks of 1 token. R0 joins at 0 (iterations end at 0.01 … 0.05);
    R1 is admitted at 1 ms with its 10 prompt tokens and joins at 0.01. Iteration j of a
    sequence holds prompt + j tokens: at 0.02 the two hold 12 + 11 = 23; iteration 3 (at
    0.03) would need 13 + 12 = 25 > 24, so R1, admitted last, is preempted at 0.03 after 2
    tokens (0.02, 0.03), freeing its 11. R0 finishes at 0.05; R1 resumes there with its
    11 tokens (prompt + 1 generated before its last iteration) and re-prefills them:
    max(11e9 / 1e12, 10 / 1000) + 0.005 = 0.016 s, to 0.066; it rejoins and emits its 3
    remaining tokens at 0.076, 0.086, 0.096."""
    res = simulate(_two_requests(), _cfg(budget_tokens=24))
    c = res.columns
    assert c["t_done"][0] == pytest.approx(0.05, rel=1e-12)
    assert c["t_first_token"][1] == pytest.approx(0.02, rel=1e-12)
    assert c["t_done"][1] == pytest.approx(0.05 + 0.016 + 3 * 0.01, rel=1e-12)
    assert c["preemptions"].tolist() == [0, 1]
    assert c["preempt_tokens"].tolist() == [0, 11]
    assert c["preempt_delay_s"][1] == pytest.approx(0.066 - 0.03, rel=1e-12)
    assert c["outcome"].tolist() == [1, 1]
    assert res.stats["peak_used_tokens"] == 23  # 12 + 11 at 0.02; 13 alone after the preemption


def test_preempted_once_under_swap_moves_its_blocks_out_and_back():
    """As above under swap (the decode cost has no KV bytes, so each copy of R1's 11 tokens
    is the host path's 1 ms latency): R1 leaves at 0.03, is back in the join queue at
    0.05 + 0.001 and rejoins at once (the batch is empty): tokens at 0.061, 0.071, 0.081."""
    cfg = _cfg(budget_tokens=24, preemption="swap", host_path_bytes_per_s=1e3, host_path_latency_s=1e-3)
    c = simulate(_two_requests(), cfg).columns
    assert c["t_done"][1] == pytest.approx(0.051 + 3 * 0.01, rel=1e-12)
    assert c["preempt_tokens"].tolist() == [0, 11]  # swapped out
    assert c["preempt_delay_s"][1] == pytest.approx(0.051 - 0.03, rel=1e-12)


def test_paged_with_room_equals_reserve():
    """With room for both requests up front, paged and reserve give identical timestamps:
    R1 joins at 0.01 and emits at 0.02 … 0.06."""
    big = {"budget_tokens": 10**6}
    a = simulate(_two_requests(), _cfg(admission="reserve", **big)).columns
    b = simulate(_two_requests(), _cfg(**big)).columns
    for col in a:
        assert np.array_equal(a[col], b[col], equal_nan=True), col
    assert b["t_done"][1] == pytest.approx(0.06, rel=1e-12)


def test_reserve_rejects_what_paged_queues():
    """Reserve needs prompt + output = 15 tokens per request: with 24, R1 is rejected
    (no_memory); paged admits it with its 10 prompt tokens."""
    a = simulate(_two_requests(), _cfg(admission="reserve", budget_tokens=24)).columns
    assert a["outcome"].tolist() == [1, 2]
    b = simulate(_two_requests(), _cfg(budget_tokens=24)).columns
    assert b["outcome"].tolist() == [1, 1]


def test_paged_queue_waits_for_ever_or_times_out():
    """Budget 15: R0 takes 10 and grows to 14; R1 (10 prompt tokens) does not fit until R0
    ends at 0.05. With no queue timeout it waits and is admitted then; with a 10 ms timeout
    it is rejected at 0.011."""
    c = simulate(_two_requests(), _cfg(budget_tokens=15)).columns
    assert c["t_admit"][1] == pytest.approx(0.05, rel=1e-12)
    assert c["outcome"].tolist() == [1, 1]
    c = simulate(_two_requests(), _cfg(budget_tokens=15, queue_timeout_s=0.01)).columns
    assert c["outcome"].tolist() == [1, 2]
    assert c["t_done"][1] == pytest.approx(0.011, rel=1e-12)


def test_too_large_under_paged_is_what_could_never_finish_alone():
    """Paged holds at most prompt + output - 1 tokens (the last iteration): 14 tokens fit a
    budget of 14, 13 do not."""
    req = make_requests([0.0], [10], [5], [[]])
    assert simulate(req, _cfg(budget_tokens=14)).columns["outcome"].tolist() == [1]
    assert simulate(req, _cfg(budget_tokens=13)).columns["outcome"].tolist() == [2]


def test_unknown_admission_is_refused():
    with pytest.raises(SimulationError, match="memory.admission"):
        simulate(_two_requests(), _cfg(admission="lazy"))


# --- swap within host memory, and SGLang's reserved decode tokens (docs/model.md §1.5.1,
# §1.5.2)


def test_swap_falls_back_to_recompute_when_host_memory_is_full():
    """R1's context is 11 tokens when it is preempted at 0.03. With host memory for 11
    tokens it is swapped (the swap timeline above: done at 0.081); with room for 10 it is
    preempted by recompute instead: re-prefilled from 0.05 (0.016 s), done at 0.096, and
    its 11 tokens count as re-prefilled."""
    host = {"preemption": "swap", "host_path_bytes_per_s": 1e3, "host_path_latency_s": 1e-3}
    fits = simulate(_two_requests(), _cfg(budget_tokens=24, swap_tokens=11, **host)).columns
    assert fits["t_done"][1] == pytest.approx(0.051 + 3 * 0.01, rel=1e-12)
    full = simulate(_two_requests(), _cfg(budget_tokens=24, swap_tokens=10, **host)).columns
    assert full["t_done"][1] == pytest.approx(0.05 + 0.016 + 3 * 0.01, rel=1e-12)
    assert full["preempt_tokens"].tolist() == [0, 11]
    assert full["preempt_delay_s"][1] == pytest.approx(0.066 - 0.03, rel=1e-12)


def test_swap_room_is_what_the_host_kv_pool_leaves():
    """replicate_tiered keeps its host KV pool (5 tokens here) in the same host memory:
    with 16 tokens of host DRAM, 11 are left and R1's 11-token context swaps (done at
    0.081); with 15, 10 are left and it is recomputed (done at 0.096). No prompt has
    blocks, so the tier itself holds nothing."""
    kw = {"budget_tokens": 24, "preemption": "swap", "policy": "replicate_tiered"}
    kw |= {"host_kv_tokens": 5, "host_path_bytes_per_s": 1e3, "host_path_latency_s": 1e-3}
    c = simulate(_two_requests(), _cfg(swap_tokens=16, **kw)).columns
    assert c["t_done"][1] == pytest.approx(0.051 + 3 * 0.01, rel=1e-12)
    c = simulate(_two_requests(), _cfg(swap_tokens=15, **kw)).columns
    assert c["t_done"][1] == pytest.approx(0.05 + 0.016 + 3 * 0.01, rel=1e-12)


def test_swap_timeline_is_bytes_over_the_host_path():
    """KV of 100 B per token (its HBM read rate is left unbounded, so iterations still take
    0.01 s; the link is instant), host path 5·10⁴ B/s with 1 ms latency. R1 is preempted at
    0.03 with 11 tokens: 1100 B hold the path from 0.03 to 0.03 + 1100 / 5e4 = 0.052. R0
    ends at 0.05; R1's copy back queues behind its copy out: 0.052 + 0.022 + 0.001 = 0.075,
    then its 3 tokens at 0.085, 0.095, 0.105."""
    decode = dataclasses.replace(DECODE, kv_bpt=100.0)
    cfg = _cfg(
        budget_tokens=24,
        preemption="swap",
        decode_cost=decode,
        link_bytes_per_s=1e300,
        host_path_bytes_per_s=5e4,
        host_path_latency_s=1e-3,
    )
    c = simulate(_two_requests(), cfg).columns
    assert c["preempt_tokens"].tolist() == [0, 11]
    assert c["preempt_delay_s"][1] == pytest.approx(0.075 - 0.03, rel=1e-9)
    assert c["t_done"][1] == pytest.approx(0.105, rel=1e-9)


def test_reserved_decode_tokens_hold_admission_back():
    """N = 16 reserved decode tokens. R0 is admitted at 0 with room for 10 + min(16, 4).
    At 1 ms R0 holds 10 of the budget; R1 needs its 10 prompt tokens, 16 for R0 and
    min(16, 5 − 1) = 4 for itself: 30. With a budget of 40 (30 free) it is admitted at
    once; with 39 (29 free) it waits for R0 to finish at 0.05, is admitted then and, the
    instance idle, emits at 0.06 … 0.10. Without the reservation it is admitted at 1 ms
    (the two never hold more than 14 + 13 = 27)."""
    kw = {"reserved_decode_tokens": 16}
    c = simulate(_two_requests(), _cfg(budget_tokens=40, **kw)).columns
    assert c["t_admit"][1] == pytest.approx(0.001, rel=1e-12)
    c = simulate(_two_requests(), _cfg(budget_tokens=39, **kw)).columns
    assert c["t_admit"][1] == pytest.approx(0.05, rel=1e-12)
    assert c["t_done"][1] == pytest.approx(0.10, rel=1e-12)
    assert c["outcome"].tolist() == [1, 1]
    c = simulate(_two_requests(), _cfg(budget_tokens=29)).columns
    assert c["t_admit"][1] == pytest.approx(0.001, rel=1e-12)
    assert c["preemptions"].tolist() == [0, 0]


def test_swap_on_a_preset_respects_host_memory():
    """medium_chat at budget factor 0.35 preempts. Qwen2-1.5B's KV is 2 (K, V) × 28 layers
    × 2 KV heads × 128 dims × 2 bytes = 28,672 B per token (its config.json), so 0.001 GB
    of host DRAM holds 10⁶ // 28,672 = 34 tokens: no context fits, every victim is
    recomputed, and the run is the recompute run column for column. With the default host
    memory (256 GB per device) the same victims swap."""
    from prefixbench.scenario.loader import load_scenario
    from prefixbench.system.runner import prepare, simulate_policy

    base = ["run.requests=300", "run.warmup_requests=10", "memory.budget_factor=0.35"]

    def run(*extra):
        prep = prepare(load_scenario("medium_chat", [*base, *extra]))
        return prep, simulate_policy(prep, "transfer_per_request").columns

    prep, tiny = run("memory.preemption=swap", "cluster.decode.host_memory_gb=0.001")
    assert prep.base.swap_tokens == 34
    _, recompute = run("memory.preemption=recompute")
    assert recompute["preemptions"].sum() > 0
    for col in recompute:
        assert np.array_equal(tiny[col], recompute[col], equal_nan=True), col
    prep, swap = run("memory.preemption=swap")
    assert prep.base.swap_tokens == 256 * 10**9 // 28_672
    assert not np.array_equal(swap["preempt_tokens"], recompute["preempt_tokens"])


def test_reserved_decode_tokens_round_with_the_prompt_so_a_lone_request_fits():
    """Blocks of 16, a budget of 64, N = 1: a 49-token prompt with 5 output tokens fits
    alone (its last iteration holds 53 tokens, 4 blocks). Its reservation rounds with its
    prompt, ⌈49 + min(1, 4)⌉ = 64 ≤ 64, so it is admitted at once; counted apart
    (64 + 1 = 65) it would wait for ever."""
    req = make_requests([0.0], [49], [5], [[]])
    cfg = _cfg(budget_tokens=64, block_size=16, reserved_decode_tokens=1)
    c = simulate(req, cfg).columns
    assert c["outcome"].tolist() == [1]
    assert c["t_admit"][0] == 0.0


def test_swap_that_finds_host_memory_full_loses_what_recompute_loses():
    """0.001 GB of host memory holds 34 tokens of Qwen2-1.5B KV (28,672 B/token): every
    victim is recomputed, so the run's lost work is the recompute run's, in tokens."""
    from prefixbench.metrics.summary import requests_frame, summarize
    from prefixbench.scenario.loader import load_scenario
    from prefixbench.system.runner import prepare, simulate_policy

    rows = []
    for mode in ("swap", "recompute"):
        over = ["memory.budget_factor=0.35", f"memory.preemption={mode}", "run.requests=1500"]
        if mode == "swap":
            over.append("cluster.decode.host_memory_gb=0.001")
        prep = prepare(load_scenario("medium_chat", over))
        res = simulate_policy(prep, "replicate_all_lru")
        df = requests_frame(prep, "replicate_all_lru", res)
        rows.append(summarize(prep, "replicate_all_lru", df, res))
    swap, rec = rows
    assert rec["preemptions_per_request"] > 0
    assert swap["preempt_lost_per_request"] == rec["preempt_lost_per_request"]
