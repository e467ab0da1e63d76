"""Generated tokens in the decode cache (docs/model.md §1.10.1): answers as blocks, a
follow-up turn hitting its previous answer, the trace reading of answers, the switch.

Hand-written numbers come from the raw configs: Qwen2-0.5B has 24 layers, 2 KV heads of
64 dims in bf16, so one token's KV is 2 (K and V) x 24 x 2 x 64 x 2 bytes = 12,288 bytes;
the default link is 3.125 GB/s.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from enginecases import instance_cost, make_requests

from prefixbench.engine import EngineConfig, simulate
from prefixbench.engine import layout as L
from prefixbench.engine.audit import audit
from prefixbench.scenario.loader import load_scenario
from prefixbench.workload.answers import trace_answers
from prefixbench.workload.sessions import generate_sessions

KV = 2 * 24 * 2 * 64 * 2  # bytes per token, Qwen2-0.5B
LINK = 3.125e9
COST = instance_cost("qwen2-0.5b", "l4", 1, (0.5, 0.5, 0.7, 1.0, 1.0))
A, B, C, D, E = ((h, 64) for h in range(1, 6))


def _cfg(policy: str, **kw) -> EngineConfig:
    return EngineConfig(policy=policy, prefill_cost=COST, decode_cost=COST, **kw)


def _two_turns():
    """Turn 0: chain A, B (2 x 64) + 10 tokens, 200 output tokens: it finishes holding
    138 + 200 - 1 = 337 tokens of KV, 5 full blocks, so its answer is blocks C, D, E. Turn 1
    (long after): 138 + 200 + 30 = 368 tokens, chain A..E plus a 48-token suffix."""
    return make_requests(
        [0.0, 100.0], [138, 368], [200, 2], [[A, B], [A, B, C, D, E]], [[C, D, E], []]
    )


@pytest.mark.parametrize("policy", ["replicate_all_lru", "replicate_tiered"])
def test_second_turn_hits_its_first_turns_answer_blocks(policy):
    """With generated tokens cached, turn 1 finds A..E in HBM and moves only its 48-token
    suffix: 48 x 12,288 = 589,824 bytes, 188.7 us on the link. Prompt-only caching finds A, B
    and moves 368 - 128 = 240 tokens."""
    req = _two_turns()
    res = simulate(req, _cfg(policy, cache_generated=True), keep_state=True)
    cols = res.columns
    assert cols["hbm_hit_blocks"].tolist() == [0, 5]
    assert cols["replica_hit_tokens"].tolist() == [0, 320]
    assert cols["transfer_tokens"].tolist() == [138, 48]
    moved = cols["t_transfer_end"][1] - cols["t_transfer_start"][1]
    assert moved == pytest.approx(48 * KV / LINK, rel=1e-12)
    assert audit(res.state) == []
    old = simulate(req, _cfg(policy, cache_generated=False)).columns
    assert old["hbm_hit_blocks"].tolist() == [0, 2]
    assert old["transfer_tokens"].tolist() == [138, 240]
    moved = old["t_transfer_end"][1] - old["t_transfer_start"][1]
    assert moved == pytest.approx(240 * KV / LINK, rel=1e-12)


def test_transfer_and_recompute_never_keep_answers():
    req = _two_turns()
    for policy in ("transfer_per_request", "recompute_on_decode"):
        cols = simulate(req, _cfg(policy, cache_generated=True)).columns
        assert cols["replica_hit_tokens"].tolist() == [0, 0]


def test_answer_blocks_that_do_not_fit_are_dropped_root_first():
    """One request: chain A, B (128 tokens) + 10, 150 output, answer C, D, E. It reserves
    138 + 150 = 288 tokens, of which A, B are persisted replicas. Once it finishes the free
    room is budget - 128: with 400 (272 free) C, D, E (192) all join, 320 replica tokens;
    with 300 (172 free) C and D (128) fit and E (192 > 172) does not: 256 replica tokens."""
    req = make_requests([0.0], [138], [150], [[A, B]], [[C, D, E]])
    for budget, resident in ((400, 320), (300, 256)):
        cfg = _cfg("replicate_all_lru", cache_generated=True, budget_tokens=budget)
        res = simulate(req, cfg, keep_state=True)
        IS = res.state.IS
        assert int(IS[L.DI0 + L.D_USED]) == resident
        assert int(IS[L.DI0 + L.D_IDLE]) == resident
        assert audit(res.state) == []


def test_session_answers_are_the_next_turns_chain_blocks():
    """Each follow-up turn's chain starts with its previous turn's chain and answer blocks:
    the answer is floor((prompt + output - 1) / 16) - floor(prompt / 16) blocks."""
    s = load_scenario("multi_turn_chat")
    g = generate_sessions(s.workload, 400, 16, 0)
    r = g.requests
    r.validate()
    nans = np.diff(r.ans_ptr)
    assert nans.tolist() == ((r.prompt_len + r.output_len - 1) // 16 - r.prompt_len // 16).tolist()
    follow = 0
    for i in np.flatnonzero(g.turn > 0):
        prev = np.flatnonzero((g.session == g.session[i]) & (g.turn == g.turn[i] - 1))
        if not len(prev):
            continue
        j = int(prev[0])
        full = np.concatenate(
            (
                r.blk_hash[r.blk_ptr[j] : r.blk_ptr[j + 1]],
                r.ans_hash[r.ans_ptr[j] : r.ans_ptr[j + 1]],
            )
        )
        assert r.blk_hash[r.blk_ptr[i] : r.blk_ptr[i] + len(full)].tolist() == full.tolist()
        follow += 1
    assert follow > 0


def test_trace_answers_are_read_off_the_follow_up():
    """r0: 1,100 tokens in blocks 1, 2 (whole) and 3 (76), 500 output: 1,599 tokens of KV
    fill 3 blocks of 512, one past its 2 whole ones. r1 extends [1, 2] with 7, so r0's answer
    is [7]. r1 (2,000 tokens, whole blocks 1, 2, 7) holds 2,299 tokens: one block past, no
    follow-up, a fresh id (the largest hash + 1 = 9). r2 has one whole block: not followed
    (fewer than two), its one answer block is fresh (10)."""
    req = make_requests(
        [0.0, 1.0, 2.0],
        [1100, 2000, 600],
        [500, 300, 600],
        [[(1, 512), (2, 512), (3, 76)], [(1, 512), (2, 512), (7, 512), (8, 464)], [(1, 512), (5, 88)]],
    )
    out = trace_answers(req)
    out.validate()
    assert out.ans_ptr.tolist() == [0, 1, 2, 3]
    assert out.ans_hash.tolist() == [7, 9, 10]
    assert out.ans_tokens.tolist() == [512, 512, 512]


def test_switch_off_is_the_prompt_only_run_bit_for_bit():
    """memory.cache_generated=false gives the same columns as a workload with no answers."""
    from prefixbench.system.runner import prepare, simulate_policy

    over = ["run.requests=150", "run.warmup_requests=10", "memory.cache_generated=false"]
    prep = prepare(load_scenario("multi_turn_chat", over))
    plain = dataclasses.replace(prep, requests=prep.requests.without_answers())
    a = simulate_policy(prep, "replicate_all_lru").columns
    b = simulate_policy(plain, "replicate_all_lru").columns
    for k in a:
        assert np.array_equal(a[k], b[k], equal_nan=True), k
