"""Roofline cost model (BRIEF §3), as plain functions over numpy arrays or floats.

step time = max(FLOPs / (peak · MFU), bytes / (HBM bandwidth · MBU)) + overhead

Units: seconds, bytes, FLOPs, tokens. An instance of ``d`` devices has ``d`` times the
peak, bandwidth and memory of one (ideal tensor parallelism; communication is not modelled,
see docs/model.md). Every function accepts scalars or numpy arrays elementwise.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from .catalog.specs import AcceleratorSpec, LinkSpec, ModelSpec


class Efficiency(BaseModel):
    """Calibration knobs of the roofline. Defaults are typical of vLLM/SGLang on recent GPUs."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    mfu_prefill: float = Field(
        0.5,
        ge=0.001,
        le=1,
        description="Fraction of peak FLOP/s a prefill (or recompute) step reaches (0.001 to 1).",
    )
    mfu_decode: float = Field(
        0.5,
        ge=0.001,
        le=1,
        description="Fraction of peak FLOP/s a decode step reaches (0.001 to 1).",
    )
    mbu: float = Field(
        0.7,
        ge=0.001,
        le=1,
        description="Fraction of HBM bandwidth a step reaches (decode is bound by it; 0.001 to 1).",
    )
    prefill_overhead_ms: float = Field(
        1.0,
        ge=0,
        le=10_000,
        description="Fixed cost per prefill step (scheduling, kernel launches), ms (0 to 10⁴).",
    )
    decode_overhead_ms: float = Field(
        1.0,
        ge=0,
        le=10_000,
        description="Fixed cost per decode iteration (scheduling, sampling), ms (0 to 10⁴).",
    )


# ---------------------------------------------------------------- model arithmetic


def kv_bytes_per_token(m: ModelSpec) -> int:
    """KV-cache bytes one token occupies: 2·layers·kv_heads·head_dim·bytes, or the MLA latent."""
    if m.is_mla:
        return int(round(m.layers * (m.kv_lora_rank + m.qk_rope_head_dim) * m.kv_bytes))
    return int(round(2 * m.layers * m.kv_heads * m.head_dim * m.kv_bytes))


def kv_bytes(m: ModelSpec, tokens):
    """KV bytes of ``tokens`` tokens (a prefix, a prompt, an array of them)."""
    return kv_bytes_per_token(m) * np.asarray(tokens, dtype=np.float64)


def _attention_params(m: ModelSpec) -> int:
    h, n = m.hidden_size, m.heads
    if m.is_mla:
        qk = m.qk_nope_head_dim + m.qk_rope_head_dim
        q = (
            h * m.q_lora_rank + m.q_lora_rank + m.q_lora_rank * n * qk
            if m.q_lora_rank
            else h * n * qk
        )
        kv_a = h * (m.kv_lora_rank + m.qk_rope_head_dim) + m.kv_lora_rank  # + its layernorm
        kv_b = m.kv_lora_rank * n * (m.qk_nope_head_dim + m.v_head_dim)
        o = n * m.v_head_dim * h
        return q + kv_a + kv_b + o
    q = h * n * m.head_dim
    kv = 2 * h * m.kv_heads * m.head_dim
    o = n * m.head_dim * h
    bias = (n + 2 * m.kv_heads) * m.head_dim if m.qkv_bias else 0
    return q + kv + o + bias


def _mlp_params(m: ModelSpec) -> tuple[int, int, int]:
    """(dense-MLP params of all layers, expert params of all layers, active expert params)."""
    h = m.hidden_size
    dense_layer = 3 * h * m.intermediate_size
    if not m.is_moe:
        return m.layers * dense_layer, 0, 0
    moe_layers = m.layers - m.first_dense_layers
    expert = 3 * h * m.moe_intermediate_size
    dense = m.first_dense_layers * dense_layer + moe_layers * (
        m.n_shared_experts * expert + h * m.n_routed_experts  # shared experts + router
    )
    return (
        dense,
        moe_layers * m.n_routed_experts * expert,
        moe_layers * m.experts_per_token * expert,
    )


def param_counts(m: ModelSpec) -> dict[str, int]:
    """Parameter counts: total, active per token, embedding, LM head, experts."""
    embed = m.vocab_size * m.hidden_size
    head = 0 if m.tied_embeddings else embed
    norms = m.layers * 2 * m.hidden_size + m.hidden_size
    dense_mlp, experts, active_experts = _mlp_params(m)
    body = m.layers * _attention_params(m) + dense_mlp + norms
    total = embed + head + body + experts
    return {
        "total": total,
        "active": embed + head + body + active_experts,
        "embedding": embed,
        "lm_head": embed if m.tied_embeddings else head,
        "experts": experts,
        "active_experts": active_experts,
        "body": body,
    }


def weight_bytes(m: ModelSpec) -> float:
    """Bytes of weights resident on an instance."""
    return param_counts(m)["total"] * m.weight_bytes


