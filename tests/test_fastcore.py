"""The compiled core (engine/fastcore.py) reproduces the Python core bit for bit.

``core.Simulator`` is the specification; ``fastcore.simulate_fast`` is its numba port. Every
per-request column and every stat must be *equal* (not close): the port keeps the order of
every floating-point operation. Hypothesis draws small scenarios that reach every branch
(1–3 prefill and decode instances, every router and policy, reject and wait, one or two
link channels, budgets from too small to unbounded, token-gap tracking, prefill caches small
enough to evict, a prewarmed hot set, exact arrival ties, block hashes that are and are not
small integers); then every preset runs at 2,000 requests and one long run checks 100,000.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
from enginecases import instance_cost, make_requests
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytest.importorskip("numba")

from prefixbench.engine import fastcore  # noqa: E402
from prefixbench.engine.core import EngineConfig, SimResult, Simulator  # noqa: E402
from prefixbench.engine.policies import POLICIES, ReplicateAllLRU  # noqa: E402
from prefixbench.loader import load_scenario  # noqa: E402
from prefixbench.runner import prepare  # noqa: E402
from prefixbench.workload.controls import tile  # noqa: E402
from prefixbench.workload.requests import Requests  # noqa: E402

POLICY_NAMES = (
    "transfer_per_request",
    "recompute_on_decode",
    "replicate_hotset",
    "replicate_all_lru",
)
PRESETS = ("enterprise_hotset", "long_context_support", "medium_chat", "tool_call")
TRACE = Path(__file__).parent / "data" / "conversation_trace_head300.jsonl"


def assert_identical(fast: SimResult, ref: SimResult, what: str = "") -> None:
    assert fast.columns.keys() == ref.columns.keys()
    problems = []
    for col, want in ref.columns.items():
        got = fast.columns[col]
        assert got.dtype == want.dtype, f"{what} {col}: dtype {got.dtype} != {want.dtype}"
        same = np.array_equal(got, want, equal_nan=want.dtype.kind == "f")
        if not same:
            diff = (
                (got != want) & ~(np.isnan(got) & np.isnan(want))
                if want.dtype.kind == "f"
                else got != want
            )
            i = int(np.flatnonzero(diff)[0])
            problems.append(f"{col}[{i}]: fast {got[i]!r} python {want[i]!r}")
    for key, want in ref.stats.items():
        if fast.stats[key] != want:
            problems.append(f"stats[{key}]: fast {fast.stats[key]!r} python {want!r}")
    assert fast.stats.keys() == ref.stats.keys()
    assert not problems, f"fast core differs {what}:\n  " + "\n  ".join(problems)


def both(req: Requests, cfg: EngineConfig) -> tuple[SimResult, SimResult]:
    return fastcore.simulate_fast(req, cfg), Simulator(req, cfg).run()


# ---------------------------------------------------------------- random small scenarios


@st.composite
def scenarios(draw):
    """(Requests, EngineConfig) of a small random scenario."""
    n = draw(st.integers(1, 70))
    # a small tree of prefix blocks, so chains share roots and hit partially
    n_blocks = draw(st.integers(1, 8))
    base, stride = draw(st.sampled_from([(0, 1), (100, 3), (-50, 7), (2**40, 2**20)]))
    parent, tokens = [], []
    for k in range(n_blocks):
        parent.append(draw(st.one_of(st.none(), st.integers(0, k - 1))) if k else None)
        tokens.append(draw(st.sampled_from([16, 64, 128, 256, 512, 1024])))
    paths = []
    for k in range(n_blocks):
        path, j = [], k
        while j is not None:
            path.append((base + j * stride, tokens[j]))
            j = parent[j]
        paths.append(path[::-1])
    share = draw(st.sampled_from([0.0, 0.5, 0.9, 1.0]))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    rate = draw(st.sampled_from([5.0, 40.0, 150.0, 600.0]))
    arrival = np.cumsum(rng.exponential(1.0 / rate, size=n))
    if draw(st.booleans()):  # coarse clock: exact ties between arrivals and other events
        arrival = np.round(arrival, 2)
    zipf = 1.0 / np.arange(1, n_blocks + 1)
    chains, prompt, output = [], [], []
    max_suffix = draw(st.sampled_from([1, 64, 512, 2048]))
    max_out = draw(st.sampled_from([1, 8, 40, 150]))
    for _ in range(n):
        chain = paths[rng.choice(n_blocks, p=zipf / zipf.sum())] if rng.random() < share else []
        chains.append(chain)
        prompt.append(max(sum(t for _, t in chain) + int(rng.integers(0, max_suffix + 1)), 1))
        output.append(int(rng.integers(1, max_out + 1)))
    req = make_requests(arrival, prompt, output, chains)

    model = draw(st.sampled_from(["qwen2-0.5b", "qwen2-1.5b", "deepseek-v2-lite"]))
    eff = draw(
        st.sampled_from(
            [(0.5, 0.5, 0.7, 1.0, 1.0), (0.3, 0.2, 0.9, 0.0, 2.5), (0.8, 0.6, 0.5, 5.0, 0.0)]
        )
    )
    accs = ["l4", "a100-80gb", "h100-sxm"]
    p_cost = instance_cost(model, draw(st.sampled_from(accs)), draw(st.integers(1, 2)), eff)
    d_cost = instance_cost(model, draw(st.sampled_from(accs)), draw(st.integers(1, 2)), eff)
    if draw(st.integers(0, 3)) == 0:
        # a compute-poor decode device, so a batch crosses the roofline ridge mid-segment
        b = draw(st.integers(1, 4))
        c = b * (
            float(np.median(prompt)) + float(np.median(output)) * draw(st.sampled_from([0.25, 1.0]))
        )
        lin = d_cost.linear_flops + d_cost.lm_head_flops
        rate_fl = (
            d_cost.byte_rate
            * (b * lin + d_cost.attn_coef * c)
            / (d_cost.weights + d_cost.kv_bpt * c)
        )
        d_cost = dataclasses.replace(d_cost, flops_rate_decode=rate_fl)
    policy = draw(st.sampled_from(POLICY_NAMES))
    largest = int((req.prompt_len + req.output_len).max())
    budget = max(1, int(largest * draw(st.sampled_from([0.8, 1.0, 1.5, 3.0, 8.0, 1000.0]))))
    hot: list[tuple[int, int]] = []
    if draw(st.integers(0, 3)) > 0:
        cap = budget * draw(st.sampled_from([0.2, 0.5, 1.0]))
        total = 0
        for k in draw(st.permutations(range(n_blocks)))[: draw(st.integers(1, n_blocks))]:
            if total + tokens[k] <= cap:
                hot.append((base + k * stride, tokens[k]))
                total += tokens[k]
    cfg = EngineConfig(
        policy=policy,
        prefill_cost=p_cost,
        decode_cost=d_cost,
        n_prefill=draw(st.integers(1, 3)),
        n_decode=draw(st.integers(1, 3)),
        link_bytes_per_s=draw(st.sampled_from([0.5e9, 3.125e9, 25e9])),
        link_latency_s=draw(st.sampled_from([0.0, 30e-6, 2e-3])),
        link_channels=draw(st.integers(1, 2)),
        max_batch=draw(st.integers(1, 8)),
        prefill_token_budget=draw(st.sampled_from([1, 512, 2048, 8192])),
        prefill_cache_tokens=draw(st.sampled_from([0, 64, 300, 1500, 10**9])),
        budget_tokens=budget,
        hot_blocks=hot,
        on_full=draw(st.sampled_from(["reject", "wait"])),
        wait_timeout_s=draw(st.sampled_from([0.005, 0.1, 1.0])),
        prefill_router=draw(st.sampled_from(["least_tokens", "round_robin"])),
        decode_router=draw(st.sampled_from(["least_load", "prefix_affinity", "round_robin"])),
        warmup_requests=draw(st.integers(0, n)),
        track_gaps=draw(st.booleans()),
    )
    return req, cfg


@settings(
    max_examples=400,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(scenarios())
def test_fast_core_matches_python_core(case):
    req, cfg = case
    fast, ref = both(req, cfg)
    assert_identical(
        fast, ref, f"({cfg.policy}, {cfg.n_prefill}P{cfg.n_decode}D, on_full={cfg.on_full})"
    )


def test_empty_and_single_request():
    cost = instance_cost("qwen2-0.5b", "l4", 1, (0.5, 0.5, 0.7, 1.0, 1.0))
    cfg = EngineConfig(policy="replicate_all_lru", prefill_cost=cost, decode_cost=cost)
    for req in (make_requests([], [], [], []), make_requests([0.25], [300], [7], [[(5, 256)]])):
        assert_identical(*both(req, cfg))


def test_block_ids_direct_or_ranked():
    small = np.array([3, 0, 3, 9], dtype=np.int64)
    ids, hot, u = fastcore.dense_block_ids(small, np.array([12], dtype=np.int64))
    assert ids is small and hot.tolist() == [12] and u == 13  # used as they are
    big = np.array([2**50, -1, 2**50, 7], dtype=np.int64)
    ids, hot, u = fastcore.dense_block_ids(big, np.array([7, 99], dtype=np.int64))
    assert ids.tolist() == [3, 0, 3, 1] and hot.tolist() == [1, 2] and u == 4  # ranked


def test_a_policy_without_a_code_runs_on_the_python_core(monkeypatch):
    class Custom(ReplicateAllLRU):
        name = "custom_lru"

    monkeypatch.setitem(POLICIES, "custom_lru", Custom)
    cost = instance_cost("qwen2-0.5b", "l4", 1, (0.5, 0.5, 0.7, 1.0, 1.0))
    cfg = EngineConfig(policy="custom_lru", prefill_cost=cost, decode_cost=cost)
    assert fastcore._codes(cfg) is None
    req = make_requests([0.0, 0.1, 0.2], [300, 300, 40], [5, 5, 5], [[(1, 256)], [(1, 256)], []])
    assert_identical(*both(req, cfg))
    assert fastcore.simulate_fast(req, cfg).columns["replica_hit_tokens"].tolist() == [0, 256, 0]


# ---------------------------------------------------------------- the presets


@pytest.mark.parametrize("preset", PRESETS)
def test_presets_at_2000_requests(preset):
    prep = prepare(load_scenario(preset, ["run.requests=2000", "run.warmup_requests=200"]))
    for policy in POLICY_NAMES:
        cfg = dataclasses.replace(prep.base, policy=policy)
        assert_identical(*both(prep.requests, cfg), f"({preset}, {policy})")


def test_trace_preset_tiled_to_2000_requests():
    prep = prepare(load_scenario("trace_replay", ["run.warmup_requests=30"], trace=str(TRACE)))
    req = tile(prep.requests, 2000)
    for policy in POLICY_NAMES:
        cfg = dataclasses.replace(prep.base, policy=policy)
        assert_identical(*both(req, cfg), f"(trace_replay tiled, {policy})")


def test_long_run_enterprise_hotset():
    prep = prepare(load_scenario("enterprise_hotset", ["run.requests=100000"]))
    cfg = dataclasses.replace(prep.base, policy="replicate_all_lru")
    assert_identical(*both(prep.requests, cfg), "(enterprise_hotset, 1e5 requests)")


def test_a_setting_the_port_lacks_runs_on_the_python_core(monkeypatch):
    """A field added to EngineConfig later, set to a non-default value, must not be ignored."""
    cost = instance_cost("qwen2-0.5b", "l4", 1, (0.5, 0.5, 0.7, 1.0, 1.0))
    cfg = EngineConfig(policy="transfer_per_request", prefill_cost=cost, decode_cost=cost)
    assert not fastcore._unknown_setting(cfg)
    monkeypatch.setattr(fastcore, "_KNOWN_FIELDS", fastcore._KNOWN_FIELDS - {"max_batch"})
    assert not fastcore._unknown_setting(cfg)  # still the default
    assert fastcore._unknown_setting(dataclasses.replace(cfg, max_batch=3))
