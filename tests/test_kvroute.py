"""KV-aware routing (engine/kvroute.py, docs/model.md "KV-aware routing"), by hand: the
score w·(uncached prompt tokens) + load picks a different instance than the load-only
routers when the overlap is worth more than the queue.

Same Qwen2-0.5B / L4 raw numbers as tests/test_streaming.py.
"""

from __future__ import annotations

import pytest
from enginecases import make_requests
from test_engine_reference import _compare

A_BLK = [(7, 600)]


def _prefill_case(router: str, w: float = 1.0):
    """Request 0 (block A, 650 tokens) warms prefill 0's cache. Request 1 (300 tokens, no
    prefix) starts a step on prefill 0 at 1.0; request 2 (block A, 650 tokens) arrives
    during it. Scores for request 2: prefill 0 = w·(650 − 600) + 300, prefill 1 = w·650."""
    req = make_requests([0.0, 1.0, 1.0001], [650, 300, 650], [2, 2, 2], [A_BLK, [], A_BLK])
    return _compare(
        req, policy="transfer_per_request", n_prefill=2, prefill_router=router,
        kv_overlap_weight=w,
    )[0]  # fmt: skip


@pytest.mark.parametrize(
    "router,w,chosen,hit",
    [
        ("kv_aware", 1.0, 0, 600),  # 350 < 650: the cache is worth the queue
        ("kv_aware", 0.0, 1, 0),  # w = 0: load only (300 > 0)
        ("least_tokens", 1.0, 1, 0),  # today's router: the empty instance
    ],
)
def test_prefill_kv_aware_choice(router, w, chosen, hit):
    cols = _prefill_case(router, w)
    assert cols["prefill_instance"].tolist()[:2] == [0, 0]
    assert cols["prefill_instance"][2] == chosen
    assert cols["prefill_hit_tokens"][2] == hit


@pytest.mark.parametrize(
    "router,chosen,hit",
    [
        ("kv_aware", 0, 600),  # 50 + (100 + 200) = 350 < 650 + 0
        ("least_load", 1, 0),  # one request running on decode 0, none on 1
    ],
)
def test_decode_kv_aware_choice(router, chosen, hit):
    """Request 0 (block A) leaves A resident on decode 0 and finishes. Request 1 (100
    tokens, 200 out, no prefix) runs on decode 0 from 1.0; request 2 (block A, 650 tokens)
    is handed off at about 1.1. Scores for request 2: decode 0 = (650 − 600) + 300,
    decode 1 = 650."""
    req = make_requests([0.0, 1.0, 1.1], [650, 100, 650], [2, 200, 2], [A_BLK, [], A_BLK])
    cols = _compare(req, policy="replicate_all_lru", n_decode=2, decode_router=router)[0]
    assert cols["decode_instance"].tolist()[:2] == [0, 0]
    assert cols["t_done"][1] > 1.2 and cols["t_done"][0] < 1.0
    assert cols["decode_instance"][2] == chosen
    assert cols["replica_hit_tokens"][2] == hit
