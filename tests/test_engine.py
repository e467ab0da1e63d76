"""The one engine (engine/*): both modes compiled, the same source interpreted, refusals,
and the fixes to the measurement window and the colocated columns.

Agreement with an independent reference is tests/test_engine_reference.py; conservation
and queueing oracles are tests/test_engine_oracles.py.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from dataclasses import replace

import numpy as np
import pytest
from enginecases import instance_cost, make_requests
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from prefixbench.engine import (
    ColocatedConfig,
    EngineConfig,
    Outcome,
    simulate,
    simulate_colocated,
)
from prefixbench.engine.blocks import dense_block_ids
from prefixbench.errors import SimulationError
from prefixbench.scenario.loader import load_scenario
from prefixbench.study.runs import run_scenario

COST = instance_cost("qwen2-0.5b", "l4", 1, (0.5, 0.5, 0.7, 1.0, 1.0))
POLICIES = ("transfer_per_request", "recompute_on_decode", "replicate_hotset", "replicate_all_lru")

# ---------------------------------------------------------------- interpreted == compiled

CASES = """
import dataclasses, hashlib, json, sys
import numpy as np
from prefixbench.scenario.loader import load_scenario
from prefixbench.system.runner import colocated_config, prepare
from prefixbench.engine import simulate, simulate_colocated

def digest(res):
    h = hashlib.sha256()
    for k in sorted(res.columns):
        h.update(k.encode()); h.update(np.ascontiguousarray(res.columns[k]).tobytes())
    h.update(repr(sorted(res.stats.items())).encode())
    return h.hexdigest()

out = {}
sets = ["run.requests=120", "run.warmup_requests=10", "memory.budget_factor=0.4",
        "cluster.prefill_instances=2", "cluster.decode_instances=2",
        "cluster.decode_router=prefix_affinity", "memory.admission=reserve",
        "memory.on_full=wait"]
prep = prepare(load_scenario("tool_call", sets))
for policy in ("transfer_per_request", "recompute_on_decode", "replicate_hotset", "replicate_all_lru"):
    cfg = dataclasses.replace(prep.base, policy=policy, track_gaps=True)
    out[policy] = digest(simulate(prep.requests, cfg))
for sched in ("prefill_priority", "chunked"):
    p = prepare(load_scenario("tool_call", sets + ["cluster.mode=colocated",
                                                   f"cluster.colocated_scheduler={sched}"]))
    out[sched] = digest(simulate_colocated(p.requests, colocated_config(p)))
from prefixbench.engine import loop
out["compiled"] = hasattr(loop.run_disaggregated, "py_func")
print(json.dumps(out))
"""


def _digests(env: dict) -> dict:
    r = subprocess.run(
        [sys.executable, "-c", CASES], env=env, capture_output=True, text=True, timeout=600
    )
    assert r.returncode == 0, r.stderr[-2000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_interpreted_source_gives_the_compiled_results():
    """NUMBA_DISABLE_JIT=1 runs the same source as plain Python (for debugging and
    coverage): every column and stat of both modes equal the compiled run's, bit for bit."""
    base = {k: v for k, v in os.environ.items() if k != "NUMBA_DISABLE_JIT"}
    compiled = _digests(base)
    interpreted = _digests({**base, "NUMBA_DISABLE_JIT": "1"})
    assert compiled.pop("compiled") is True and interpreted.pop("compiled") is False
    assert interpreted == compiled


# ---------------------------------------------------------------- refusals


@pytest.mark.parametrize(
    "change, where",
    [
        ({"policy": "oracle"}, "policy"),
        ({"prewarm": "lazy"}, "cluster.link.prewarm"),
        ({"prefill_router": "random"}, "prefill_router"),
        ({"decode_router": "sticky"}, "decode_router"),
        ({"on_full": "drop"}, "memory.on_full"),
        ({"max_batch": 2.5}, "cluster.max_decode_batch"),
        ({"n_decode": True}, "cluster.decode_instances"),
        ({"link_channels": 0}, "cluster.link.channels"),
    ],
)
def test_a_setting_the_engine_cannot_run_is_refused(change, where):
    cfg = replace(
        EngineConfig(policy="transfer_per_request", prefill_cost=COST, decode_cost=COST), **change
    )
    req = make_requests([0.0], [100], [3], [[]])
    with pytest.raises(SimulationError) as e:
        simulate(req, cfg)
    assert e.value.where == where and "\n" not in str(e.value)


