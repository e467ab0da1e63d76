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
    """Second use of a prefix on the other decode instance (cached on prefill, not on that
    decode): a slow link makes recompute cheaper, a fast one transfer; the third use, back
    on the first instance, hits the replica its first use kept."""
    req = _spaced(3, 8)
    req = make_requests(req.arrival, req.prompt_len, req.output_len, [_chain(0, 8)] * 3)
    two = {"policy": "cost_aware", "n_decode": 2, "decode_router": "round_robin"}
    slow, _ = _compare(req, link_bytes_per_s=0.02e9, **two)
    fast, _ = _compare(req, link_bytes_per_s=50e9, **two)
    prefix = 8 * BLOCK
    assert slow["decode_instance"].tolist() == [0, 1, 0]
    # first use: nothing cached anywhere, so everything is transferred
    assert slow["recompute_tokens"][0] == fast["recompute_tokens"][0] == 0
    assert slow["transfer_tokens"][0] == prefix + 40
    # second use: the prefill computed only the suffix (its hit stops one token short)
    assert slow["recompute_tokens"][1] == prefix and slow["transfer_tokens"][1] == 40
    assert fast["recompute_tokens"][1] == 0 and fast["transfer_tokens"][1] == prefix + 40
    # every block is kept where it lands (recomputed ones too); the third use hits
    assert slow["persisted_tokens"].tolist() == [prefix, prefix, 0]
    assert slow["replica_hit_tokens"][2] == prefix and slow["transfer_tokens"][2] == 40


def test_every_block_is_kept_as_all_lru_keeps_it():
    """Keeping costs no memory admission could use (costaware.py, residency): a prefix used
    once is kept, as replicate_all_lru keeps it."""
    chains = [_chain(i, 4) for i in range(5)]
    req = make_requests([i * 1.0 for i in range(5)], [4 * BLOCK + 10] * 5, [4] * 5, chains)
    cols, _ = _compare(req, policy="cost_aware")
    lru, _ = _compare(req, policy="replicate_all_lru")
    assert cols["persisted_tokens"].tolist() == lru["persisted_tokens"].tolist() == [4 * BLOCK] * 5


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


FIXED = (
    "transfer_per_request",
    "recompute_on_decode",
    "replicate_hotset",
    "replicate_all_lru",
    "replicate_tiered",
)


@pytest.mark.parametrize(
    "model,workload",
    [
        ("qwen2-0.5b", "long_context_support"),  # the doorkeeper lost by 15% here
        ("qwen2-1.5b", "tool_call"),  # and by 8% here
        ("qwen2-0.5b", "enterprise_hotset"),
    ],
)
def test_within_three_percent_of_the_best_fixed_rule_at_budget_035(model, workload):
    """The reference grid's tightest budget, three seeds: cost_aware's mean TTFT is never more
    than 3% above the best fixed rule's (measured on the whole grid at 10,000 requests: equal
    to replicate_tiered's in all 8 cells, where the decayed-count doorkeeper lost by up to
    20%). Short runs here: 1,500 requests, 150 of warm-up."""
    from prefixbench.scenario.loader import load_scenario
    from prefixbench.study.runs import run_scenario

    ttft: dict[str, list[float]] = {}
    for seed in (0, 1, 2):
        sets = [f"model={model}", "memory.budget_factor=0.35", "memory.admission=reserve",
                "run.requests=1500", "run.warmup_requests=150", f"seed={seed}"]  # fmt: skip
        rows = run_scenario(load_scenario(workload, sets), [*FIXED, "cost_aware"]).summary
        for r in rows.iter_rows(named=True):
            ttft.setdefault(r["policy"], []).append(r["ttft_mean_ms"])
    best = min(np.mean(ttft[p]) for p in FIXED)
    assert np.mean(ttft["cost_aware"]) <= 1.03 * best
