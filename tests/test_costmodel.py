"""Roofline cost model pinned to hand-computed numbers, plus closed-form series invariants."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from prefixbench.catalog import ACCELERATORS, LINKS, MODELS
from prefixbench.catalog.specs import ModelSpec
from prefixbench.physics.costmodel import (
    Efficiency,
    InstanceCost,
    attention_flops_coef,
    decode_iteration_time,
    decode_series_coeffs,
    flops_per_token,
    kv_bytes,
    kv_bytes_per_token,
    linear_flops_per_token,
    lm_head_flops,
    param_counts,
    prefill_time,
    recompute_time,
    ridge_point,
    transfer_time,
    weight_bytes,
)

# Spelled out so the pinned numbers do not move if the defaults are retuned.
EFF = Efficiency(
    mfu_prefill=0.5, mfu_decode=0.5, mbu=0.7, prefill_overhead_ms=1.0, decode_overhead_ms=1.0,
    gemm_half_tokens=100, mfu_attention=0.6, mbu_kv=0.9,
)  # fmt: skip


def series_time(coeffs, k):
    """The compiled closed form of a fixed batch's first k iterations (engine/series.py)."""
    from prefixbench.engine.series import series_time as closed_form

    return closed_form(*(float(c) for c in coeffs), int(k))


def iterations_within(coeffs, elapsed, k_max):
    """The compiled inverse: largest k <= k_max whose series time fits in ``elapsed``."""
    from prefixbench.engine.series import iterations_within as inverse

    return int(inverse(*(float(c) for c in coeffs), float(elapsed), int(k_max)))


# ---------------------------------------------------------------- model arithmetic


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("qwen2-0.5b", 12288),  # 2 · 24 layers · 2 kv heads · 64 · 2 B
        ("qwen2-1.5b", 28672),  # 2 · 28 · 2 · 128 · 2
        ("llama-3.1-70b", 327680),  # 2 · 80 · 8 · 128 · 2
        ("deepseek-v2-lite", 27 * 576 * 2),  # MLA latent: 27 · (512 + 64) · 2 = 31104
    ],
)
def test_kv_bytes_per_token(name, expected):
    assert kv_bytes_per_token(MODELS[name]) == expected


@pytest.mark.parametrize("name", sorted(MODELS))
def test_param_count_matches_model_card(name):
    m = MODELS[name]
    assert param_counts(m)["total"] == pytest.approx(m.params_reported, rel=0.01)


def test_qwen2_15b_params_by_hand():
    embed = 151936 * 1536  # tied: counted once
    attn = 1536 * 1536 * 2 + 2 * 1536 * 256 + (12 + 2 * 2) * 128  # q, o, k+v, qkv bias
    mlp = 3 * 1536 * 8960
    norms = 2 * 1536
    total = embed + 28 * (attn + mlp + norms) + 1536
    assert total == 1_543_714_304
    assert param_counts(MODELS["qwen2-1.5b"])["total"] == total


# ---------------------------------------------------------------- by hand, one test per regime
#
# Every expectation below is written from the raw config.json numbers and the datasheet, never
# read from the code under test, and pinned to 1e-9: a 10 % error in any term that binds in
# the regime moves the result by far more than that. The efficiencies are deliberately all
# different so a swapped knob (prefill MFU used for decode, one overhead for the other) shows.

EFF_D = Efficiency(
    mfu_prefill=0.55, mfu_decode=0.45, mbu=0.75, prefill_overhead_ms=1.5, decode_overhead_ms=0.5,
    gemm_half_tokens=64, mfu_attention=0.65, mbu_kv=0.9,
)  # fmt: skip
RTOL = 1e-9

# NVIDIA H100 SXM datasheet: BF16 dense 989.5 TFLOP/s (1,979 with sparsity), HBM3 3.35 TB/s.
H100_FLOPS, H100_BW = 989.5e12, 3350e9
# NVIDIA A100 80GB SXM datasheet: BF16 dense 312 TFLOP/s, HBM2e 2,039 GB/s.
A100_FLOPS, A100_BW = 312e12, 2039e9

