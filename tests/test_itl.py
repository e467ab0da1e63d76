"""The pooled inter-token-latency distribution (itl.py, engine/batch.py itl_series): gaps
written by hand from the roofline, batch weights, a recompute stall, and the histogram's
percentiles against the exact ones of the reference simulator's per-token times."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from enginecases import make_requests
from reference_sim import ColocatedReference, ReferenceSim, pooled_gaps, scenario_config

from prefixbench import catalog
from prefixbench.engine import ColocatedConfig, simulate_colocated
from prefixbench.metrics.itl import histogram, itl_mean_ms, itl_quantile_ms, itl_summary
from prefixbench.physics.costmodel import Efficiency, InstanceCost
from prefixbench.scenario.loader import load_scenario
from prefixbench.system.runner import EngineConfig, prepare, simulate, simulate_policy

POLICIES = ("transfer_per_request", "recompute_on_decode", "replicate_hotset", "replicate_all_lru")

# qwen2-1.5b config.json: 1,543,714,304 parameters (tests/test_costmodel.py counts them),
# bf16; KV 2 · 28 layers · 2 KV heads · 128 · 2 B = 28,672 B per token.
W = 1_543_714_304 * 2
KV = 28672
# NVIDIA L4 datasheet: 300 GB/s GDDR6; efficiencies spelled out (MBU 0.7, 1 ms overhead)
BW, MBU, OVH = 300e9, 0.7, 1e-3
EFF = Efficiency(
    mfu_prefill=0.5,
    mfu_decode=0.5,
    mbu=MBU,
    prefill_overhead_ms=1.0,
    decode_overhead_ms=1.0,
    mbu_kv=MBU,  # the KV at the weights' MBU: a memory-bound step is (W + KV) / (BW · MBU)
)
COST = InstanceCost.build(catalog.get_model("qwen2-1.5b"), catalog.get_accelerator("l4"), 1, EFF)


def _bin(stats, g):
    lo, bpd = stats["itl_log10_lo"], stats["itl_bins_per_decade"]
    return int(math.floor((math.log10(g) - lo) * bpd))


def test_single_request_itl_is_its_iteration_times_by_hand():
    """One request alone, prompt 1000, 6 output tokens, disaggregated: its first token ends
    decode iteration 0 (TTFT); the 5 gaps are iterations 1..5, memory-bound: weights plus
    the KV of 1000 + j tokens over MBU · bandwidth, plus the overhead."""
    req = make_requests([0.0], [1000], [6], [[]])
    cfg = EngineConfig("transfer_per_request", COST, COST, track_gaps=True)
    res = simulate(req, cfg)
    gaps = [(W + KV * (1000 + j)) / (BW * MBU) + OVH for j in range(1, 6)]
    assert gaps[0] == pytest.approx(15.8387e-3, rel=1e-4)  # ≈ 15.8 ms
    st = res.stats
    assert st["itl_count"] == 5
    assert st["itl_sum_s"] == pytest.approx(sum(gaps), rel=1e-12)
    assert st["itl_min_s"] == pytest.approx(gaps[0], rel=1e-12)
    assert st["itl_max_s"] == pytest.approx(gaps[-1], rel=1e-12)
    c = res.columns
    assert c["t_done"][0] - c["t_first_token"][0] == pytest.approx(sum(gaps), rel=1e-12)
    assert itl_mean_ms(st) == pytest.approx(sum(gaps) / 5 * 1e3, rel=1e-12)
    assert itl_quantile_ms(st, 0.5) == pytest.approx(gaps[2] * 1e3, rel=0.01)
    # the gaps differ by 28,672 B / 210 GB/s = 0.14 µs: all in the bin(s) that hold them
    h = histogram(st)
    bins = {_bin(st, g) for g in gaps}
    assert h.sum() == 5 and sum(h[i] for i in bins) == 5


def test_batch_of_identical_requests_puts_weight_b_on_each_iteration_by_hand():
    """Colocated, prefill-priority: a warm-up request 0 (1 token, long prompt) holds the
    device while b = 4 requests arrive; they prefill in one step, get their first token at
    its end and decode in lockstep: each iteration j = 0..4 gives each of the 4 one gap of
    (weights + KV of 4·(1000 + 1 + j) tokens) / (MBU · bandwidth) + overhead."""
    b = 4
    req = make_requests([0.0] + [1e-4] * b, [6000] + [1000] * b, [1] + [6] * b, [[]] * (b + 1))
    cfg = ColocatedConfig(cost=COST, instances=1, warmup_requests=1)
    res = simulate_colocated(req, cfg)
    c = res.columns
    assert len(set(c["t_first_token"][1:].tolist())) == 1  # in lockstep
    st = res.stats
    assert st["itl_count"] == b * 5  # warm-up request 0 (one token) has none
    # context: the prompt and the token the prefill emitted, then one more per iteration
    gaps = [(W + KV * b * (1000 + 1 + j)) / (BW * MBU) + OVH for j in range(5)]
    assert st["itl_sum_s"] == pytest.approx(b * sum(gaps), rel=1e-12)
    assert st["itl_min_s"] == pytest.approx(gaps[0], rel=1e-12)
    assert st["itl_max_s"] == pytest.approx(gaps[-1], rel=1e-12)
    h = histogram(st)
    filled = {int(i): float(h[i]) for i in np.nonzero(h)[0]}
    want: dict[int, float] = {}
    for g in gaps:
        want[_bin(st, g)] = want.get(_bin(st, g), 0.0) + b
    assert filled == want


def _prep(*over: str):
    """A scenario on qwen2-1.5b / L4 with the efficiencies above (its requests replaced)."""
    eff = (
        "efficiency.mfu_prefill=0.5", "efficiency.mfu_decode=0.5", f"efficiency.mbu={MBU}",
        "efficiency.prefill_overhead_ms=1.0", "efficiency.decode_overhead_ms=1.0",
    )  # fmt: skip
    return prepare(
        load_scenario(
            "tool_call",
            [
                "model=qwen2-1.5b",
                "cluster.prefill.accelerator=l4",
                "cluster.decode.accelerator=l4",
                "run.requests=20",
                "run.warmup_requests=0",
                *eff,
                *over,
            ],
        )  # fmt: skip
    )


def test_recompute_iteration_is_one_long_gap():
    """Request 0 decodes alone; request 1 hits its 512-token prefix in the prefill cache, so
    recompute_on_decode recomputes it on the decode instance, in one iteration that also
    carries request 0's token (the 1,024-token budget holds all 512): request 0 sees exactly
    one gap longer than a plain ≈ 16 ms iteration, that mixed iteration, equal to its worst
    gap, and its gaps still sum to its decode time."""
    req = make_requests([0.0, 0.05], [1000, 1000], [40, 3], [[(7, 512)], [(7, 512)]])
    prep = dataclasses.replace(_prep(), requests=req)
    res = simulate_policy(prep, "recompute_on_decode", track_gaps=True)
    c = res.columns
    assert c["recompute_tokens"].tolist() == [0, 512]
    mixed = c["t_recompute_end"][1] - c["t_recompute_start"][1]
    assert c["t_recompute_start"][1] < c["t_done"][0]  # inside request 0's decode
    st = res.stats
    assert st["itl_max_s"] == pytest.approx(c["max_token_gap"][0], rel=1e-12)
    assert st["itl_max_s"] == pytest.approx(mixed, rel=1e-12)  # the mixed iteration itself
    assert mixed > 0.02
    sim = ReferenceSim(
        req, dataclasses.replace(scenario_config(prep), policy="recompute_on_decode")
    )
    sim.run()
    g0 = sim.reqs[0].gaps
    assert len(g0) == 39 and sum(g > 0.02 for g in g0) == 1
    assert max(g0) == pytest.approx(st["itl_max_s"], rel=1e-9)
    assert st["itl_count"] == 39 + 2
    assert st["itl_sum_s"] == pytest.approx((c["t_done"] - c["t_first_token"]).sum(), rel=1e-12)


CASES = [
    ("tool_call", ()),
    (
        "enterprise_hotset",
        ("memory.budget_factor=0.35", "memory.admission=reserve", "memory.on_full=wait"),
    ),
    ("medium_chat", ("cluster.prefill_instances=2", "cluster.decode_instances=2")),
]


def _check(st, gaps):
    assert st["itl_count"] == gaps.shape[0]
    assert st["itl_sum_s"] == pytest.approx(gaps.sum(), rel=1e-9)
    assert st["itl_max_s"] == pytest.approx(gaps.max(), rel=1e-9)
    assert itl_mean_ms(st) == pytest.approx(gaps.mean() * 1e3, rel=1e-9)
    for q in (0.5, 0.9, 0.99):
        got = itl_quantile_ms(st, q)
        # the gap at rank ceil(q·N): the histogram holds it to one bin (0.6 %)
        exact = float(np.quantile(gaps, q, method="inverted_cdf")) * 1e3
        assert got == pytest.approx(exact, rel=0.01), q
        # vLLM's np.percentile interpolates between neighbouring gaps: the same wherever
        # the distribution is dense (a sparse tail, e.g. a few recompute stalls, can put
        # 1-2 % between the two definitions; docs/model.md)
        lin = float(np.quantile(gaps, q)) * 1e3
        assert got == pytest.approx(lin, rel=0.02), q


@pytest.mark.parametrize("preset,overrides", CASES, ids=[c[0] for c in CASES])
def test_histogram_percentiles_match_reference_per_token_times(preset, overrides):
    """The reference steps every iteration and lists every gap; the engine's pooled count
    and sum agree exactly and its histogram percentiles within 1 %, for every policy and
    both colocated schedulers, over the measured (post-warm-up) requests."""
    over = ["run.requests=150", "run.warmup_requests=15", "workload.output_length.min=2"]
    prep = prepare(load_scenario(preset, [*over, *overrides]))
    ref_cfg = scenario_config(prep)
    for policy in POLICIES:
        res = simulate_policy(prep, policy, track_gaps=True)
        sim = ReferenceSim(prep.requests, dataclasses.replace(ref_cfg, policy=policy))
        sim.run()
        _check(res.stats, pooled_gaps(sim, 15))
    for sched in ("prefill_priority", "chunked"):
        cl = prep.scenario.cluster.model_copy(
            update={"mode": "colocated", "colocated_scheduler": sched}
        )
        cprep = dataclasses.replace(prep, scenario=prep.scenario.model_copy(update={"cluster": cl}))
        res = simulate_policy(cprep, "transfer_per_request")
        sim = ColocatedReference(cprep.requests, scenario_config(cprep))
        sim.run()
        _check(res.stats, pooled_gaps(sim, 15))


def test_no_gaps_tracked_means_null_itl():
    req = make_requests([0.0], [1000], [6], [[]])
    st = simulate(req, EngineConfig("transfer_per_request", COST, COST)).stats
    assert st["itl_count"] == 0
    assert itl_summary(st) == {
        "itl_mean_ms": None,
        "itl_p50_ms": None,
        "itl_p90_ms": None,
        "itl_p99_ms": None,
    }


def test_mfu_mbu_per_instance_by_hand():
    """One request (prompt 1000, 6 tokens) on qwen2-1.5b, 1P1D L4: the prefill step runs
    1000·(2·P − lm_head) + lm_head + attention over 1000·1001/2 pairs FLOPs and reads the
    weights and 1000 tokens of KV; the decode runs 6 iterations attending to 1000..1005
    tokens. MFU and MBU over the window [0, t_done], against the L4 datasheet (121 TFLOP/s
    bf16 dense, 300 GB/s)."""
    from prefixbench.metrics.utilisation import instance_figures

    req = make_requests([0.0], [1000], [6], [[]])
    prep = dataclasses.replace(
        _prep("cluster.prefill.devices=1", "cluster.decode.devices=1"), requests=req
    )
    res = simulate_policy(prep, "transfer_per_request")
    c, st = res.columns, res.stats
    window = c["t_done"][0]
    lm_head = 2 * 1536 * 151936  # tied embedding used as the LM head
    per_token = 2 * 1_543_714_304  # 2 FLOPs per weight per token
    attn = 2 * 28 * 12 * (128 + 128)  # per (query, key) pair
    p_flops = 1000 * (per_token - lm_head) + lm_head + attn * 1000 * 1001 / 2
    p_bytes = W + KV * 1000
    ctx = sum(1000 + j for j in range(6))
    d_flops = 6 * per_token + attn * ctx
    d_bytes = 6 * W + KV * ctx
    assert st["prefill_flops"] == [pytest.approx(p_flops, rel=1e-12)]
    assert st["prefill_bytes"] == [pytest.approx(p_bytes, rel=1e-12)]
    assert st["decode_flops"] == [pytest.approx(d_flops, rel=1e-12)]
    assert st["decode_bytes"] == [pytest.approx(d_bytes, rel=1e-12)]
    fig = instance_figures(prep.scenario, st)
    assert fig["prefill_mfu_inst_max"] == pytest.approx(p_flops / window / 121e12, rel=1e-9)
    assert fig["prefill_mbu_inst_min"] == pytest.approx(p_bytes / window / 300e9, rel=1e-9)
    assert fig["decode_mfu_inst_min"] == pytest.approx(d_flops / window / 121e12, rel=1e-9)
    assert fig["decode_mbu_inst_max"] == pytest.approx(d_bytes / window / 300e9, rel=1e-9)
    # while it decodes, the instance reads at MBU·bandwidth less the 1 ms overhead per step
    busy = c["t_done"][0] - c["t_decode_start"][0]
    assert fig["decode_mbu_busy"] == pytest.approx(d_bytes / busy / 300e9, rel=1e-9)
    assert 0.6 < fig["decode_mbu_busy"] < MBU


def test_two_prefill_instances_show_their_split():
    """2P1D: requests alternate prefill instances only when both are idle (least tokens,
    ties to the lowest index): three requests far apart all go to instance 0, so instance
    1 has no FLOPs at all and the min/max columns show the split."""
    from prefixbench.metrics.utilisation import instance_figures

    req = make_requests([0.0, 1.0, 2.0], [1000] * 3, [6] * 3, [[]] * 3)
    prep = dataclasses.replace(
        _prep("cluster.prefill_instances=2", "cluster.prefill.devices=1"), requests=req
    )
    res = simulate_policy(prep, "transfer_per_request")
    st = res.stats
    assert len(st["prefill_flops"]) == 2 and len(st["prefill_busy_s"]) == 2
    assert st["prefill_flops"][1] == 0.0 < st["prefill_flops"][0]
    fig = instance_figures(prep.scenario, st)
    assert fig["prefill_mfu_inst_min"] == 0.0 < fig["prefill_mfu_inst_max"]


def test_histogram_bin_edges_are_the_compiled_powers_bit_for_bit():
    """engine/batch.py looks the bin edges up in ITL_EDGES instead of raising 10 to a power
    per bin; every edge must be the bits the compiled expression gives (a last-bit change
    would move a gap between bins)."""
    from numba import njit

    from prefixbench.engine.batch import ITL_EDGES
    from prefixbench.engine.layout import ITL_BPD, ITL_LOG10_LO, ITL_NB

    @njit(cache=False)
    def compiled(out):
        for bb in range(out.shape[0]):
            out[bb] = 10.0 ** (ITL_LOG10_LO + (bb + 1.0) / ITL_BPD)

    want = np.empty(ITL_NB)
    compiled(want)
    assert ITL_EDGES.shape == (ITL_NB,)
    assert np.array_equal(ITL_EDGES.view(np.int64), want.view(np.int64))
    assert ITL_EDGES[ITL_BPD * 7 - 1] == 1.0  # bin 2799 ends at 10**0 s, by hand
