"""Speculative decoding on the decode pool (docs/model.md §2.13)."""

from __future__ import annotations

import dataclasses

import pytest
from reference_sim import ReferenceSim, scenario_config
from test_engine_reference import POLICIES, assert_same

from prefixbench.errors import PrefixbenchError
from prefixbench.physics.costmodel import decode_iteration_time, expected_tokens
from prefixbench.scenario.loader import load_scenario
from prefixbench.system.runner import prepare, simulate_policy

SPEC = "cluster.decode.speculative"
BASE = ["run.requests=60", "run.warmup_requests=6", "cluster.decode.fabric=ideal"]
DRAFT = [f"{SPEC}.draft_model=llama-3.1-8b", f"{SPEC}.gamma=4", f"{SPEC}.acceptance=0.7"]


def test_expected_tokens_by_hand():
    """Leviathan et al. 2023, eq. 1: (1 - a^(g+1)) / (1 - a)."""
    assert expected_tokens(4, 0.7) == pytest.approx((1 - 0.16807) / 0.3, rel=1e-12)
    assert expected_tokens(4, 0.7) == pytest.approx(2.77310, abs=1e-5)
    assert expected_tokens(3, 1.0) == 4.0
    assert expected_tokens(1, 0.5) == pytest.approx(1.5)


def test_iteration_time_by_hand():
    """Llama-3.1-70B verified on 4x H100 with a Llama-3.1-8B draft, g = 4, a = 0.7, a batch
    of 8 attending to 16,384 tokens in all; every number from the two config.json shapes and
    the H100 datasheet (989.5 TFLOP/s, 3,350 GB/s), GEMM MFU 0.5 at T / (T + 96), weights
    at MBU 0.7, attention at 0.72, KV at 0.88, 1 ms per pass."""
    sets = [*BASE, *DRAFT, "efficiency.mfu_decode=0.5"]
    cost = prepare(load_scenario("seed003", sets)).base.decode_cost
    fr, br = 4 * 989.5e12 * 0.5, 4 * 3350e9 * 0.7
    ar, kr = 4 * 989.5e12 * 0.72, 4 * 3350e9 * 0.88
    # target: per layer q,o 8192^2, k,v 8192x1024, MLP 3 x 8192 x 28672, 2 norms; LM head
    # and embedding 128256 x 8192 each (untied)
    layer70 = 2 * 8192**2 + 2 * 8192 * 1024 + 3 * 8192 * 28672 + 2 * 8192
    body70 = 80 * layer70 + 8192
    head70 = 128256 * 8192
    w70 = (body70 + head70) * 2  # bytes read per pass (the input embedding is not read)
    kv70 = 2 * 80 * 8 * 128 * 2
    attn70 = 2 * 80 * 64 * 256
    # draft: 32 layers, hidden 4096, 32/8 heads of 128, MLP 14336, same vocabulary
    layer8 = 2 * 4096**2 + 2 * 4096 * 1024 + 3 * 4096 * 14336 + 2 * 4096
    w8 = (32 * layer8 + 4096 + 128256 * 4096) * 2
    kv8 = 2 * 32 * 8 * 128 * 2
    b, ctx, g = 8, 16384, 4
    t = b * (g + 1)  # tokens verified: the GEMMs' T
    gemm = max(t * 2 * (body70 + head70) * (t + 96) / (t * fr), w70 / br)
    verify = gemm + max(attn70 * (g + 1) * ctx / ar, kv70 * ctx / kr)
    draft = g * (w8 / br + kv8 * ctx / kr)
    tau = (1 - 0.7**5) / 0.3
    want = (verify + draft + (g + 1) * 1e-3) / tau
    assert float(decode_iteration_time(cost, b, ctx)) == pytest.approx(want, rel=1e-9)


def test_draft_kv_is_resident():
    """The draft keeps its own KV: a 10 GB budget holds 10e9 / (327,680 + 131,072) tokens."""
    prep = prepare(load_scenario("seed003", [*BASE, *DRAFT, "memory.kv_budget_gb=10"]))
    assert prep.base.budget_tokens == int(10e9 / (327680 + 131072))