def linear_flops_per_token(m: ModelSpec) -> float:
    """Matmul FLOPs per token through the layers (2 per active weight), LM head excluded."""
    p = param_counts(m)
    return 2.0 * (p["body"] + p["active_experts"])


def lm_head_flops(m: ModelSpec) -> float:
    """FLOPs of the LM head for one token (only tokens that produce logits pay it)."""
    return 2.0 * m.vocab_size * m.hidden_size


def attention_flops_coef(m: ModelSpec) -> float:
    """Attention FLOPs per (query token, attended token) pair: QKᵀ plus AV, all layers."""
    if m.is_mla:
        qk, v = m.qk_nope_head_dim + m.qk_rope_head_dim, m.v_head_dim
    else:
        qk = v = m.head_dim
    return 2.0 * m.layers * m.heads * (qk + v)


def flops_per_token(m: ModelSpec, context=0):
    """FLOPs to produce one token attending to ``context`` earlier tokens (LM head included)."""
    return (
        linear_flops_per_token(m) + lm_head_flops(m) + attention_flops_coef(m) * np.asarray(context)
    )


def ridge_point(dev: AcceleratorSpec) -> float:
    """FLOPs per byte at which the roofline turns from memory- to compute-bound."""
    return dev.peak_tflops * 1e12 / (dev.hbm_gbps * 1e9)


# ---------------------------------------------------------------- instance step times


@dataclass(frozen=True)
class InstanceCost:
    """Precomputed roofline coefficients of one model on one instance (floats, seconds)."""

    flops_rate_prefill: float  # effective FLOP/s for prefill and recompute
    flops_rate_decode: float
    byte_rate: float  # effective bytes/s
    prefill_overhead: float
    decode_overhead: float
    linear_flops: float  # per token
    lm_head_flops: float  # per logits token
    attn_coef: float  # per (query, key) pair
    kv_bpt: float  # KV bytes per token
    weights: float  # bytes read once per step (dense part)
    expert_weights: float  # bytes of all routed experts (MoE), else 0
    expert_frac: float  # experts_per_token / n_routed_experts
    memory_bytes: float  # instance HBM capacity

    @classmethod
    def build(
        cls, m: ModelSpec, dev: AcceleratorSpec, devices: int, eff: Efficiency
    ) -> InstanceCost:
        p = param_counts(m)
        expert_bytes = p["experts"] * m.weight_bytes
        return cls(
            flops_rate_prefill=dev.peak_tflops * 1e12 * devices * eff.mfu_prefill,
            flops_rate_decode=dev.peak_tflops * 1e12 * devices * eff.mfu_decode,
            byte_rate=dev.hbm_gbps * 1e9 * devices * eff.mbu,
            prefill_overhead=eff.prefill_overhead_ms / 1e3,
            decode_overhead=eff.decode_overhead_ms / 1e3,
            linear_flops=linear_flops_per_token(m),
            lm_head_flops=lm_head_flops(m),
            attn_coef=attention_flops_coef(m),
            kv_bpt=float(kv_bytes_per_token(m)),
            weights=weight_bytes(m) - expert_bytes,
            expert_weights=expert_bytes,
            expert_frac=(m.experts_per_token / m.n_routed_experts) if m.is_moe else 0.0,
            memory_bytes=dev.memory_gb * 1e9 * devices,
        )

    def weights_read(self, batch):
        """Weight bytes one step reads: dense part plus the experts ``batch`` tokens touch."""
        if self.expert_weights == 0.0:
            return self.weights
        touched = 1.0 - (1.0 - self.expert_frac) ** np.asarray(batch, dtype=np.float64)
        return self.weights + self.expert_weights * touched

    def prefill_parts(self, new_tokens, cached_tokens, requests=1):
        """(FLOPs, bytes) of prefilling ``new_tokens`` that attend to ``cached_tokens``.

        Works on totals for a batch when given per-request arrays summed by the caller;
        here a single request (or arrays of single requests).
        """
        n = np.asarray(new_tokens, dtype=np.float64)
        c = np.asarray(cached_tokens, dtype=np.float64)
        flops = (
            n * self.linear_flops
            + requests * self.lm_head_flops
            + self.attn_coef * (n * c + n * (n + 1.0) / 2.0)
        )
        kv_io = self.kv_bpt * (n + c)  # write the new KV, read the cached KV
        return flops, kv_io


def prefill_time(cost: InstanceCost, new_tokens, cached_tokens):
    """Time of ONE prefill step over a batch given as arrays of per-request tokens.

    Cached tokens are not recomputed but are attended to (and read).
    """
    n = np.atleast_1d(np.asarray(new_tokens, dtype=np.float64))
    c = np.atleast_1d(np.asarray(cached_tokens, dtype=np.float64))
    flops, kv_io = cost.prefill_parts(n, c)
    t_compute = flops.sum() / cost.flops_rate_prefill
    t_memory = (cost.weights_read(n.sum()) + kv_io.sum()) / cost.byte_rate
    return float(max(t_compute, t_memory) + cost.prefill_overhead)


