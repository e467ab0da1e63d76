"""A mixed decode iteration under speculative decoding (engine/mixed.py; docs/model.md §1.9,
§2.13): the batch's draft and verify tokens come out of the chunk token budget first (vLLM
V1), the engine's fluid iteration is 1/τ of the real one."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from enginecases import make_requests
from reference_sim import ReferenceSim, roofline
from test_engine_reference import assert_same, pair

from prefixbench import catalog
from prefixbench.engine import layout as L
from prefixbench.engine.recorder import Recorder
from prefixbench.errors import SimulationError
from prefixbench.physics.costmodel import Efficiency, InstanceCost, speculative_cost
from prefixbench.system.runner import EngineConfig, simulate

QWEN05 = catalog.get_model("qwen2-0.5b")
L4 = catalog.get_accelerator("l4")
EFF = Efficiency(
    mfu_prefill=0.5, mfu_decode=0.5, mbu=0.7, prefill_overhead_ms=1.0, decode_overhead_ms=1.0,
    gemm_half_tokens=96, mfu_attention=0.72, mbu_kv=0.88,
)  # fmt: skip
GAMMA, ALPHA = 2, 0.75


def _config(**kw) -> EngineConfig:
    """Qwen2-0.5B on one L4 each side; the decode pool speculates with one MTP layer."""
    mtp = QWEN05.model_copy(update={"layers": 1})
    plain = InstanceCost.build(QWEN05, L4, 1, EFF)
    data = {
        "policy": "recompute_on_decode",
        "prefill_cost": plain,
        "decode_cost": speculative_cost(plain, mtp, GAMMA, ALPHA),
        "recompute_chunk_tokens": 510,
        "max_batch": 4,
        **kw,
    }
    return EngineConfig(**data)


def _stalls(rec: Recorder) -> list[tuple[float, float, int, int]]:
    """(start, end, batch, chunk tokens) of every mixed iteration on decode instance 0."""
    kinds = rec.tli[0 :: L.NTL_I]
    out = []
    for i in np.flatnonzero(kinds == L.REC_STALL):
        o = L.NTL_I * i
        if rec.tli[o + 1] == 0:
            out.append((rec.tlf[2 * i], rec.tlf[2 * i + 1], rec.tli[o + 2], rec.tli[o + 3]))
    return out


def test_mixed_iteration_by_hand():
    """Request A (a 512-token prefix block plus 44 tokens) decodes alone; B (the same prefix plus 20) arrives later, its prefill takes the prefix
    from the cache and under recompute_on_decode the decode instance rebuilds those 512
    tokens as chunks beside A. Every number from the raw config (Qwen2-0.5B: 24 layers,
    hidden 896, 14 heads of 64, 2 KV heads, MLP 4864, vocab 151,936, tied embeddings, QKV
    bias; L4 121 TFLOP/s, 300 GB/s; GEMMs at 0.5 · T / (T + 96) against the weights at 0.7,
    attention at 0.72 against the KV at 0.88, 1 ms per pass; MTP: one layer of the
    target's shape with its LM head; γ = 2, α = 0.75)."""
    prefix = 512
    req = make_requests(
        [0.0, 0.25], [prefix + 44, prefix + 20], [600, 5], [[(7, prefix)], [(7, prefix)]]
    )
    rec = Recorder()
    res = simulate(req, _config(), recorder=rec)
    cols = res.columns

    h, layers, inter, vocab = 896, 24, 4864, 151_936
    attn_params = h * 896 + 2 * h * 128 + 896 * h + (896 + 2 * 128)  # q, k, v, o, biases
    layer = attn_params + 3 * h * inter + 2 * h
    body = layers * layer + h
    f_lin, f_head = 2.0 * body, 2.0 * vocab * h
    a = 2.0 * layers * 14 * (64 + 64)  # attention FLOPs per (query, key) pair
    k = 2 * layers * 2 * 64 * 2  # KV bytes per token
    w = (body + vocab * h) * 2  # weights read per pass (tied: the LM head once)
    w_mtp = (layer + h + vocab * h) * 2  # one layer, final norm, LM head
    k_mtp = 2 * 1 * 2 * 64 * 2
    fr, br = 121e12 * 0.5, 300e9 * 0.7
    ar, kr = 121e12 * 0.72, 300e9 * 0.88
    g = GAMMA + 1
    tau = 1 + ALPHA + ALPHA**2  # expected tokens: 2.3125

    def draft(ctx):  # γ memory-bound MTP steps: weights and KV at their bandwidths
        return GAMMA * (w_mtp / br + k_mtp * ctx / kr)

    def ops(gemm, tokens, attn, kv):  # the GEMMs at eff(tokens), plus attention
        return max(gemm * (tokens + 96) / (tokens * fr), w / br) + max(attn / ar, kv / kr)

    def plain(ctx):  # A alone: one speculative iteration, per token
        verify = ops(g * (f_lin + f_head), g, a * g * ctx, k * ctx)
        return (verify + draft(ctx) + g * 1e-3) / tau

    # the chunk budget less A's g = 3 tokens, over tau: floor(507 / 2.3125) = 219 per engine
    # iteration (the real iteration carries 2.3125 x 219 = 506.4 of the 507 left; less only
    # A's one token would give floor(509 / 2.3125) = 220)
    c_e = math.floor((510 - 1 * g) / tau)
    assert c_e == 219
    want_chunks = [219, 219, 74]

    stalls = _stalls(rec)
    assert [s[3] for s in stalls] == want_chunks
    assert all(s[2] == 1 for s in stalls)

    # walk A's plain speculative iterations to the first mixed one: A's context then
    t, ctx = cols["t_decode_start"][0], prefix + 44
    while t < stalls[0][0] * (1 - 1e-12):
        t += plain(ctx)
        ctx += 1
    assert t == pytest.approx(stalls[0][0], rel=1e-12)
    assert cols["t_recompute_start"][1] == stalls[0][0]

    done = 0
    compute_bound = []
    for (t0, t1, _, _), c in zip(stalls, want_chunks, strict=True):
        # one REAL iteration: A's 3 tokens verified plus tau x c chunk tokens, then / tau
        tokens = g + tau * c
        gemm = g * (f_lin + f_head) + tau * c * f_lin
        attn = a * g * ctx + tau * a * (c * done + c * (c + 1) / 2)
        kv = k * ctx + k * (done + tau * c)  # prefix read once, tau x c written
        dur = (ops(gemm, tokens, attn, kv) + draft(ctx) + g * 1e-3) / tau
        assert t1 - t0 == pytest.approx(dur, rel=1e-9)
        compute_bound.append(gemm * (tokens + 96) / (tokens * fr) > w / br)
        done += c
        ctx += 1
    assert compute_bound == [True, True, False]  # both GEMM roofline branches priced
    assert cols["t_recompute_end"][1] == stalls[-1][1]
    assert cols["recompute_tokens"][1] == prefix


def test_budget_must_hold_a_chunk_beside_a_full_speculative_batch():
    """4 sequences verifying 3 tokens each take 12 of a 14-token budget; 2 / 2.3125 < 1
    recompute token per engine iteration: refused, naming the field and the smallest
    budget that works (12 + ceil(2.3125) = 15)."""
    req = make_requests([0.0], [100], [4], [[]])
    with pytest.raises(SimulationError, match="cluster.chunk_token_budget") as err:
        simulate(req, _config(recompute_chunk_tokens=14))
    assert "verifying 3 tokens" in str(err.value) and "at least 15" in str(err.value)
    simulate(req, _config(recompute_chunk_tokens=15))  # floor(3 / 2.3125) = 1: runs
    simulate(req, _config(recompute_chunk_tokens=14, policy="transfer_per_request"))


def test_cost_aware_walks_speculative_mixed_iterations():
    """cost_aware prices a recompute by walking the mixed iterations it would run
    (costaware.recompute_time, the same pricing): under load over a slow link with a
    speculating batch some requests recompute, and every timestamp agrees with the
    reference, which walks its own speculative mixed iterations."""
    rng = np.random.default_rng(3)
    n, block = 40, 256
    chains = [[(int(p) * 100 + j, block) for j in range(6)] for p in rng.integers(0, 4, n)]
    arrival = np.cumsum(rng.exponential(0.05, n))
    req = make_requests(arrival, [6 * block + 30] * n, rng.integers(20, 80, n), chains)
    mtp = QWEN05.model_copy(update={"layers": 1})
    cfg, ref_cfg = pair(
        QWEN05,
        L4,
        1,
        L4,
        1,
        (0.5, 0.5, 0.7, 1.0, 1.0),
        policy="cost_aware",
        link_bytes_per_s=0.1e9,
        max_batch=16,
    )
    cfg = dataclasses.replace(cfg, decode_cost=speculative_cost(cfg.decode_cost, mtp, GAMMA, ALPHA))
    ref_cfg.decode.speculate(roofline(mtp, L4, 1, EFF), GAMMA, ALPHA)
    cols = simulate(req, cfg).columns
    assert_same(cols, ReferenceSim(req, ref_cfg).run(), "speculative cost_aware")
    rc = cols["recompute_tokens"] > 0
    assert 0 < rc.sum() < (cols["prefill_hit_tokens"] > 0).sum()
