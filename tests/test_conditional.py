"""conditional_disagg (engine/conditional.py, docs/model.md "Conditional disaggregation"),
by hand: which requests prefill on their decode instance, and a local prefill priced as the
chunked-prefill iterations it runs as.

Same Qwen2-0.5B / L4 raw numbers as tests/test_streaming.py and tests/test_recompute.py.
"""

from __future__ import annotations

import pytest
from enginecases import make_requests
from test_engine_reference import _compare
from test_recompute import chunk_step
from test_streaming import F_HEAD, F_LIN, A, K, ops, prefill_step

BLK = [(7, 600)]


def decode_step(batch: int, ctx: int) -> float:
    """A plain decode iteration of ``batch`` sequences attending to ``ctx`` tokens: the
    per-operator roofline (docs/model/cost-model.md), 1 ms overhead."""
    return ops(batch * (F_LIN + F_HEAD), batch, A * ctx, K * ctx) + 1e-3


def _run(req, **kw):
    kw = {"policy": "conditional_disagg", "max_batch": 4, "recompute_chunk_tokens": 256, **kw}
    return _compare(req, **kw)[0]


def test_a_short_prompt_prefills_on_decode_in_chunks():
    """650 uncached tokens ≤ 1000 (Dynamo's default): no prefill instance, nothing on the
    link; the prompt runs as chunks of 256, 256 and 138 tokens in decode iterations, then
    the request joins and its first token ends the next iteration."""
    req = make_requests([0.5], [650], [2], [[]])
    cols = _run(req)
    assert cols["prefill_instance"][0] == -1
    assert cols["transfer_tokens"][0] == 0
    assert cols["recompute_tokens"][0] == 650
    assert cols["t_prefill_end"][0] == cols["t_recompute_start"][0] == 0.5
    chunks = chunk_step(256, 0) + chunk_step(256, 256) + chunk_step(138, 512)
    assert cols["t_recompute_end"][0] - 0.5 == pytest.approx(chunks, rel=1e-12)
    first = cols["t_recompute_end"][0] + decode_step(1, 650)
    assert cols["t_first_token"][0] == pytest.approx(first, rel=1e-12)


def test_a_long_uncached_prompt_prefills_remotely():
    """650 uncached tokens > 600 and nothing resident: the prefill instance computes it and
    the whole prompt crosses the link, as replicate_all_lru."""
    req = make_requests([0.5], [650], [2], [[]])
    cols = _run(req, max_local_prefill_tokens=600)
    assert cols["prefill_instance"][0] == 0
    assert cols["transfer_tokens"][0] == 650
    assert cols["recompute_tokens"][0] == 0
    assert cols["t_prefill_end"][0] - 0.5 == pytest.approx(prefill_step(650, 0), rel=1e-12)


@pytest.mark.parametrize("ratio,local", [(0.5, True), (0.95, False)])
def test_a_well_hit_prompt_prefills_its_suffix_on_decode(ratio, local):
    """Request 0 goes remote (650 > 10, no hit) and leaves its 600-token block resident.
    Request 1 carries that block: 600 of 650 tokens resident is a share of 0.92; above 0.5
    it prefills its 50-token suffix locally (one chunk attending to the 600 resident
    tokens), below 0.95 remotely (the 50 tokens cross the link)."""
    req = make_requests([0.0, 1.0], [650, 650], [2, 2], [BLK, BLK])
    cols = _run(req, max_local_prefill_tokens=10, local_prefill_hit_ratio=ratio)
    assert cols["prefill_instance"][0] == 0 and cols["transfer_tokens"][0] == 650
    assert cols["replica_hit_tokens"][1] == 600
    if local:
        assert cols["prefill_instance"][1] == -1
        assert cols["transfer_tokens"][1] == 0 and cols["recompute_tokens"][1] == 50
        took = cols["t_recompute_end"][1] - 1.0
        assert took == pytest.approx(chunk_step(50, 600), rel=1e-12)
    else:
        assert cols["prefill_instance"][1] == 0
        assert cols["transfer_tokens"][1] == 50 and cols["recompute_tokens"][1] == 0
