"""Roofline cost model pinned to hand-computed numbers, plus closed-form series invariants."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from prefixbench.catalog import ACCELERATORS, LINKS, MODELS
from prefixbench.costmodel import (
    Efficiency,
    InstanceCost,
    decode_iteration_time,
    decode_series_coeffs,
    iterations_within,
    kv_bytes_per_token,
    param_counts,
    series_time,
    transfer_time,
)

# Spelled out so the pinned numbers do not move if the defaults are retuned.
EFF = Efficiency(
    mfu_prefill=0.5, mfu_decode=0.5, mbu=0.7, prefill_overhead_ms=1.0, decode_overhead_ms=1.0
)


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


# ---------------------------------------------------------------- rooflines


def test_llama8b_prefill_2048_is_compute_bound_on_h100():
    cost = InstanceCost.build(MODELS["llama-3.1-8b"], ACCELERATORS["h100-sxm"], 1, EFF)
    flops, kv_io = cost.prefill_parts(2048, 0)
    t_compute = float(flops) / cost.flops_rate_prefill
    t_memory = (float(cost.weights_read(2048)) + float(kv_io)) / cost.byte_rate
    assert t_compute > 5 * t_memory


def test_llama8b_batch1_decode_is_memory_bound_on_h100():
    cost = InstanceCost.build(MODELS["llama-3.1-8b"], ACCELERATORS["h100-sxm"], 1, EFF)
    flops = cost.linear_flops + cost.lm_head_flops + cost.attn_coef * 1000
    t_compute = flops / cost.flops_rate_decode
    t_memory = (float(cost.weights_read(1)) + cost.kv_bpt * 1000) / cost.byte_rate
    assert t_memory > 50 * t_compute


def test_decode_iteration_qwen2_15b_on_l4_by_hand():
    cost = InstanceCost.build(MODELS["qwen2-1.5b"], ACCELERATORS["l4"], 1, EFF)
    batch, context = 8, 8 * 1000  # 8 sequences of 1000 tokens
    weights = 1_543_714_304 * 2  # bf16 bytes
    # FLOPs: 2 per weight per token (tied LM head included once) + attention 2·L·H·(dk+dv) per pair.
    flops = batch * 2 * 1_543_714_304 + 2 * 28 * 12 * (128 + 128) * context
    byts = weights + 28672 * context
    t_compute = flops / (121e12 * 0.5)  # 0.431 ms
    t_memory = byts / (300e9 * 0.7)  # 15.79 ms
    expected = max(t_compute, t_memory) + 1e-3
    assert expected == pytest.approx(0.0167943, rel=1e-5)
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
        ("deepseek-v2-lite", "a100-80gb", 64, 20_000, 250),
        ("llama-3.1-70b", "b200", 128, 50_000, 100),
    ],
)
def test_series_time_equals_iteration_sum(model, dev, batch, context0, k):
    cost = InstanceCost.build(MODELS[model], ACCELERATORS[dev], 1, EFF)
    coeffs = decode_series_coeffs(cost, batch, context0)
    direct = sum(float(decode_iteration_time(cost, batch, context0 + batch * j)) for j in range(k))
    assert series_time(coeffs, k) == pytest.approx(direct, rel=1e-9)


def test_series_switches_compute_to_memory_midway():
    # A large batch on a low-ridge device starts compute-bound; the growing KV read
    # overtakes the attention FLOPs later in the series.
    cost = InstanceCost.build(MODELS["qwen2-0.5b"], ACCELERATORS["a10g"], 1, EFF)
    a1, s1, a2, s2, o = coeffs = decode_series_coeffs(cost, 512, 0)
    assert a1 > a2 and s2 > s1
    switch = (a1 - a2) / (s2 - s1)
    k = int(switch * 2) + 2
    direct = sum(float(decode_iteration_time(cost, 512, 512 * j)) for j in range(k))
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