# Llama-3.1-8B config.json (huggingface.co/meta-llama/Llama-3.1-8B): num_hidden_layers 32,
# hidden_size 4096, num_attention_heads 32, num_key_value_heads 8 (head_dim 4096/32 = 128),
# intermediate_size 14336, vocab_size 128256, tie_word_embeddings false, bfloat16.
L8_LAYER = (
    4096 * 32 * 128  # q_proj
    + 2 * 4096 * 8 * 128  # k_proj + v_proj (8 KV heads)
    + 32 * 128 * 4096  # o_proj
    + 3 * 4096 * 14336  # gate, up, down
    + 2 * 4096  # input and post-attention RMSNorm
)
L8_BODY = 32 * L8_LAYER + 4096  # + final norm
L8_EMBED = 128256 * 4096  # embed_tokens; lm_head is a second, untied copy
L8_F_LIN = 2 * L8_BODY  # 2 FLOPs per weight per token
L8_F_HEAD = 2 * L8_EMBED
L8_A = 2 * 32 * 32 * (128 + 128)  # QK^T + AV per (query, key) pair, all layers
L8_K = 2 * 32 * 8 * 128 * 2  # K and V, layers, kv heads, head_dim, bf16
L8_W = 2 * (L8_BODY + 2 * L8_EMBED)  # bf16 weight bytes, resident
# what a step reads: the untied input embedding only for its own tokens' rows (neglected),
# the LM head in full (docs/model.md §2.7)
L8_R = 2 * (L8_BODY + L8_EMBED)


def _l8(dev="h100-sxm"):
    return InstanceCost.build(MODELS["llama-3.1-8b"], ACCELERATORS[dev], 1, EFF_D)


def test_llama8b_shape_by_hand():
    assert L8_BODY + 2 * L8_EMBED == 8_030_261_248  # the Hub's "8.03B params"
    assert param_counts(MODELS["llama-3.1-8b"])["total"] == L8_BODY + 2 * L8_EMBED
    assert linear_flops_per_token(MODELS["llama-3.1-8b"]) == L8_F_LIN
    assert lm_head_flops(MODELS["llama-3.1-8b"]) == L8_F_HEAD
    assert attention_flops_coef(MODELS["llama-3.1-8b"]) == L8_A
    assert weight_bytes(MODELS["llama-3.1-8b"]) == L8_W
    assert (
        float(flops_per_token(MODELS["llama-3.1-8b"], 1000)) == L8_F_LIN + L8_F_HEAD + L8_A * 1000
    )
    assert float(kv_bytes(MODELS["llama-3.1-8b"], 3)) == 3 * L8_K
    assert ridge_point(ACCELERATORS["h100-sxm"]) == pytest.approx(989.5e12 / 3350e9, rel=RTOL)


def test_default_efficiencies():
    # The defaults docs/validation.md discusses; pinned so a retune is a deliberate change.
    e = Efficiency()
    assert (e.mfu_prefill, e.mfu_decode, e.mbu) == (0.68, 0.68, 0.7)
    assert (e.gemm_half_tokens, e.mfu_attention, e.mbu_kv) == (96.0, 0.72, 0.88)
    assert (e.prefill_overhead_ms, e.decode_overhead_ms) == (1.0, 1.0)


def _ops(gemm, tokens, weights, attn, kv, peak, bw, mfu, th=64, mfa=0.65, mbu=0.75, mkv=0.9):
    """A step by hand: the GEMMs at mfu · T / (T + T½) of the tensor peak against their
    weights at mbu, plus attention at mfa of the bf16 peak against its KV at mkv (EFF_D's
    values as defaults)."""
    t_gemm = max(gemm / (peak * mfu * tokens / (tokens + th)), weights / (bw * mbu))
    return t_gemm + max(attn / (peak * mfa), kv / (bw * mkv))


@pytest.mark.parametrize("n", [2048, 8192])
def test_prefill_compute_bound_by_hand(n):
    # One prompt of n tokens, nothing cached: n linear passes, one LM-head row, causal attention.
    gemm, attn = n * L8_F_LIN + L8_F_HEAD, L8_A * n * (n + 1) / 2
    t_c = gemm / (H100_FLOPS * 0.55 * n / (n + 64))
    assert t_c > 5 * L8_R / (H100_BW * 0.75)  # the GEMMs are compute-bound
    expected = t_c + attn / (H100_FLOPS * 0.65) + 1.5e-3  # attention too (KV write ≪)
    assert attn / (H100_FLOPS * 0.65) > L8_K * n / (H100_BW * 0.9)
    assert prefill_time(_l8(), [n], [0]) == pytest.approx(expected, rel=RTOL)


