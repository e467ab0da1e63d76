"""Recompute on the decode node as chunked prefill mixed into decode iterations, batched and
deduplicated (engine/recompute.py, docs/model.md §1.9), by hand.

Same Qwen2-0.5B / L4 raw numbers as tests/test_streaming.py. Request 0 fills the prefill
node's cache with a 600-token block; later requests carrying that block hit it there, so
recompute_on_decode rebuilds its 600 tokens on the decode node.
"""

from __future__ import annotations

import math

import pytest
from enginecases import make_requests
from test_engine_reference import _compare
from test_streaming import F_LIN, A, K, ops

from prefixbench.engine.config import EngineConfig, check_engine_config
from prefixbench.errors import SimulationError

BLK = [(7, 600)]


def chunk_step(m: int, done: int, batch: int = 0, ctx: int = 0, head: float = 0.0) -> float:
    """A decode iteration of ``batch`` sequences (``ctx`` tokens attended) carrying a
    recompute chunk of ``m`` tokens after ``done``: the per-operator roofline at decode
    efficiency (the GEMMs at batch + m tokens), the chunk without logits, 1 ms overhead."""
    gemm = batch * (F_LIN + head) + m * F_LIN
    attn = A * ctx + A * (m * done + m * (m + 1) / 2)
    return ops(gemm, batch + m, attn, K * ctx + K * (done + m)) + 1e-3


def _run(req, **kw):
    return _compare(req, policy="recompute_on_decode", max_batch=4, **kw)[0]


def test_a_recompute_runs_in_chunks_of_the_token_budget():
    """Budget 256 and an empty batch: 600 tokens in three iterations of 256, 256 and 88."""
    req = make_requests([0.0, 1.0], [650, 650], [2, 2], [BLK, BLK])
    cols = _run(req, recompute_chunk_tokens=256)
    assert cols["recompute_tokens"].tolist() == [0, 600]
    steps = chunk_step(256, 0) + chunk_step(256, 256) + chunk_step(88, 512)
    took = cols["t_recompute_end"][1] - cols["t_recompute_start"][1]
    assert took == pytest.approx(steps, rel=1e-12)
    # a whole-job step (the old stall model's one step) would have been different
    assert not math.isclose(took, chunk_step(600, 0), rel_tol=1e-3)


def test_the_batch_keeps_decoding_during_a_recompute():
    """Request 1 (no prefix) decodes while request 2's 600-token job runs: its tokens keep
    coming, one per mixed iteration, so its largest token gap is one mixed iteration (the
    largest, the last chunk's), not the whole job."""
    req = make_requests([0.0, 0.9, 1.0], [650, 40, 650], [2, 400, 2], [BLK, [], BLK])
    cols = _run(req, recompute_chunk_tokens=256, track_gaps=True)
    job = cols["t_recompute_end"][2] - cols["t_recompute_start"][2]
    assert cols["recompute_tokens"][2] == 600
    assert cols["t_recompute_start"][2] < cols["t_done"][1]
    assert cols["max_token_gap"][1] < job / 2


def test_concurrent_requests_compute_a_shared_prefix_once():
    """Budget 16 makes request 1's 600-token job ~40 iterations long; request 2 (same
    block) is admitted meanwhile and waits for request 1's blocks instead of computing
    them: it recomputes nothing and is done with request 1. A request with another block
    (control) computes all 600 itself."""
    req = make_requests([0.0, 1.0, 1.001], [650, 650, 650], [2, 2, 2], [BLK, BLK, BLK])
    cols = _run(req, recompute_chunk_tokens=16)
    assert cols["t_admit"][2] < cols["t_recompute_end"][1]  # concurrent
    assert cols["recompute_tokens"].tolist() == [0, 600, 0]
    assert cols["t_recompute_end"][2] == cols["t_recompute_end"][1]

    other = [(8, 600)]
    ctl = make_requests(
        [0.0, 0.5, 1.0, 1.001], [650, 650, 650, 650], [2, 2, 2, 2], [BLK, other, BLK, other]
    )
    c = _run(ctl, recompute_chunk_tokens=16)
    assert c["recompute_tokens"].tolist() == [0, 0, 600, 600]
    assert c["t_recompute_end"][3] > c["t_recompute_end"][2]


def test_the_budget_must_leave_room_beside_a_full_batch():
    from prefixbench.physics.costmodel import InstanceCost

    cost = InstanceCost(**dict.fromkeys(InstanceCost.__dataclass_fields__, 1.0))
    cfg = EngineConfig(
        policy="recompute_on_decode",
        prefill_cost=cost,
        decode_cost=cost,
        max_batch=64,
        recompute_chunk_tokens=64,
    )
    with pytest.raises(SimulationError, match="chunk_token_budget"):
        check_engine_config(cfg)