def test_colocated_refuses_an_unknown_scheduler():
    cfg = ColocatedConfig(cost=COST, instances=2, scheduler="round_robin")
    with pytest.raises(SimulationError, match="colocated_scheduler"):
        simulate_colocated(make_requests([0.0], [100], [3], [[]]), cfg)


def test_block_ids_direct_or_ranked():
    small = np.array([3, 0, 3, 9], dtype=np.int64)
    ids, hot, u = dense_block_ids(small, np.array([12], dtype=np.int64))
    assert ids is small and hot.tolist() == [12] and u == 13  # used as they are
    big = np.array([2**50, -1, 2**50, 7], dtype=np.int64)
    ids, hot, u = dense_block_ids(big, np.array([7, 99], dtype=np.int64))
    # numbered in order of first appearance (workload/dense.py's hash table)
    assert ids.tolist() == [0, 1, 0, 2] and hot.tolist() == [2, 3] and u == 4


# ---------------------------------------------------------------- hand-calculated runs


def _prefill_time(cost, n_new: int, hit: int = 0) -> float:
    """One request's prefill step from the cost coefficients: the GEMMs at eff(n_new)
    against the weights, plus attention against its KV, plus the overhead."""
    gemm = (n_new * cost.linear_flops + cost.lm_head_flops) * (n_new + cost.gemm_half) / n_new
    attn = cost.attn_coef * (n_new * hit + n_new * (n_new + 1) / 2)
    t_gemm = max(gemm / cost.flops_rate_prefill, cost.weights / cost.byte_rate)
    t_attn = max(attn / cost.attn_rate, cost.kv_bpt * (n_new + hit) / cost.kv_rate)
    return t_gemm + t_attn + cost.prefill_overhead


def test_colocated_single_request_by_hand():
    """One prompt of 500 tokens, output 1: its only token is the prefill step's; no link."""
    req = make_requests([0.25], [500], [1], [[]])
    for sched in ("prefill_priority",):
        res = simulate_colocated(req, ColocatedConfig(cost=COST, instances=1, scheduler=sched))
        c = res.columns
        assert c["outcome"][0] == Outcome.COMPLETED
        assert c["t_first_token"][0] == pytest.approx(0.25 + _prefill_time(COST, 500), rel=1e-12)
        assert c["t_done"][0] == c["t_first_token"][0] == c["t_decode_start"][0]
        assert math.isnan(c["t_transfer_start"][0]) and math.isnan(c["t_transfer_end"][0])


def test_empty_run():
    req = make_requests([], [], [], [])
    res = simulate(
        req, EngineConfig(policy="replicate_all_lru", prefill_cost=COST, decode_cost=COST)
    )
    assert all(len(v) == 0 for v in res.columns.values())
    assert math.isnan(res.stats["decode_util"])  # an empty window has no utilisation


@pytest.mark.parametrize("mode", ["disaggregated", "colocated"])
def test_stale_wait_timeouts_do_not_stretch_the_window(mode):
    """on_full=wait with a 1000 s timeout: every request is admitted at once, so no timeout
    ever fires; the window ends with the last request, not at the last stale timeout."""
    req = make_requests([0.0, 0.1, 0.2], [300, 300, 300], [20, 20, 20], [[], [], []])
    if mode == "colocated":
        cfg = ColocatedConfig(cost=COST, instances=1, on_full="wait", wait_timeout_s=1000.0)
        res = simulate_colocated(req, cfg)
    else:
        cfg = EngineConfig(
            policy="transfer_per_request", prefill_cost=COST, decode_cost=COST,
            on_full="wait", wait_timeout_s=1000.0,
        )  # fmt: skip
        res = simulate(req, cfg)
    assert (res.columns["outcome"] == Outcome.COMPLETED).all()
    assert res.stats["t_end"] == res.columns["t_done"].max() < 10.0
    assert res.stats["decode_util"] > 0.1