def test_prefill_32k_attention_dominated_by_hand():
    n = 32768
    attn = L8_A * n * (n + 1) / 2
    linear = n * L8_F_LIN + L8_F_HEAD
    assert attn > 0.6 * linear  # the quadratic term is 38 % of all FLOPs here
    expected = linear * (n + 64) / (n * H100_FLOPS * 0.55) + attn / (H100_FLOPS * 0.65) + 1.5e-3
    assert prefill_time(_l8(), [n], [0]) == pytest.approx(expected, rel=RTOL)


def test_prefill_batch_with_cached_prefix_by_hand():
    # Two requests in one step: 512 new on a 4096-token cached prefix, and 1000 new, no hit.
    gemm = 512 * L8_F_LIN + L8_F_HEAD + 1000 * L8_F_LIN + L8_F_HEAD
    attn = L8_A * (512 * 4096 + 512 * 513 / 2) + L8_A * 1000 * 1001 / 2
    kv = L8_K * (512 + 4096 + 1000)
    expected = _ops(gemm, 1512, L8_R, attn, kv, H100_FLOPS, H100_BW, 0.55) + 1.5e-3
    assert gemm / (H100_FLOPS * 0.55 * 1512 / 1576) > L8_R / (H100_BW * 0.75)  # compute
    assert prefill_time(_l8(), [512, 1000], [4096, 0]) == pytest.approx(expected, rel=RTOL)


def test_prefill_memory_bound_on_long_cached_prefix_by_hand():
    # 8 new tokens on a 32k cached prefix: read the weights and all cached KV, little compute.
    n, c = 8, 32768
    gemm, attn = n * L8_F_LIN + L8_F_HEAD, L8_A * (n * c + n * (n + 1) / 2)
    t_w, t_kv = L8_R / (H100_BW * 0.75), L8_K * (n + c) / (H100_BW * 0.9)
    assert t_w > 3 * gemm / (H100_FLOPS * 0.55 * n / (n + 64))
    assert t_kv > attn / (H100_FLOPS * 0.65)
    assert prefill_time(_l8(), [n], [c]) == pytest.approx(t_w + t_kv + 1.5e-3, rel=RTOL)


def test_decode_batch1_memory_bound_by_hand():
    ctx = 4096
    t_w, t_kv = L8_R / (H100_BW * 0.75), L8_K * ctx / (H100_BW * 0.9)  # weights, KV once
    assert t_w > 2 * (L8_F_LIN + L8_F_HEAD) / (H100_FLOPS * 0.45 / 65)  # eff(1) = 0.45/65
    got = float(decode_iteration_time(_l8(), 1, ctx))
    assert got == pytest.approx(t_w + t_kv + 0.5e-3, rel=RTOL)


def test_decode_above_ridge_compute_bound_by_hand():
    # 1024 sequences of 128 tokens: 1024 · 15 GFLOP against 16 GB of weights: the GEMMs
    # compute-bound; attention reads 17 GB of KV, memory-bound.
    b, ctx = 1024, 1024 * 128
    t_g = b * (L8_F_LIN + L8_F_HEAD) / (H100_FLOPS * 0.45 * b / (b + 64))
    assert t_g > 2 * L8_R / (H100_BW * 0.75)
    t_kv = L8_K * ctx / (H100_BW * 0.9)
    assert t_kv > L8_A * ctx / (H100_FLOPS * 0.65)
    got = float(decode_iteration_time(_l8(), b, ctx))
    assert got == pytest.approx(t_g + t_kv + 0.5e-3, rel=RTOL)


