"""prefixbench's default roofline against public measurements (docs/validation.md).

Each test pins the ratio prefixbench / measured to a stated band. The bands are what the
data shows, not what we would like: where the model is 1.3× slow or 2× fast, the band says
so and docs/validation.md explains why. A change to a coefficient or a default efficiency
that moves a figure out of its band fails here.
"""

from __future__ import annotations

import pytest
from measured import (
    blis_attention_decode,
    blis_attention_prefill,
    blis_vllm_end_to_end,
    vidur_linear,
)

from prefixbench.physics.costmodel import Efficiency

EFF = Efficiency()  # the defaults: MFU 0.5, MBU 0.7, 1 ms per step


def _ratios(rows, needle=""):
    out = [
        (r["config"], r["prefixbench_ms"] / r["measured_ms"]) for r in rows if needle in r["config"]
    ]
    assert out, f"no rows match {needle!r}"
    return out


def _within(rows, lo, hi):
    for config, ratio in rows:
        assert lo <= ratio <= hi, f"{config}: prefixbench/measured = {ratio:.3f}, band [{lo}, {hi}]"


def test_weight_reads_match_vidur_within_5_percent():
    # One token through the layers reads every weight once: MBU 0.7 is what Vidur measures
    # (0.69–0.71 on H100 and A100, norms and activations included).
    _within(_ratios(vidur_linear(EFF, tokens=(1,))), 0.95, 1.05)


def test_large_matmuls_are_30_percent_slower_than_vidur():
    # 4096 tokens: the layers run at MFU ≈ 0.65 (GEMMs alone ≈ 0.7–0.76), the default 0.5
    # makes prefixbench 1.29–1.34× slow here. Documented, not hidden.
    _within(_ratios(vidur_linear(EFF, tokens=(4096,))), 1.25, 1.40)


def test_near_the_ridge_the_roofline_is_13_percent_fast():
    # 128 tokens: neither pure term binds; max() underestimates the transition.
    _within(_ratios(vidur_linear(EFF, tokens=(128,))), 0.85, 0.90)


def test_attention_prefill_against_kernel_bench():
    # The causal A·n(n+1)/2 FLOP count at MFU 0.5, vs FlashAttention at MFU 0.64–0.77.
    _within(_ratios(blis_attention_prefill(EFF)), 1.25, 1.50)


def test_attention_decode_kv_read_against_kernel_bench():
    # Reading the KV once per iteration at MBU 0.7, vs 0.84–0.95 measured: 1.2–1.35× slow.
    _within(_ratios(blis_attention_decode(EFF)), 1.15, 1.40)


def test_vllm_tp1_decode_within_15_percent():
    # vLLM on one H100, one request at a time: TPOT is one batch-1 decode iteration.
    rows = [r for r in _ratios(blis_vllm_end_to_end(EFF), "TPOT") if "TP1" in r[0]]
    assert len(rows) == 3
    _within(rows, 0.85, 1.15)


def test_vllm_tp1_long_prompt_ttft_within_20_percent():
    rows = [r for r in _ratios(blis_vllm_end_to_end(EFF), "TTFT") if "TP1" in r[0]]
    long_ = [r for r in rows if "chatsweep" not in r[0]]
    assert len(long_) == 2
    _within(long_, 0.80, 1.05)


def test_vllm_short_prompt_ttft_is_2x_fast():
    # 70 new tokens: the client-side TTFT (HTTP, tokenizer, scheduling: ≈ 7 ms) is not a
    # prefill step; prefixbench reports half of it. A documented limitation.
    (row,) = [r for r in _ratios(blis_vllm_end_to_end(EFF), "TTFT") if "TP1 chatsweep" in r[0]]
    _within([row], 0.45, 0.55)


@pytest.mark.parametrize("tp", ["TP2", "TP4"])
def test_vllm_tensor_parallel_is_optimistic(tp):
    # TP pays ring all-reduces on NVLink 4 (docs/model.md §2.8) but no per-GPU launch cost
    # nor NCCL's per-collective base latency: the more GPUs, the faster prefixbench is than
    # vLLM (0.26–1.03× measured; 0.23–1.00× with ideal TP).
    rows = [r for r in _ratios(blis_vllm_end_to_end(EFF)) if tp in r[0]]
    _within(rows, 0.2, 1.05)
    assert sum(ratio for _, ratio in rows) / len(rows) < 0.8
