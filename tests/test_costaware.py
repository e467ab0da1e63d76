"""cost_aware (engine/costaware.py): per-request choice and reuse-estimated residency.

Every case also runs through the reference simulator (tests/reference_sim.py), which
implements the policy from its description in docs/model.md."""

from __future__ import annotations

import numpy as np
import pytest
from enginecases import make_requests
from test_engine_reference import _compare

BLOCK = 256


def _chain(prefix: int, blocks: int) -> list[tuple[int, int]]:
    return [(prefix * 100 + k, BLOCK) for k in range(blocks)]


def _spaced(n: int, blocks: int, gap_s: float = 10.0):
    """One request at a time (``gap_s`` apart, far more than a request takes): prefixes
    0, 0, 1, 1, 2, 2, ... so the prefill has each one cached at its second use."""
    chains = [_chain(i // 2, blocks) for i in range(n)]
    prompt = [blocks * BLOCK + 40] * n
    return make_requests([i * gap_s for i in range(n)], prompt, [4] * n, chains)


def _ttft(cols, req):
    return cols["t_first_token"] - req.arrival


@pytest.mark.parametrize("bw", [0.02e9, 0.2e9, 3.125e9, 50e9])
@pytest.mark.parametrize("blocks", [2, 8])
def test_never_worse_than_the_better_fixed_rule_one_request_at_a_time(bw, blocks):
    req = _spaced(8, blocks)
    runs = {
        p: _compare(req, policy=p, link_bytes_per_s=bw, link_latency_s=2e-5)[0]
        for p in ("transfer_per_request", "recompute_on_decode", "cost_aware")
    }
    best = np.minimum(
        _ttft(runs["transfer_per_request"], req), _ttft(runs["recompute_on_decode"], req)
    )
    ca = _ttft(runs["cost_aware"], req)
    assert np.all(runs["cost_aware"]["outcome"] == 1)
    assert np.all(ca <= best * (1 + 1e-12)), (ca - best).tolist()


def test_the_choice_follows_the_link():
    """Second use of a prefix (cached on prefill, not yet on decode): a slow link makes
    recompute cheaper, a fast one transfer; the third use hits the kept replica."""
    req = _spaced(3, 8)
    req = make_requests(req.arrival, req.prompt_len, req.output_len, [_chain(0, 8)] * 3)
    slow, _ = _compare(req, policy="cost_aware", link_bytes_per_s=0.02e9)
    fast, _ = _compare(req, policy="cost_aware", link_bytes_per_s=50e9)
    prefix = 8 * BLOCK
    # first use: nothing cached anywhere, so everything is transferred
    assert slow["recompute_tokens"][0] == fast["recompute_tokens"][0] == 0
    assert slow["transfer_tokens"][0] == prefix + 40
    # second use: the prefill computed only the suffix (its hit stops one token short)
    assert slow["recompute_tokens"][1] == prefix and slow["transfer_tokens"][1] == 40
    assert fast["recompute_tokens"][1] == 0 and fast["transfer_tokens"][1] == prefix + 40
    # kept at the second use (seen twice within a half-life), hit at the third
    assert slow["persisted_tokens"].tolist() == [0, prefix, 0]
    assert slow["replica_hit_tokens"][2] == prefix and slow["transfer_tokens"][2] == 40


def test_a_prefix_used_once_is_not_kept():
    chains = [_chain(i, 4) for i in range(5)]
    req = make_requests([i * 1.0 for i in range(5)], [4 * BLOCK + 10] * 5, [4] * 5, chains)
    cols, _ = _compare(req, policy="cost_aware")
    assert cols["persisted_tokens"].tolist() == [0] * 5
    lru, _ = _compare(req, policy="replicate_all_lru")
    assert lru["persisted_tokens"].tolist() == [4 * BLOCK] * 5


def test_a_reuse_later_than_one_half_life_is_not_kept():
    """Half-life T = budget / (prompt tokens admitted per second so far). Budget 20,000
    tokens; r0 (prefix A) admitted at about 0, r1 (no prefix, 1,034 tokens) at about 1 s,
    r2 (A) at t2: T = 20,000 / (3,102 / t2) = 6.45·t2 s, and 2^(−t2/T) = 2^(−0.155) = 0.898:
    1.898 ≥ 1.5, kept. With the budget at 2,000 tokens T = 0.645·t2 and 2^(−1.55) = 0.34:
    1.34 < 1.5, not kept."""
    a = _chain(0, 4)
    req = make_requests([0.0, 1.0, 2.0], [1034] * 3, [2] * 3, [a, [], a])
    kept, _ = _compare(req, policy="cost_aware", budget_tokens=20_000)
    gone, _ = _compare(req, policy="cost_aware", budget_tokens=2_000)
    assert kept["persisted_tokens"].tolist() == [0, 0, 1024]
    assert gone["persisted_tokens"].tolist() == [0, 0, 0]


def test_under_load_it_mixes_both_choices_and_prices_the_stall():
    """Many requests close together over a slow link: some recompute, some transfer (once
    the batch is large the stall's cost to the co-batched sequences rules recompute out)."""
    rng = np.random.default_rng(3)
    n = 40
    chains = [_chain(int(rng.integers(0, 4)), 6) for _ in range(n)]
    arrival = np.cumsum(rng.exponential(0.05, n))
    req = make_requests(arrival, [6 * BLOCK + 30] * n, rng.integers(20, 80, n), chains)
    cols, _ = _compare(req, policy="cost_aware", link_bytes_per_s=0.1e9, max_batch=16)
    rc = cols["recompute_tokens"] > 0
    xfer_prefix = cols["transfer_tokens"] > 30 + 6 * BLOCK - cols["replica_hit_tokens"] - 1
    assert rc.any() and (xfer_prefix & (cols["prefill_hit_tokens"] > 0)).any()
