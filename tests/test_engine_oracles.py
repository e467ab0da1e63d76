"""Analytic oracles and invariants of the engine (BRIEF §6, rung 3).

Each test names what it guards and is built so that it fails when that thing is wrong:

* the KV link as an M/D/1 queue (Pollaczek–Khinchine), premise checked, not assumed;
* Little's law on the decode instance against a batch size *predicted* from the roofline
  written out by hand (not an identity over the run's own timestamps);
* conservation, from the public results only: every request ends exactly once, timestamps
  run in stage order, and the KV the admitted requests hold never exceeds the budget
  (replica refcounts and the store's books are checked inside tests/reference_sim.py,
  which the engine agrees with on every column);
* policies that must coincide on a workload WITH sharing (prefill cache off ⇒
  recompute_on_decode is transfer_per_request; empty hot set ⇒ replicate_hotset is
  transfer_per_request), each with a control showing the same comparison does differ when
  the cache or the hot set is on;
* determinism in the seed;
* directional checks: recompute_on_decode slows everyone's TPOT, replication moves fewer
  bytes.

Only public entry points are used (``runner.prepare``, ``runner.simulate_policy``,
``simulate`` and ``EngineConfig`` as re-exported by ``prefixbench.system.runner``).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from prefixbench import catalog
from prefixbench.engine.audit import audit
from prefixbench.physics.costmodel import Efficiency, InstanceCost
from prefixbench.scenario.loader import load_scenario
from prefixbench.system.runner import EngineConfig, prepare, simulate, simulate_policy
from prefixbench.workload.requests import Requests

POLICIES = ("transfer_per_request", "recompute_on_decode", "replicate_hotset", "replicate_all_lru")
PRESETS = ("enterprise_hotset", "medium_chat", "tool_call", "long_context_support")
COMPLETED, REJECTED = 1, 2


def _prep(name: str, *overrides: str, requests: int = 2000):
    """The seed's reserve admission unless ``overrides`` say otherwise (check_memory is its
    conservation law)."""
    sets = [f"run.requests={requests}", "run.warmup_requests=0", "memory.admission=reserve"]
    return prepare(load_scenario(name, [*sets, *overrides]))


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    return np.array_equal(a, b, equal_nan=a.dtype.kind == "f")


# ---------------------------------------------------------------- link queue vs M/D/1


def _plain_requests(arrival: np.ndarray, prompt: int, output: int) -> Requests:
    n = len(arrival)
    return Requests(
        arrival=arrival,
        prompt_len=np.full(n, prompt, dtype=np.int64),
        output_len=np.full(n, output, dtype=np.int64),
        blk_ptr=np.zeros(n + 1, dtype=np.int64),
        blk_hash=np.zeros(0, dtype=np.int64),
        blk_tokens=np.zeros(0, dtype=np.int64),
        prefix_id=np.full(n, -1, dtype=np.int64),
    )


@pytest.mark.parametrize("rho", [0.3, 0.5])
def test_link_queue_matches_md1(rho):
    """Mean link wait (t_transfer_start - t_admit) vs Pollaczek–Khinchine W = ρS / (2(1-ρ)).

    Poisson arrivals, every request the same 64-token prompt and no sharing, so each transfer
    holds the single channel for S = 64·kv_bpt / bandwidth = 10 ms: deterministic service.
    Decode memory is unbounded so admission never blocks, and output is 1 token.

    How Poisson are the link arrivals? A request reaches the link when its prefill ends.
    Prefill here is one prompt per step (prefill_token_budget = 64) on 8 H100s with no step
    overhead: a step is ~53 µs (reading the 0.5B weights), ~0.5% of S and ~0.3% of the mean
    gap 1/λ. A request is delayed at prefill only if it arrives while the previous step runs
    (probability λ·53 µs ≈ 0.3–0.5%), and then by < 53 µs. So link arrivals are the Poisson
    arrivals shifted by a constant except for a few tiny perturbations: the gaps' coefficient
    of variation is 1 and their Kolmogorov–Smirnov distance to Exp(λ) is at sampling noise;
    both are asserted below so the premise of the oracle is checked, not assumed.
    """
    n, prompt, service = 50_000, 64, 0.010
    lam = rho / service
    eff = Efficiency(prefill_overhead_ms=0.0, decode_overhead_ms=0.0)
    model = catalog.get_model("qwen2-0.5b")
    h100 = catalog.get_accelerator("h100-sxm")
    p_cost = InstanceCost.build(model, h100, 8, eff)
    d_cost = InstanceCost.build(model, h100, 1, eff)
    arrival = np.cumsum(np.random.default_rng(7).exponential(1.0 / lam, n))
    cfg = EngineConfig(
        policy="transfer_per_request",
        prefill_cost=p_cost,
        decode_cost=d_cost,
        link_bytes_per_s=prompt * d_cost.kv_bpt / service,
        link_latency_s=0.0,
        link_channels=1,
        max_batch=10**6,
        prefill_token_budget=prompt,
        budget_tokens=10**12,
    )
    c = simulate(_plain_requests(arrival, prompt, 1), cfg).columns
    assert np.all(c["outcome"] == COMPLETED)
    assert np.allclose(c["t_transfer_end"] - c["t_transfer_start"], service, rtol=1e-9)

    # the premise: link arrivals (admission times) are Poisson at rate λ
    step = float(np.max(c["t_prefill_end"] - c["t_prefill_start"]))
    assert step < 0.01 * service
    assert np.mean(c["t_prefill_start"] > arrival) < 0.01  # found the prefill busy
    gaps = np.sort(np.diff(c["t_admit"]))
    assert abs(gaps.std() / gaps.mean() - 1.0) < 0.02
    ecdf = np.arange(1, len(gaps) + 1) / len(gaps)
    ks = np.max(np.abs(ecdf - (1.0 - np.exp(-lam * gaps))))
    assert ks < 1.95 / np.sqrt(len(gaps))  # the 99.9% KS critical value

    wait = c["t_transfer_start"] - c["t_admit"]
    pk = rho * service / (2.0 * (1.0 - rho))
    assert wait.mean() == pytest.approx(pk, rel=0.05)
    # M/D/1: P(wait > 0) = ρ
    assert np.mean(wait > 1e-12) == pytest.approx(rho, abs=0.02)


# ---------------------------------------------------------------- Little's law


def test_littles_law_on_decode():
    """Mean decode batch L = λ · W, with W = output · t_iter(L) predicted from the roofline.

    Qwen2-0.5B on one L4 (121 TFLOP/s, 300 GB/s; MFU 0.5, MBU 0.7, 1 ms per iteration),
    Poisson arrivals at λ = 55 /s, every request 64 prompt + 64 output tokens, no sharing,
    memory and batch unbounded. A decode iteration is memory-bound: it reads the weights
    (494,032,768 parameters x 2 bytes) and the batch's KV (12,288 B per token, context
    per sequence 64 + (64 - 1)/2 on average over its iterations):

        t_iter(L) = (988,065,536 + 12,288 · L · 95.5) / (300e9 · 0.7) + 1e-3
        L = λ · 64 · t_iter(L)                  (solved below as a fixed point)

    Compared with the engine's own time-average batch (stats) and with the area of the
    per-request decode intervals in the middle 80 % of the run. A run whose iteration
    time, batching or accounting were wrong would miss the prediction; random intervals
    would not match it either (unlike L = λW computed from the run's own timestamps).
    """
    model = catalog.get_model("qwen2-0.5b")
    l4 = catalog.get_accelerator("l4")
    cost = InstanceCost.build(model, l4, 1, Efficiency())
    lam, prompt, out, n = 55.0, 64, 64, 30_000
    arrival = np.cumsum(np.random.default_rng(11).exponential(1.0 / lam, n))
    cfg = EngineConfig(
        policy="transfer_per_request",
        prefill_cost=cost,
        decode_cost=cost,
        max_batch=10**6,
        budget_tokens=10**12,
    )
    res = simulate(_plain_requests(arrival, prompt, out), cfg)
    c = res.columns
    assert np.all(c["outcome"] == COMPLETED)

    weights, kv = 494_032_768 * 2, 12_288
    ctx_per_seq = prompt + (out - 1) / 2
    L = 1.0
    for _ in range(200):
        t_iter = (weights + kv * L * ctx_per_seq) / (300e9 * 0.7) + 1e-3
        L = lam * out * t_iter
    flops = L * 2 * 494_032_768  # ~ every weight twice per token: far below the ridge
    assert flops / (121e12 * 0.5) < 0.1 * t_iter  # the premise: memory-bound
    assert 15 < L < 30

    start, end = c["t_decode_start"], c["t_done"]
    t0, t_end = arrival[0], res.stats["t_end"]
    assert res.stats["mean_decode_batch"] == pytest.approx(L, rel=0.03)
    lo, hi = t0 + 0.1 * (t_end - t0), t0 + 0.9 * (t_end - t0)
    area = np.clip(np.minimum(end, hi) - np.maximum(start, lo), 0.0, None).sum()
    assert area / (hi - lo) == pytest.approx(L, rel=0.03)
    # and the engine's integral of its batch size is exactly the intervals' total length
    # within the steady window [first arrival, last arrival] (the drain is not steady state)
    t1 = arrival[-1]
    assert res.stats["t_steady"] == t1
    whole = np.clip(np.minimum(end, t1) - start, 0.0, None).sum() / (t1 - t0)
    assert res.stats["mean_decode_batch"] == pytest.approx(whole, rel=1e-9)


# ---------------------------------------------------------------- conservation


def check_memory(c: dict, req: Requests, budget: int, n_decode: int) -> None:
    """From the columns alone: on every decode instance, the KV the admitted requests hold
    (each its need = prompt + output - replica hit: private KV plus blocks it persists) never
    exceeds the budget. Shared replica blocks come on top, so this is a lower bound of the
    memory in use; a reservation the engine forgot to count, or one it kept past t_done,
    breaks it at the cliff."""
    admitted = ~np.isnan(c["t_admit"])
    need = req.prompt_len + req.output_len - c["replica_hit_tokens"]
    assert np.all(need[admitted] > 0)
    for d in range(n_decode):
        on = admitted & (c["decode_instance"] == d)
        t = np.concatenate([c["t_admit"][on], c["t_done"][on]])
        delta = np.concatenate([need[on], -need[on]])
        order = np.lexsort((delta, t))  # at equal times releases come first
        assert np.cumsum(delta[order]).max(initial=0) <= budget, f"decode {d} over budget"


def run_checked(requests: Requests, cfg: EngineConfig):
    """Run the engine and check conservation from its public results."""
    res = simulate(requests, cfg, keep_state=True)
    problems = audit(res.state)  # every request ended once, nothing left behind (engine/audit.py)
    assert not problems, problems
    c = res.columns
    check_columns(c, requests.arrival)
    if cfg.admission == "reserve":  # paged: the engine asserts its block books at each change
        check_memory(c, requests, cfg.budget_tokens, cfg.n_decode)
    st = res.stats
    assert st["peak_replica_tokens"] <= st["peak_used_tokens"] <= cfg.budget_tokens
    assert 0 <= st["mean_replica_tokens"] <= st["mean_used_tokens"] <= cfg.budget_tokens
    if cfg.policy in ("transfer_per_request", "recompute_on_decode"):
        assert st["peak_replica_tokens"] == 0
        assert not c["replica_hit_tokens"].any() and not c["persisted_tokens"].any()
    return res


def check_columns(c: dict, arrival: np.ndarray) -> None:
    """Each request ends once and its timestamps run in stage order."""
    out = c["outcome"]
    assert np.all((out == COMPLETED) | (out == REJECTED))
    assert not np.isnan(c["t_done"]).any()
    done, rej = out == COMPLETED, out == REJECTED
    assert np.all(c["reject_reason"][done] == 0) and np.all(c["reject_reason"][rej] > 0)
    assert np.isnan(c["t_decode_start"][rej]).all() and np.isnan(c["t_first_token"][rej]).all()
    seq = [
        "t_prefill_start",
        "t_prefill_end",
        "t_admit",
        "t_transfer_start",
        "t_transfer_end",
        "t_decode_start",
        "t_first_token",
        "t_done",
    ]
    prev = arrival[done]
    for col in seq:
        x = c[col][done]
        assert not np.isnan(x).any(), col
        assert np.all(x >= prev), col
        prev = x
    assert np.all(c["t_first_token"][done] > c["t_decode_start"][done])
    rc = done & (c["recompute_tokens"] > 0)
    assert np.all(c["t_recompute_start"][rc] >= c["t_admit"][rc])
    assert np.all(c["t_recompute_end"][rc] > c["t_recompute_start"][rc])
    assert np.all(c["t_decode_start"][rc] >= c["t_recompute_end"][rc])
    # a job deduplicated onto another's blocks computes 0 tokens itself but has times; a
    # request without a prefill hit has no job
    assert np.isnan(c["t_recompute_start"][np.isnan(c["t_recompute_end"])]).all()
    assert np.isnan(c["t_recompute_end"][c["prefill_hit_tokens"] == 0]).all()


@pytest.mark.parametrize("on_full", ["reject", "wait"])
@pytest.mark.parametrize("name", PRESETS)
def test_conservation_at_the_cliff(name, on_full):
    """At budget_factor 0.35 memory is the binding constraint: trims, rejects and waits happen."""
    prep = _prep(
        name,
        "memory.budget_factor=0.35",
        f"memory.on_full={on_full}",
        "memory.wait_timeout_s=1.0",
        requests=1500,
    )
    for policy in POLICIES:
        cfg = replace(prep.base, policy=policy)
        res = run_checked(prep.requests, cfg)
        assert (res.columns["outcome"] == REJECTED).any() or policy.startswith("replicate")


@pytest.mark.parametrize("preemption", ["recompute", "swap"])
@pytest.mark.parametrize("name", PRESETS)
def test_conservation_at_the_cliff_paged(name, preemption):
    """Paged at budget_factor 0.35: requests queue and get preempted, and still every one
    ends exactly once (audit), preempted ones complete, nothing is left behind."""
    prep = _prep(
        name,
        "memory.budget_factor=0.35",
        "memory.admission=paged",
        f"memory.preemption={preemption}",
        requests=1500,
    )
    preempted = 0
    for policy in POLICIES:
        res = run_checked(prep.requests, replace(prep.base, policy=policy))
        c = res.columns
        pre = c["preemptions"] > 0
        assert np.all(c["outcome"][pre] == COMPLETED)
        preempted += int(pre.sum())
    assert preempted > 0  # the premise: memory binds


def test_conservation_multi_instance():
    """2P2D with two channels, round-robin and least-load routing."""
    for router in ("round_robin", "least_load"):
        prep = _prep(
            "tool_call",
            "cluster.prefill_instances=2",
            "cluster.decode_instances=2",
            "cluster.link.topology=private_paths",
            "cluster.link.channels=2",
            f"cluster.decode_router={router}",
            "memory.budget_factor=0.5",
            requests=1500,
        )
        for policy in POLICIES:
            res = run_checked(prep.requests, replace(prep.base, policy=policy))
            assert set(np.unique(res.columns["decode_instance"])) == {0, 1}


# ---------------------------------------------------------------- policies that must coincide


def _differs(a: dict, b: dict) -> bool:
    return any(not _same(a[col], b[col]) for col in a)


@pytest.mark.parametrize(
    "name,budget,on_full",
    [
        ("enterprise_hotset", 1.0, "reject"),
        ("tool_call", 0.35, "reject"),
        ("medium_chat", 0.35, "wait"),
    ],
)
def test_policies_that_must_coincide_with_sharing(name, budget, on_full):
    """With shared prefixes present (they would separate the policies):

    * prefill cache off (no prefill hit) ⇒ recompute_on_decode has nothing to recompute
      and moves the whole prompt: identical to transfer_per_request, column by column;
    * empty hot set (hotset_share 0) ⇒ replicate_hotset keeps and hits nothing: identical
      to transfer_per_request.

    Controls: with the prefill cache on, recompute_on_decode recomputes and differs; with
    the default hot set, replicate_hotset hits replicas and differs. So a policy that
    recomputed, persisted or hit something it should not would fail here.
    """
    common = (
        "workload.share_fraction=0.8",
        f"memory.budget_factor={budget}",
        "memory.admission=reserve",
        f"memory.on_full={on_full}",
    )
    off = _prep(name, *common, "cluster.prefill_cache_fraction=0", "memory.hotset_share=0")
    req = off.requests
    hashes, counts = np.unique(req.blk_hash, return_counts=True)
    assert (counts >= 2).sum() >= 5  # sharing is really there
    assert not off.base.hot_blocks and off.base.prefill_cache_tokens == 0
    runs = {p: simulate_policy(off, p).columns for p in POLICIES}
    base = runs["transfer_per_request"]
    for policy in ("recompute_on_decode", "replicate_hotset"):
        for col, values in base.items():
            assert _same(runs[policy][col], values), f"{policy}: {col} differs"
    assert not runs["recompute_on_decode"]["recompute_tokens"].any()
    # replicate_all_lru does hit here: the sharing separates it even with both features off
    assert runs["replicate_all_lru"]["replica_hit_tokens"].any()

    on = _prep(name, *common)
    assert on.base.hot_blocks and on.base.prefill_cache_tokens > 0
    ctl = {p: simulate_policy(on, p).columns for p in POLICIES[:3]}
    assert ctl["recompute_on_decode"]["recompute_tokens"].any()
    assert _differs(ctl["recompute_on_decode"], ctl["transfer_per_request"])
    assert ctl["replicate_hotset"]["replica_hit_tokens"].any()
    assert _differs(ctl["replicate_hotset"], ctl["transfer_per_request"])


# ---------------------------------------------------------------- the hot set sees no future


def _hottest(req: Requests, upto: int, cap: float) -> list[tuple[int, int]]:
    """docs/model.md §1.10: blocks ranked by how many of the first ``upto`` requests use them
    (ties by hash), taken in rank order while their tokens fit ``cap``."""
    counts: dict[int, int] = {}
    tokens: dict[int, int] = {}
    ptr, hashes, toks = req.blk_ptr.tolist(), req.blk_hash.tolist(), req.blk_tokens.tolist()
    for j in range(ptr[upto]):
        counts[hashes[j]] = counts.get(hashes[j], 0) + 1
        tokens.setdefault(hashes[j], toks[j])
    out, total = [], 0
    for h in sorted(counts, key=lambda h: (-counts[h], h)):
        if total + tokens[h] > cap:
            break
        out.append((h, tokens[h]))
        total += tokens[h]
    return out


@pytest.mark.parametrize("warmup", [300, 0])
def test_hot_set_is_chosen_from_the_warm_up_only(warmup):
    """The prewarmed set is what an operator saw before deploying: the warm-up requests (or,
    without warm-up, the first tenth of the run). Popularity drifts here, so the whole run's
    ranking is different (the control): a hot set chosen by peeking at the run would fail."""
    prep = prepare(
        load_scenario(
            "enterprise_hotset",
            [
                "run.requests=3000",
                f"run.warmup_requests={warmup}",
                "workload.drift={period_s: 10, shift: 4}",
                "memory.hotset_share=0.1",
            ],
        )
    )
    req = prep.requests
    cap = 0.1 * prep.base.budget_tokens
    seen = warmup or len(req) // 10
    expected = _hottest(req, seen, cap)
    assert 0 < len(expected) < len(np.unique(req.blk_hash))  # the cap really cuts
    assert prep.base.hot_blocks == expected
    assert _hottest(req, len(req), cap) != expected


# ---------------------------------------------------------------- determinism


def test_same_seed_same_output_different_seed_different():
    a = simulate_policy(_prep("tool_call", "seed=3"), "replicate_all_lru")
    b = simulate_policy(_prep("tool_call", "seed=3"), "replicate_all_lru")
    c = simulate_policy(_prep("tool_call", "seed=4"), "replicate_all_lru")
    for col in a.columns:
        assert _same(a.columns[col], b.columns[col]), col
    assert a.stats == b.stats
    assert not _same(a.columns["t_done"], c.columns["t_done"])


# ---------------------------------------------------------------- directional checks


def _tpot(c: dict, output: np.ndarray) -> np.ndarray:
    ok = (c["outcome"] == COMPLETED) & (output > 1)
    return (c["t_done"][ok] - c["t_first_token"][ok]) / (output[ok] - 1)


def test_recompute_on_decode_slows_every_batch():
    """Recomputing long shared prefixes on the decode node lengthens its iterations (the
    chunks ride in them), so the TPOT of all requests (also those without a prefix) rises
    versus transferring the KV."""
    prep = _prep("enterprise_hotset", "memory.budget_factor=3.0")
    out = prep.requests.output_len
    res = {
        p: simulate_policy(prep, p).columns for p in ("transfer_per_request", "recompute_on_decode")
    }
    assert (res["recompute_on_decode"]["recompute_tokens"] > 0).mean() > 0.5
    t_xfer = _tpot(res["transfer_per_request"], out).mean()
    t_rc = _tpot(res["recompute_on_decode"], out).mean()
    assert t_rc > 1.05 * t_xfer
    no_prefix = prep.requests.prefix_id < 0
    ok = lambda c: (c["outcome"] == COMPLETED) & no_prefix & (out > 1)  # noqa: E731
    x, r = res["transfer_per_request"], res["recompute_on_decode"]
    both = ok(x) & ok(r)
    tp = lambda c: (c["t_done"][both] - c["t_first_token"][both]) / (out[both] - 1)  # noqa: E731
    assert both.sum() > 20 and tp(r).mean() > tp(x).mean()


def test_replication_moves_fewer_bytes():
    prep = _prep("enterprise_hotset")
    bpt = prep.kv_bpt

    def bytes_per_request(policy):
        c = simulate_policy(prep, policy).columns
        admitted = ~np.isnan(c["t_admit"])
        return float(c["transfer_tokens"][admitted].mean() * bpt)

    full = bytes_per_request("transfer_per_request")
    lru = bytes_per_request("replicate_all_lru")
    hot = bytes_per_request("replicate_hotset")
    assert lru < 0.5 * full
    assert hot < full