def test_a_timeout_that_fires_still_ends_the_window():
    """The second request cannot fit until the first ends (far later than its 0.05 s
    timeout): it is rejected at arrival-to-hand-off + 0.05 s, inside the window."""
    req = make_requests([0.0, 0.01], [300, 300], [400, 5], [[], []])
    cfg = EngineConfig(
        policy="transfer_per_request", prefill_cost=COST, decode_cost=COST,
        budget_tokens=800, on_full="wait", wait_timeout_s=0.05,
    )  # fmt: skip
    c = simulate(req, cfg).columns
    assert c["outcome"].tolist() == [Outcome.COMPLETED, Outcome.REJECTED]
    assert c["t_done"][1] == pytest.approx(c["t_prefill_end"][1] + 0.05, rel=1e-12)


# ---------------------------------------------------------------- metrics of the fixes


def _colocated_row(sched: str, *sets: str) -> dict:
    s = load_scenario(
        "medium_chat",
        ["run.requests=400", "run.warmup_requests=40", "cluster.mode=colocated",
         f"cluster.colocated_scheduler={sched}", *sets],
    )  # fmt: skip
    return run_scenario(s, ["transfer_per_request"], keep_requests=False).summary.to_dicts()[0]


@pytest.mark.parametrize("sched", ["prefill_priority", "chunked"])
def test_colocated_rows_have_no_link_and_no_negative_waits(sched):
    row = _colocated_row(sched, "memory.budget_factor=0.5", "memory.on_full=wait")
    assert row["link_wait_ms"] is None and row["transfer_ms"] is None
    assert row["admission_wait_ms"] is None  # KV is reserved before the prefill
    assert row["decode_queue_ms"] == 0.0 and row["link_util"] == 0.0
    assert row["decode_util"] > 0.05  # not diluted by stale timeouts
    # KV in use is measured (it was NaN, which strict --json cannot carry)
    assert 0.0 < row["mean_kv_used_gb"] <= row["peak_kv_used_gb"] <= row["kv_budget_gb"]


def test_one_request_has_no_throughput():
    s = load_scenario("tool_call", ["run.requests=1", "run.warmup_requests=0"])
    row = run_scenario(s, ["transfer_per_request"], keep_requests=False).summary.to_dicts()[0]
    assert row["completed"] == 1
    assert row["throughput_rps"] is None and row["goodput_rps"] is None


# ---------------------------------------------------------------- colocated invariants


@st.composite
def colocated_cases(draw):
    n = draw(st.integers(1, 60))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    arrival = np.cumsum(rng.exponential(1.0 / draw(st.sampled_from([5.0, 80.0, 600.0])), n))
    prompt = rng.integers(1, draw(st.sampled_from([64, 1024, 4096])), n).tolist()
    output = rng.integers(1, draw(st.sampled_from([2, 40, 200])), n).tolist()
    share = draw(st.booleans())
    chains = [[(7, 256)] if share and p > 256 else [] for p in prompt]
    largest = max(p + o for p, o in zip(prompt, output, strict=True))
    cfg = ColocatedConfig(
        cost=COST,
        instances=draw(st.integers(1, 3)),
        scheduler=draw(st.sampled_from(["prefill_priority", "chunked"])),
        step_token_budget=draw(st.sampled_from([16, 512, 8192])),
        max_batch=draw(st.integers(1, 6)),
        budget_tokens=int(largest * draw(st.sampled_from([0.9, 1.0, 2.0, 50.0]))),
        on_full=draw(st.sampled_from(["reject", "wait"])),
        wait_timeout_s=draw(st.sampled_from([0.01, 1.0])),
    )
    return make_requests(arrival, prompt, output, chains), cfg


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(colocated_cases())
def test_colocated_every_request_ends_once_within_memory(case):
    req, cfg = case
    res = simulate_colocated(req, cfg)
    c = res.columns
    assert np.isin(c["outcome"], (Outcome.COMPLETED, Outcome.REJECTED)).all()
    assert not np.isnan(c["t_done"]).any()
    done = c["outcome"] == Outcome.COMPLETED
    arr = req.arrival
    assert (c["t_admit"][done] >= arr[done]).all()
    assert (c["t_prefill_start"][done] >= c["t_admit"][done]).all()
    assert (c["t_first_token"][done] >= c["t_prefill_start"][done]).all()
    assert (c["t_done"][done] >= c["t_first_token"][done]).all()
    assert res.stats["peak_used_tokens"] <= cfg.budget_tokens
    assert res.stats["t_end"] >= c["t_done"].max()