def test_recompute_both_regimes_by_hand():
    cost = _l8()
    # 16 tokens: memory-bound (the weights dominate); 8192 tokens: compute-bound. No LM head.
    for n in (16, 8192):
        t = _ops(n * L8_F_LIN, n, L8_R, L8_A * n * (n + 1) / 2, L8_K * n, H100_FLOPS, H100_BW, 0.55)
        assert float(recompute_time(cost, n)) == pytest.approx(t + 1.5e-3, rel=RTOL)
    assert (16 * L8_F_LIN) / (H100_FLOPS * 0.55 * 16 / 80) < L8_R / (H100_BW * 0.75)
    assert float(recompute_time(cost, 0)) == 0.0


def test_devices_scale_rates_by_hand():
    # 4 devices: 4× the FLOP/s, bandwidth and memory (ideal tensor parallelism).
    cost = InstanceCost.build(MODELS["llama-3.1-8b"], ACCELERATORS["h100-sxm"], 4, EFF_D)
    t = L8_R / (4 * H100_BW * 0.75) + L8_K * 4096 / (4 * H100_BW * 0.9)
    assert float(decode_iteration_time(cost, 1, 4096)) == pytest.approx(t + 0.5e-3, rel=RTOL)
    assert cost.memory_bytes == 4 * 80e9


# DeepSeek-V2-Lite config.json (huggingface.co/deepseek-ai/DeepSeek-V2-Lite): 27 layers,
# hidden 2048, 16 heads, vocab 102400, untied; MLA kv_lora_rank 512, q_lora_rank null,
# qk_rope_head_dim 64, qk_nope_head_dim 128, v_head_dim 128; MoE n_routed_experts 64,
# num_experts_per_tok 6, n_shared_experts 2, moe_intermediate_size 1408,
# first_k_dense_replace 1 (layer 0 dense, intermediate_size 10944); bfloat16.
DS_ATTN = (
    2048 * 16 * (128 + 64)  # q_proj (no q LoRA)
    + 2048 * (512 + 64)
    + 512  # kv_a_proj_with_mqa + kv_a_layernorm
    + 512 * 16 * (128 + 128)  # kv_b_proj
    + 16 * 128 * 2048  # o_proj
)
DS_EXPERT = 3 * 2048 * 1408
DS_DENSE = 3 * 2048 * 10944 + 26 * (2 * DS_EXPERT + 2048 * 64)  # layer 0; shared + router
DS_BODY = 27 * DS_ATTN + DS_DENSE + 27 * 2 * 2048 + 2048  # + norms
DS_ROUTED = 26 * 64 * DS_EXPERT
DS_ACTIVE = 26 * 6 * DS_EXPERT
DS_EMBED = 102400 * 2048


def _ds():
    return InstanceCost.build(MODELS["deepseek-v2-lite"], ACCELERATORS["a100-80gb"], 1, EFF_D)


def test_deepseek_v2_lite_shape_by_hand():
    m = MODELS["deepseek-v2-lite"]
    total = 2 * DS_EMBED + DS_BODY + DS_ROUTED
    assert total == pytest.approx(15.7e9, rel=0.001)  # the Hub's "15.7B params"
    p = param_counts(m)
    assert (p["total"], p["experts"], p["active_experts"]) == (total, DS_ROUTED, DS_ACTIVE)
    assert p["active"] == 2 * DS_EMBED + DS_BODY + DS_ACTIVE  # ≈ 2.7B with embeddings
    assert linear_flops_per_token(m) == 2 * (DS_BODY + DS_ACTIVE)
    assert attention_flops_coef(m) == 2 * 27 * 16 * ((128 + 64) + 128)
    assert kv_bytes_per_token(m) == 27 * (512 + 64) * 2  # MLA: latent + RoPE key, bf16


@pytest.mark.parametrize("b", [1, 4])
def test_moe_decode_reads_touched_experts_by_hand(b):
    # Each of b tokens picks 6 of 64 experts: a given expert is untouched with prob (58/64)^b.
    ctx = b * 2048
    dense_bytes = 2 * (DS_EMBED + DS_BODY)  # untied: the input table is not read
    touched = 1 - (1 - 6 / 64) ** b
    byts = dense_bytes + 2 * DS_ROUTED * touched + 27 * 576 * 2 * ctx
    gemm = b * (2 * (DS_BODY + DS_ACTIVE) + 2 * DS_EMBED)
    t_w = (dense_bytes + 2 * DS_ROUTED * touched) / (A100_BW * 0.75)
    t_kv = 27 * 576 * 2 * ctx / (A100_BW * 0.9)
    assert t_w > gemm / (A100_FLOPS * 0.45 * b / (b + 64))
    assert t_kv > 2 * 27 * 16 * 320 * ctx / (A100_FLOPS * 0.65)
    assert byts == pytest.approx(t_w * A100_BW * 0.75 + t_kv * A100_BW * 0.9, rel=RTOL)
    got = float(decode_iteration_time(_ds(), b, ctx))
    assert got == pytest.approx(t_w + t_kv + 0.5e-3, rel=RTOL)


