"""The infinite-cache bound (workload/reuse.py) and its summary column ``reusable_rate``."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from tracestats import infinite_cache_hit_ratio

from prefixbench.workload.requests import Requests
from prefixbench.workload.reuse import reusable_tokens

DATA = Path(__file__).resolve().parent / "data"


def _req(chains: list[list[tuple[int, int]]], prompts: list[int]) -> Requests:
    n = len(chains)
    return Requests(
        arrival=np.arange(n, dtype=np.float64),
        prompt_len=np.array(prompts, dtype=np.int64),
        output_len=np.ones(n, dtype=np.int64),
        blk_ptr=np.concatenate(([0], np.cumsum([len(c) for c in chains]))).astype(np.int64),
        blk_hash=np.array([h for c in chains for h, _ in c], dtype=np.int64),
        blk_tokens=np.array([t for c in chains for _, t in c], dtype=np.int64),
        prefix_id=np.full(n, -1, dtype=np.int64),
    )


def test_by_hand():
    """r0 [A B] sees nothing; r1 [A B C] reuses A, B (16 + 16); r2 [A D C] reuses A only (C
    follows D, not B: a run stops at the first unseen block); r3 has no chain; r4 [A B C]
    reuses all three (48)."""
    a, b, c, d = 1, 2, 3, 4
    req = _req(
        [
            [(a, 16), (b, 16)],
            [(a, 16), (b, 16), (c, 16)],
            [(a, 16), (d, 16), (c, 16)],
            [],
            [(a, 16), (b, 16), (c, 16)],
        ],
        [40, 50, 50, 10, 60],
    )
    assert reusable_tokens(req).tolist() == [0, 32, 16, 0, 48]


def test_within_one_request_a_repeat_is_not_reuse():
    req = _req([[(7, 16), (7, 16)], [(7, 16)]], [32, 16])
    assert reusable_tokens(req).tolist() == [0, 16]


def test_an_earlier_answer_counts_only_when_asked_and_only_for_later_requests():
    """r0 [A] answers B; r1 [A B] reuses A, and B too when answers count; r1's own answer
    C does not serve r1's chain [.. C] (r2 [C] reuses it: 16)."""
    a, b, c = 1, 2, 3
    req = _req([[(a, 16)], [(a, 16), (b, 16), (c, 16)], [(c, 16)]], [16, 48, 16])
    req.ans_ptr = np.array([0, 1, 2, 2], dtype=np.int64)
    req.ans_hash = np.array([b, c], dtype=np.int64)
    req.ans_tokens = np.array([16, 16], dtype=np.int64)
    assert reusable_tokens(req).tolist() == [0, 16, 16]
    assert reusable_tokens(req, answers=True).tolist() == [0, 32, 16]


def test_matches_the_trace_statistic_computed_from_the_raw_file():
    from prefixbench.workload.traces import read_trace

    path = DATA / "conversation_trace_head300.jsonl"
    req = read_trace(path, None, block_size=512, time_unit_s=1e-3, skip_bad=False).requests
    got = reusable_tokens(req).sum() / req.prompt_len.sum()
    assert got == pytest.approx(infinite_cache_hit_ratio(path), abs=1e-12)


def test_summary_reports_it_and_it_bounds_every_policy():
    from prefixbench.scenario.loader import load_scenario
    from prefixbench.scenario.models import POLICIES
    from prefixbench.study.runs import run_scenario

    s = load_scenario("multi_turn_chat", ["run.requests=800", "run.warmup_requests=80"])
    rows = run_scenario(s, list(POLICIES), keep_requests=False).summary.to_dicts()
    bound = {r["reusable_rate"] for r in rows}
    assert len(bound) == 1  # the workload's, whatever the policy (all admit every request here)
    (value,) = bound
    assert 0.4 < value < 1
    for r in rows:
        assert r["replica_hit_rate"] <= value + 1e-12
