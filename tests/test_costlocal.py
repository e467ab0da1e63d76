"""cost_aware's local prefill (engine/costlocal.py; docs/model.md §1.14.1), checked by hand.

Round costs: a prefill step is free (no weights, no FLOP terms), a decode iteration reads
10 weight bytes at 1000 B/s (0.01 s; a 10-token chunk's 10⁹ FLOP per token at 10¹⁵
FLOP/s is 10⁻⁵ s, under the weight read; the KV read rate is unbounded), and the KV is
100 B per token over the link.
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
    **{**_ZERO, "flops_rate_prefill": 1e12, "flops_rate_decode": 1e12, "byte_rate": 1e3}
)
DECODE = InstanceCost(
    **{**_ZERO, "flops_rate_prefill": 1e12, "flops_rate_decode": 1e15, "byte_rate": 1e3,
       "linear_flops": 1e9, "weights": 10.0, "kv_bpt": 100.0}
)  # fmt: skip


def _run(link_bytes_per_s: float, local: bool = True):
    cfg = EngineConfig(
        policy="cost_aware",
        prefill_cost=PREFILL,
        decode_cost=DECODE,
        link_bytes_per_s=link_bytes_per_s,
        budget_tokens=10**6,
        cost_aware_local=local,
    )
    # one request: a 10-token prompt, 5 output tokens, no shared blocks
    return simulate(make_requests([0.0], [10], [5], [[]]), cfg).columns


def test_a_slow_link_makes_it_prefill_on_decode():
    """Over 10⁴ B/s the remote path costs its free step plus 1000 B / 10⁴ = 0.1 s; the
    local prefill one 0.01 s iteration carrying its 10 tokens as a chunk (empty batch): it
    is prefilled on decode from 0 to 0.01, joins there and emits at 0.02 … 0.06; nothing
    crosses the link."""
    c = _run(1e4)
    assert c["prefill_instance"].tolist() == [-1]
    assert c["transfer_tokens"].tolist() == [0] and c["recompute_tokens"].tolist() == [10]
    assert c["t_first_token"][0] == pytest.approx(0.02, rel=1e-9)
    assert c["t_done"][0] == pytest.approx(0.06, rel=1e-9)


def test_a_fast_link_keeps_it_remote():
    """Over 2·10⁵ B/s the remote path costs 1000 / 2e5 = 0.005 s < 0.01 s: prefilled on the
    prefill instance, its KV lands at 0.005, tokens at 0.015 … 0.055. With the option off,
    the slow link keeps it remote too (KV lands at 0.1)."""
    c = _run(2e5)
    assert c["prefill_instance"].tolist() == [0]
    assert c["transfer_tokens"].tolist() == [10]
    assert c["t_first_token"][0] == pytest.approx(0.015, rel=1e-9)
    off = _run(1e4, local=False)
    assert off["prefill_instance"].tolist() == [0]
    assert off["t_transfer_end"][0] == pytest.approx(0.1, rel=1e-9)