def test_moe_prefill_counts_active_experts_by_hand():
    # 8192 tokens: FLOPs through the 6 active experts only; compute-bound on the A100.
    n = 8192
    gemm = n * 2 * (DS_BODY + DS_ACTIVE) + 2 * DS_EMBED
    attn = 2 * 27 * 16 * 320 * n * (n + 1) / 2
    expected = gemm * (n + 64) / (n * A100_FLOPS * 0.55) + attn / (A100_FLOPS * 0.65) + 1.5e-3
    assert prefill_time(_ds(), [n], [0]) == pytest.approx(expected, rel=RTOL)


def test_mla_kv_transfer_by_hand():
    # The KV of a 4096-token prefix over RoCE 200G (25 GB/s line rate at η 0.87, 3 µs of
    # latency and 450 µs of connector setup): 27·576·2 B per token.
    cost = _ds()
    assert cost.kv_bpt == 31104
    t = float(transfer_time(LINKS["roce-200g"], cost.kv_bpt * 4096))
    assert t == pytest.approx(3e-6 + 450e-6 + 4096 * 31104 / (0.87 * 25e9), rel=RTOL)


def test_param_count_keys_by_hand():
    p = param_counts(MODELS["llama-3.1-8b"])
    assert p["embedding"] == L8_EMBED and p["lm_head"] == L8_EMBED  # untied: its own copy
    assert p["active"] == p["total"] and p["experts"] == 0 and p["body"] == L8_BODY
    q = param_counts(MODELS["qwen2-1.5b"])
    assert q["embedding"] == q["lm_head"] == 151936 * 1536  # tied: the same matrix


def test_flops_per_token_without_context():
    assert float(flops_per_token(MODELS["llama-3.1-8b"])) == L8_F_LIN + L8_F_HEAD


def test_devices_scale_compute_by_hand():
    cost = InstanceCost.build(MODELS["llama-3.1-8b"], ACCELERATORS["h100-sxm"], 8, EFF_D)
    n = 8192  # ideal TP over 8: one group carries every token, at 8× the rates
    gemm, attn = n * L8_F_LIN + L8_F_HEAD, L8_A * n * (n + 1) / 2
    t = gemm * (n + 64) / (n * 8 * H100_FLOPS * 0.55) + attn / (8 * H100_FLOPS * 0.65)
    assert prefill_time(cost, [n], [0]) == pytest.approx(t + 1.5e-3, rel=RTOL)
    b, ctx = 8192, 8192 * 16
    t_g = b * (L8_F_LIN + L8_F_HEAD) * (b + 64) / (b * 8 * H100_FLOPS * 0.45)
    t_kv = L8_K * ctx / (8 * H100_BW * 0.9)  # the KV read exceeds attention's FLOPs
    assert float(decode_iteration_time(cost, b, ctx)) == pytest.approx(
        t_g + t_kv + 0.5e-3, rel=RTOL
    )


def test_recompute_one_token_is_a_step():
    assert L8_F_LIN * 65 / (H100_FLOPS * 0.55) < L8_R / (H100_BW * 0.75)
    t = L8_R / (H100_BW * 0.75) + L8_K / (H100_BW * 0.9)
    got = float(recompute_time(_l8(), 1))
    assert got == pytest.approx(t + 1.5e-3, rel=RTOL)