def test_speculation_cuts_tpot():
    """Memory-bound decode: verifying 5 tokens costs about one pass, so TPOT falls by
    roughly tau less the draft's share; throughput (arrival-bound) does not move."""
    plain = prepare(load_scenario("seed003", BASE))
    spec = prepare(load_scenario("seed003", [*BASE, *DRAFT]))
    a = simulate_policy(plain, "transfer_per_request").columns
    b = simulate_policy(spec, "transfer_per_request").columns
    tpot = lambda c: ((c["t_done"] - c["t_first_token"]) / (plain.requests.output_len - 1)).mean()  # noqa: E731
    assert tpot(b) < tpot(a) / 1.5


@pytest.mark.parametrize(
    "sets",
    [
        DRAFT,
        [f"{SPEC}.method=mtp", f"{SPEC}.gamma=2", f"{SPEC}.acceptance=0.9"],
        [f"{SPEC}.method=mtp", f"{SPEC}.gamma=3", f"{SPEC}.acceptance=0.6"]
        + ["cluster.decode.devices=2"],
    ],
    ids=["draft", "mtp", "mtp-tp2"],
)
def test_speculative_matches_reference(sets):
    """The reference prices the draft from its own shape and sums the acceptance series;
    every timestamp agrees, every policy, recompute chunks beside speculation included
    (medium_chat's qwen2-1.5b: a qwen2-0.5b draft; tp2: two L4s, PCIe all-reduces)."""
    over = ["run.requests=80", "run.warmup_requests=8", "workload.output_length.min=2"]
    if sets is DRAFT:
        sets = [f"{SPEC}.draft_model=qwen2-0.5b", f"{SPEC}.gamma=4", f"{SPEC}.acceptance=0.7"]
    prep = prepare(load_scenario("medium_chat", [*over, *sets]))
    ref_cfg = scenario_config(prep)
    assert ref_cfg.budget_tokens == prep.base.budget_tokens
    for policy in POLICIES:  # recompute_on_decode and cost_aware: chunks beside speculation
        res = simulate_policy(prep, policy, track_gaps=True)
        ref = ReferenceSim(prep.requests, dataclasses.replace(ref_cfg, policy=policy)).run()
        assert_same(res.columns, ref, f"speculative {policy}")


def test_speculation_beside_recompute_chunks_cuts_tpot():
    """Recompute chunks ride in speculative iterations (engine/mixed.py): the run goes
    through, recomputes prefix tokens on decode, and speculation still cuts TPOT: one MTP
    layer of Qwen2-1.5B (γ = 2, α = 0.9, τ = 2.71) reads about 0.56 GB a step against
    3.1 GB a pass, so a token costs about (3.1 + 2·0.56) / 2.71 of a plain pass, under 0.6
    with the overheads."""
    over = ["run.requests=80", "run.warmup_requests=8", "workload.output_length.min=2"]
    sets = [f"{SPEC}.method=mtp", f"{SPEC}.gamma=2", f"{SPEC}.acceptance=0.9"]
    plain = prepare(load_scenario("medium_chat", over))
    spec = prepare(load_scenario("medium_chat", [*over, *sets]))
    a = simulate_policy(plain, "recompute_on_decode").columns
    b = simulate_policy(spec, "recompute_on_decode").columns
    assert b["recompute_tokens"].sum() > 0
    out = plain.requests.output_len
    tpot = lambda c: ((c["t_done"] - c["t_first_token"]) / (out - 1)).mean()  # noqa: E731
    assert tpot(b) < 0.7 * tpot(a)


@pytest.mark.parametrize(
    "sets,message",
    [
        ([f"{SPEC}.gamma=4"], "needs draft_model"),
        ([*DRAFT, "cluster.mode=colocated"], "colocated"),
        ([f"{SPEC}.draft_model=deepseek-v2-lite"], "priced dense"),
        (["cluster.prefill.speculative.draft_model=llama-3.1-8b"], "decode pool"),
    ],
)
def test_speculative_refusals(sets, message):
    with pytest.raises(PrefixbenchError, match=message):
        prepare(load_scenario("seed003", [*BASE, *sets]))