def recompute_time(cost: InstanceCost, prefix_tokens):
    """Time for a decode instance to rebuild the KV of ``prefix_tokens`` (a prefill, no logits)."""
    n = np.asarray(prefix_tokens, dtype=np.float64)
    flops = n * cost.linear_flops + cost.attn_coef * n * (n + 1.0) / 2.0
    t = np.maximum(
        flops / cost.flops_rate_prefill, (cost.weights_read(n) + cost.kv_bpt * n) / cost.byte_rate
    )
    return np.where(n > 0, t + cost.prefill_overhead, 0.0)


def decode_iteration_time(cost: InstanceCost, batch, context):
    """Time of one decode iteration: ``batch`` sequences attending to ``context`` tokens in all."""
    b = np.asarray(batch, dtype=np.float64)
    ctx = np.asarray(context, dtype=np.float64)
    flops = b * (cost.linear_flops + cost.lm_head_flops) + cost.attn_coef * ctx
    byts = cost.weights_read(b) + cost.kv_bpt * ctx
    return np.maximum(flops / cost.flops_rate_decode, byts / cost.byte_rate) + cost.decode_overhead


def transfer_time(link: LinkSpec, nbytes):
    """Unqueued time to move ``nbytes`` over one channel: latency + bytes / bandwidth."""
    b = np.asarray(nbytes, dtype=np.float64)
    return link.latency_us / 1e6 + b / (link.bandwidth_gbps * 1e9)


# ---------------------------------------------------------------- closed-form decode series


def decode_series_coeffs(cost: InstanceCost, batch: int, context0: float) -> tuple[float, ...]:
    """Iteration j of a fixed batch takes max(a1 + s1·j, a2 + s2·j) + overhead.

    The context grows by ``batch`` tokens per iteration, so both roofline terms are linear in j.
    Returns (a1, s1, a2, s2, overhead).
    """
    fr, br = cost.flops_rate_decode, cost.byte_rate
    a1 = (batch * (cost.linear_flops + cost.lm_head_flops) + cost.attn_coef * context0) / fr
    s1 = cost.attn_coef * batch / fr
    a2 = (float(cost.weights_read(batch)) + cost.kv_bpt * context0) / br
    s2 = cost.kv_bpt * batch / br
    return a1, s1, a2, s2, cost.decode_overhead


def _lin_sum(a: float, s: float, j0: float, j1: float) -> float:
    """Sum over integer j in [j0, j1) of a + s·j."""
    n = j1 - j0
    if n <= 0:
        return 0.0
    return n * a + s * (j0 + j1 - 1) * n / 2.0


def series_time(coeffs: tuple[float, ...], k: float) -> float:
    """Time of the first ``k`` iterations of a fixed batch (closed form, no loop)."""
    if k <= 0:
        return 0.0
    a1, s1, a2, s2, o = coeffs
    last = k - 1
    first = a1 >= a2
    if first == (a1 + s1 * last >= a2 + s2 * last):
        return k * o + (_lin_sum(a1, s1, 0, k) if first else _lin_sum(a2, s2, 0, k))
    # The dominant roofline term switches once, at j = x in (0, last].
    x = (a2 - a1) / (s1 - s2)
    cut = float(min(max(np.ceil(x), 1.0), last))
    if first:
        return k * o + _lin_sum(a1, s1, 0, cut) + _lin_sum(a2, s2, cut, k)
    return k * o + _lin_sum(a2, s2, 0, cut) + _lin_sum(a1, s1, cut, k)


def iterations_within(coeffs: tuple[float, ...], elapsed: float, k_max: int) -> int:
    """Largest k <= k_max with series_time(k) <= elapsed (iterations completed by then)."""
    if elapsed < 0.0:
        return 0
    if series_time(coeffs, k_max) <= elapsed:
        return k_max
    a1, s1, a2, s2, o = coeffs
    # Guess from the quadratic of the term dominant at the start, then check exactly.
    a, s = (a1, s1) if a1 >= a2 else (a2, s2)
    a += o
    if s > 0.0:
        b = a - s / 2.0
        guess = (-b + np.sqrt(b * b + 2.0 * s * elapsed)) / s
    elif a > 0.0:
        guess = elapsed / a
    else:  # zero-cost start (only the other term grows): let the exact search decide
        guess = 0.0
    lo = int(max(0.0, min(guess, k_max - 1)))
    for _ in range(3):
        if series_time(coeffs, lo) > elapsed:
            lo -= 1
        elif series_time(coeffs, lo + 1) <= elapsed:
            lo += 1
        else:
            return lo
    lo, hi = 0, k_max  # invariant: series(lo) <= elapsed < series(hi)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if series_time(coeffs, mid) <= elapsed:
            lo = mid
        else:
            hi = mid
    return lo