def test_moe_memory_bound_prefill_and_recompute_by_hand():
    # 16 new tokens on a 16k cached prefix, and a 16-token recompute: both read the dense
    # weights plus the experts 16 tokens touch, 1 - (58/64)^16 of them.
    touched = 1 - (1 - 6 / 64) ** 16
    weights = 2 * (DS_EMBED + DS_BODY) + 2 * DS_ROUTED * touched  # head, not the input table
    k = 27 * 576 * 2
    t_w = weights / (A100_BW * 0.75)
    # attention over the 16k prefix: its FLOPs (0.357 ms) outlast its KV read (0.278 ms)
    t_a = 2 * 27 * 16 * 320 * (16 * 16384 + 16 * 17 / 2) / (A100_FLOPS * 0.65)
    assert t_a > k * (16 + 16384) / (A100_BW * 0.9)
    assert prefill_time(_ds(), [16], [16384]) == pytest.approx(t_w + t_a + 1.5e-3, rel=RTOL)
    t_kv = k * 16 / (A100_BW * 0.9)  # 16 tokens' attention: the KV write outlasts the FLOPs
    assert t_kv > 2 * 27 * 16 * 320 * 16 * 17 / 2 / (A100_FLOPS * 0.65)
    assert float(recompute_time(_ds(), 16)) == pytest.approx(t_w + t_kv + 1.5e-3, rel=RTOL)


# DeepSeek-V2 config.json (huggingface.co/deepseek-ai/DeepSeek-V2): 60 layers, hidden 5120,
# 128 heads, q_lora_rank 1536, kv_lora_rank 512, rope 64, nope 128, v 128, vocab 102400;
# 160 routed experts (6 per token), 2 shared, moe_intermediate_size 1536,
# first_k_dense_replace 1 with intermediate_size 12288. The Hub: "236B params".
DSV2 = ModelSpec(
    name="deepseek-v2-test", layers=60, hidden_size=5120, heads=128, kv_heads=128,
    head_dim=128, intermediate_size=12288, vocab_size=102400, max_context=163840,
    kv_lora_rank=512, q_lora_rank=1536, qk_rope_head_dim=64, qk_nope_head_dim=128,
    v_head_dim=128, n_routed_experts=160, n_shared_experts=2, experts_per_token=6,
    moe_intermediate_size=1536, first_dense_layers=1,
)  # fmt: skip


def test_mla_with_q_lora_params_by_hand():
    attn = (
        5120 * 1536
        + 1536
        + 1536 * 128 * (128 + 64)  # q_a_proj, q_a_layernorm, q_b_proj
        + 5120 * (512 + 64)
        + 512  # kv_a_proj_with_mqa, kv_a_layernorm
        + 512 * 128 * (128 + 128)  # kv_b_proj
        + 128 * 128 * 5120  # o_proj
    )
    expert = 3 * 5120 * 1536
    dense = 3 * 5120 * 12288 + 59 * (2 * expert + 5120 * 160)
    body = 60 * attn + dense + 60 * 2 * 5120 + 5120
    total = 2 * 102400 * 5120 + body + 59 * 160 * expert
    assert total == pytest.approx(236e9, rel=0.005)
    assert param_counts(DSV2)["total"] == total
    assert kv_bytes_per_token(DSV2) == 60 * (512 + 64) * 2


def test_series_switch_one_past_the_end():
    # Constant 10.5 against a ramp j: the ramp overtakes between the 10th and 11th
    # iteration, so the first 10 iterations all cost 10.5 (no switch inside the window).
    coeffs = (10.5, 0.0, 0.0, 1.0, 0.0)
    assert series_time(coeffs, 10) == 10 * 10.5
    assert series_time(coeffs, 12) == 11 * 10.5 + 11  # j = 11 costs 11


# ---------------------------------------------------------------- rooflines


def test_decode_iteration_qwen2_15b_on_l4_by_hand():
    cost = InstanceCost.build(MODELS["qwen2-1.5b"], ACCELERATORS["l4"], 1, EFF)
    batch, context = 8, 8 * 1000  # 8 sequences of 1000 tokens
    weights = 1_543_714_304 * 2  # bf16 bytes
    # FLOPs: 2 per weight per token (tied LM head included once) + attention 2·L·H·(dk+dv) per pair.
    gemm = batch * 2 * 1_543_714_304
    attn = 2 * 28 * 12 * (128 + 128) * context
    t_gemm = max(gemm * (8 + 100) / (8 * 121e12 * 0.5), weights / (300e9 * 0.7))  # 14.70 ms
    t_attn = max(attn / (121e12 * 0.6), 28672 * context / (300e9 * 0.9))  # KV: 0.849 ms
    expected = t_gemm + t_attn + 1e-3
    assert expected == pytest.approx(0.0165516, rel=1e-5)
    assert float(decode_iteration_time(cost, batch, context)) == pytest.approx(expected, rel=1e-12)


def test_decode_iteration_vectorised():
    cost = InstanceCost.build(MODELS["qwen2-1.5b"], ACCELERATORS["l4"], 1, EFF)
    batches = np.array([1, 8, 64])
    times = decode_iteration_time(cost, batches, batches * 500)
    assert times.shape == (3,)
    assert np.all(np.diff(times) > 0)


def test_transfer_1gb_over_pcie4():
    t = float(transfer_time(LINKS["pcie4-x16"], 1e9))
    assert t == pytest.approx(2e-6 + 1e9 / 31.5e9, rel=1e-12)  # ~31.75 ms


# ---------------------------------------------------------------- closed-form series


def direct_series(coeffs, k):
    a1, s1, a2, s2, o = coeffs
    return sum(max(a1 + s1 * j, a2 + s2 * j) + o for j in range(k))


@pytest.mark.parametrize(
    ("model", "dev", "batch", "context0", "k"),
    [
        ("qwen2-1.5b", "l4", 1, 100, 50),
        ("qwen2-1.5b", "l4", 256, 10_000, 400),
        ("llama-3.1-8b", "h100-sxm", 32, 4_000, 300),
        ("llama-3.1-8b", "h100-sxm", 512, 0, 200),
        ("llama-3.1-8b", "h100-sxm", 1024, 131_072, 50),  # compute-bound with context
        ("deepseek-v2-lite", "a100-80gb", 64, 20_000, 250),
        ("llama-3.1-70b", "b200", 128, 50_000, 100),
    ],
)
@pytest.mark.parametrize("eff", [EFF, EFF_D])
def test_series_time_equals_iteration_sum(model, dev, batch, context0, k, eff):
    cost = InstanceCost.build(MODELS[model], ACCELERATORS[dev], 1, eff)
    coeffs = decode_series_coeffs(cost, batch, context0)
    direct = sum(float(decode_iteration_time(cost, batch, context0 + batch * j)) for j in range(k))
    assert series_time(coeffs, k) == pytest.approx(direct, rel=1e-9)


def test_series_of_a_large_batch_matches_direct_iterations():
    # Only attention depends on the iteration: its compute and KV terms both grow with
    # the context, in proportion, so they never cross; the GEMMs' max sits in o.
    cost = InstanceCost.build(MODELS["qwen2-0.5b"], ACCELERATORS["a10g"], 1, EFF)
    a1, s1, a2, s2, o = coeffs = decode_series_coeffs(cost, 512, 512 * 100)
    assert a1 * s2 == pytest.approx(a2 * s1, rel=1e-12)
    k = 40
    direct = sum(float(decode_iteration_time(cost, 512, 512 * (100 + j))) for j in range(k))
    assert series_time(coeffs, k) == pytest.approx(direct, rel=1e-9)


coef = st.one_of(st.just(0.0), st.floats(1e-9, 1e3, allow_nan=False, allow_infinity=False))
coeff_tuples = st.tuples(coef, coef, coef, coef, coef)


@settings(max_examples=500, deadline=None)
@given(coeffs=coeff_tuples, k=st.integers(0, 500))
def test_series_time_matches_direct_sum(coeffs, k):
    assert math.isclose(
        series_time(coeffs, k), direct_series(coeffs, k), rel_tol=1e-9, abs_tol=1e-12
    )


@settings(max_examples=300, deadline=None)
@given(
    coeffs=coeff_tuples,
    k_max=st.integers(0, 300),
    frac=st.floats(0.0, 1.2, allow_nan=False),
)
def test_iterations_within_is_largest_k(coeffs, k_max, frac):
    elapsed = frac * series_time(coeffs, k_max)
    brute = max(k for k in range(k_max + 1) if series_time(coeffs, k) <= elapsed)
    assert iterations_within(coeffs, elapsed, k_max) == brute


@settings(max_examples=200, deadline=None)
@given(coeffs=coeff_tuples, k_max=st.integers(0, 300), elapsed=st.floats(0.0, 1e5))
def test_iterations_within_any_elapsed(coeffs, k_max, elapsed):
    brute = max(k for k in range(k_max + 1) if series_time(coeffs, k) <= elapsed)
    assert iterations_within(coeffs, elapsed, k_max) == brute


def test_iterations_within_negative_elapsed():
    assert iterations_within((1.0, 0.0, 0.5, 0.1, 0.0), -1.0, 10) == 0


@pytest.mark.parametrize(
    ("weights", "dev", "gemm_peak", "bf16_peak"),
    [
        # H100 SXM datasheet: FP8 Tensor Core 3,958 TFLOPS with sparsity (1,979 dense),
        # BF16 1,979 with sparsity (989.5 dense)
        ("fp8", "h100-sxm", 1979e12, 989.5e12),
        # L4 datasheet: INT8 Tensor Core 485 TOPS with sparsity (242.5 dense), BF16 121
        ("int8", "l4", 242.5e12, 121e12),
        # W4A16: the int4 weights are dequantised to bf16, the GEMMs run at the bf16 peak
        ("int4", "h100-sxm", 989.5e12, 989.5e12),
    ],
)
def test_quantized_gemms_run_at_their_dtype_peak_by_hand(weights, dev, gemm_peak, bf16_peak):
    # Llama-3.1-8B with its linear layers quantized, one 8,192-token prompt: the GEMMs
    # compute-bound at the format's tensor peak, attention (bf16 activations and KV) at the
    # bf16 peak.
    from prefixbench.catalog.formats import with_formats

    m = with_formats(MODELS["llama-3.1-8b"], weights=weights)
    cost = InstanceCost.build(m, ACCELERATORS[dev], 1, EFF_D)
    n = 8192
    t_gemm = (n * L8_F_LIN + L8_F_HEAD) * (n + 64) / (n * gemm_peak * 0.55)
    t_attn = L8_A * n * (n + 1) / 2 / (bf16_peak * 0.65)
    assert prefill_time(cost, [n], [0]) == pytest.approx(t_gemm + t_attn + 1.5e-3, rel=RTOL)


def test_an_accelerator_carries_its_own_gemm_curve_by_hand():
    # A part with measured constants (0.9 of peak, half at 40 tokens) prices its GEMMs on
    # them; one without (the catalog's H100) keeps the defaults 0.68 and 96; a value the user
    # set (here prefill MFU 0.5) wins over the part's.
    from prefixbench.physics.costmodel import gemm_time

    h100 = ACCELERATORS["h100-sxm"]
    own = h100.model_copy(update={"gemm_mfu": 0.9, "gemm_half_tokens": 40.0})
    m = MODELS["llama-3.1-8b"]
    cost = InstanceCost.build(m, own, 1, Efficiency())
    assert cost.flops_rate_prefill == pytest.approx(989.5e12 * 0.9, rel=RTOL)
    assert cost.flops_rate_decode == pytest.approx(989.5e12 * 0.9, rel=RTOL)
    assert cost.gemm_half == pytest.approx(40.0)
    # 1 TFLOP at 40 tokens: eff = 0.9 · 40 / (40 + 40) = 0.45 of 989.5 TFLOP/s
    t = float(gemm_time(cost, 1e12, 40, cost.flops_rate_prefill))
    assert t == pytest.approx(1e12 / (0.45 * 989.5e12), rel=RTOL)
    default = InstanceCost.build(m, h100, 1, Efficiency())
    assert default.flops_rate_prefill == pytest.approx(989.5e12 * 0.68, rel=RTOL)
    assert default.gemm_half == pytest.approx(96.0)
    mixed = InstanceCost.build(m, own, 1, Efficiency(mfu_prefill=0.5))
    assert mixed.flops_rate_prefill == pytest.approx(989.5e12 * 0.5, rel=RTOL)
    assert mixed.flops_rate_decode == pytest.approx(989.5e12 * 0.9, rel=RTOL)
    assert mixed.gemm_half == pytest.approx(40.0)
