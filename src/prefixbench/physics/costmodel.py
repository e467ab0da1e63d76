"""Roofline cost model (BRIEF §3), as plain functions over numpy arrays or floats.

step time = Σ over operators of max(FLOPs / rate, bytes / bandwidth) + overhead

Two operator groups (docs/model/cost-model.md "Per-operator roofline"): the GEMMs (QKV/O
projections, MLP or experts, LM head, norms: 2 FLOPs per weight per token, their weights
read once) at the weight format's tensor peak with an efficiency that rises with the step's
tokens per device, eff(T) = MFU · T / (T + T½), and at the weights' bandwidth share; and
attention, at its own FLOP share and the KV stream's bandwidth share.

Units: seconds, bytes, FLOPs, tokens. An instance of ``d`` devices has ``d`` times the
peak, bandwidth and memory of one, divided by the pipeline depth (one stage works at a
time); tensor-, pipeline- and expert-parallel communication over the instance's scale-up
fabric adds ``tokens · comm_per_token + comm_fixed`` to every step (docs/model.md §2.8).
Every function accepts scalars or numpy arrays elementwise.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from prefixbench.catalog.fabrics import FABRICS, FabricSpec
from prefixbench.catalog.formats import UNMODELLED
from prefixbench.catalog.specs import AcceleratorSpec, LinkSpec, ModelSpec
from prefixbench.errors import CatalogError

# The per-request costs a client sees on top of the steps (docs/model.md §2.14), both read
# from the two fit rows of BLIS's vLLM ground truth (Llama-2-7B, TP 1, one H100;
# tests/data/measured/README.md): client-side TTFT 13.9 ms for a 354-token prompt (70 new
# after a 284-token cached prefix) against a 6.698 ms prefill step, and 67.1 ms for a
# 2,048-token prompt against a 43.816 ms step. What the steps do not explain, 7.202 and
# 23.284 ms, is one line in the prompt's tokens: (23.284 − 7.202) / (2048 − 354) =
# 9.49 µs per prompt token (rounded to 9.5) and 7.202 − 354 × 0.0095 = 3.84 ms per request
# (rounded to 3.8). The per-token part does not shrink with TP (the held-out TP 2 and TP 4
# runs show the same ~15 ms at 2,048 tokens), so it is the serving path's, not the GPU's.
REQUEST_OVERHEAD_MS = 3.8
PROMPT_OVERHEAD_US = 9.5


# The per-operator roofline's constants, fitted on the FIT points of docs/validation.md
# only (tests/data/measured/, split column): Vidur's profiled linear layers (Llama-2-7B on
# H100 and A100, Llama-3-8B on A100 at 2–2,048 tokens; microsoft/vidur
# data/profiling/compute/*/mlp.csv) give the saturated GEMM fraction 0.68 and the half-
# saturation 96 tokens per device (least squares in log ratio, weights at MBU 0.7);
# InferSim/BLIS's FlashAttention kernels (H100, bf16) give attention 0.72 of the bf16 peak
# (geometric mean of the fit rows of at least 4,096 tokens) and the KV stream 0.88 of HBM
# bandwidth (fit rows of at least 256 MB per layer; FlashInfer reports decode attention
# at 85–90 % of H100 bandwidth, flashinfer.ai/2024/02/02/introduce-flashinfer.html).
GEMM_MFU = 0.68
GEMM_HALF_TOKENS = 96.0
ATTENTION_MFU = 0.72
KV_MBU = 0.88


class Efficiency(BaseModel):
    """Calibration knobs of the roofline. Defaults are fitted to public kernel measurements
    (docs/validation.md, fit set)."""

    model_config = ConfigDict(extra="forbid", defer_build=True, allow_inf_nan=False)

    mfu_prefill: float = Field(
        GEMM_MFU,
        ge=0.001,
        le=1,
        description="Fraction of the weight format's tensor peak a prefill (or recompute) "
        "step's GEMMs reach at many tokens (0.001 to 1).",
    )
    mfu_decode: float = Field(
        GEMM_MFU,
        ge=0.001,
        le=1,
        description="Fraction of the tensor peak a decode step's GEMMs reach at many tokens "
        "(0.001 to 1).",
    )
    gemm_half_tokens: float = Field(
        GEMM_HALF_TOKENS,
        ge=0,
        le=1e6,
        description="Tokens per device at which a GEMM reaches half its MFU: "
        "eff(T) = MFU · T / (T + this) (0 to 10⁶).",
    )
    mfu_attention: float = Field(
        ATTENTION_MFU,
        ge=0.001,
        le=1,
        description="Fraction of the bf16 tensor peak attention reaches (0.001 to 1).",
    )
    mbu: float = Field(
        0.7,
        ge=0.001,
        le=1,
        description="Fraction of HBM bandwidth reading the weights reaches (0.001 to 1).",
    )
    mbu_kv: float = Field(
        KV_MBU,
        ge=0.001,
        le=1,
        description="Fraction of HBM bandwidth streaming the KV cache reaches (0.001 to 1).",
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
    request_overhead_ms: float = Field(
        REQUEST_OVERHEAD_MS,
        ge=0,
        le=10_000,
        description="Fixed cost of one request outside any simulated step (HTTP/API server, "
        "tokenizer, P/D proxy, scheduler admission, detokenize and stream the first token), "
        "added to client-side TTFT and E2E, ms (0 to 10⁴; docs/model.md §2.14).",
    )
    prompt_overhead_us: float = Field(
        PROMPT_OVERHEAD_US,
        ge=0,
        le=10_000,
        description="Cost per prompt token outside any simulated step, cached or not (the "
        "serving path's work per token: tokenize, process and hash the prompt, ship it to the "
        "engine), added to client-side TTFT and E2E, µs (0 to 10⁴; docs/model.md §2.14).",
    )


def client_overhead_ms(eff: Efficiency, prompt_tokens):
    """What a client's TTFT (and E2E) adds to the simulated steps for a prompt of
    ``prompt_tokens`` (cached or not): the per-request cost plus the per-prompt-token cost of
    the serving path, ms (docs/model.md §2.14)."""
    return eff.request_overhead_ms + np.asarray(prompt_tokens, dtype=np.float64) * (
        eff.prompt_overhead_us / 1e3
    )


# ---------------------------------------------------------------- model arithmetic


def _kv_width(m: ModelSpec) -> float:
    """KV elements one token adds to one attention layer: K and V heads, or the MLA latent."""
    if m.is_mla:
        return m.kv_lora_rank + m.qk_rope_head_dim
    return 2 * m.kv_heads * m.head_dim


def kv_bytes_per_token(m: ModelSpec, context=None):
    """KV-cache bytes one token occupies: 2·layers·kv_heads·head_dim·bytes, or the MLA latent.

    Only softmax-attention layers keep KV; linear-attention layers (``linear_layers``) keep a
    fixed state instead (``state_bytes_per_sequence``). Without ``context`` a sliding-window
    layer counts in full, which is exact for sequences up to the window and an upper bound
    beyond it. With ``context`` (tokens in the sequence, scalar or array) the result is the
    average per token of a sequence that long: a windowed layer holds min(context, window)
    tokens (docs/model.md §2.2).
    """
    kv_layers = m.layers - m.linear_layers
    if m.is_mla:
        rate = int(round(kv_layers * (m.kv_lora_rank + m.qk_rope_head_dim) * m.kv_bytes))
    else:
        rate = int(round(2 * kv_layers * m.kv_heads * m.head_dim * m.kv_bytes))
    if context is None or not m.sliding_layers:
        return rate
    c = np.maximum(np.asarray(context, dtype=np.float64), 1.0)
    return kv_bytes(m, c) / c


def kv_bytes(m: ModelSpec, tokens):
    """KV bytes of a sequence of ``tokens`` tokens (a prefix, a prompt, an array of them).

    Windowed layers hold at most ``sliding_window`` tokens of each sequence.
    """
    t = np.asarray(tokens, dtype=np.float64)
    if not m.sliding_layers:
        return kv_bytes_per_token(m) * t
    windowed = m.sliding_layers * _kv_width(m) * m.kv_bytes
    full = kv_bytes_per_token(m) - windowed
    return full * t + windowed * np.minimum(t, m.sliding_window)


def state_bytes_per_sequence(m: ModelSpec) -> float:
    """Fixed recurrent state of the linear-attention layers, per sequence, at the KV dtype.

    MiniMax lightning attention keeps a head_dim × head_dim state per head and layer, whatever
    the context length. The engine does not charge it (docs/model.md §2.2).
    """
    return float(m.linear_layers * m.heads * m.head_dim * m.head_dim * m.kv_bytes)


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


def _linear_attention_params(m: ModelSpec) -> int:
    """One MiniMax lightning-attention layer: qkv_proj, output_gate, out_proj and a norm."""
    inner = m.heads * m.head_dim
    return 5 * m.hidden_size * inner + inner


def _mlp_params(m: ModelSpec) -> tuple[int, int, int]:
    """(dense-MLP params of all layers, expert params of all layers, active expert params)."""
    h = m.hidden_size
    dense_layer = 3 * h * m.intermediate_size
    if not m.is_moe:
        return m.layers * dense_layer, 0, 0
    moe_layers = m.layers - m.first_dense_layers
    expert = 3 * h * m.moe_intermediate_size
    shared = (
        3 * h * m.shared_expert_intermediate_size
        if m.shared_expert_intermediate_size
        else m.n_shared_experts * expert
    )
    dense = m.first_dense_layers * dense_layer + moe_layers * (
        shared + h * m.n_routed_experts  # shared experts + router
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
    attention = (m.layers - m.linear_layers) * _attention_params(m)
    if m.linear_layers:
        attention += m.linear_layers * _linear_attention_params(m)
    body = attention + dense_mlp + norms
    total = embed + head + body + experts
    return {
        "total": total,
        "active": embed + head + body + active_experts,
        "embedding": embed,
        "lm_head": embed if m.tied_embeddings else head,
        "experts": experts,
        "active_experts": active_experts,
        "body": body,
        "norms": norms,
        "router": (m.layers - m.first_dense_layers) * m.hidden_size * m.n_routed_experts,
    }


def _unquantized_params(p: dict[str, int]) -> int:
    """Weights a quantized checkpoint keeps at full width: embeddings, LM head, norms, router."""
    lm_head = p["total"] - p["embedding"] - p["body"] - p["experts"]  # 0 when tied
    return p["embedding"] + lm_head + p["norms"] + p["router"]


def _sized(m: ModelSpec) -> None:
    """Refuse to size weights stored in a format prefixbench does not model."""
    if m.weight_format.startswith(UNMODELLED):
        raise CatalogError(
            f"{m.name}: weight format {m.weight_format}",
            where=m.source or None,
            fix="set the format with --set model.weights=fp8|int8|int4 (model.weights)",
        )


def weight_bytes(m: ModelSpec) -> float:
    """Bytes of weights resident on an instance.

    A quantized model (``quant_bytes`` > 0) stores its linear layers at ``quant_bytes`` per
    weight (scales and zeros included) and the rest at ``weight_bytes`` (docs/catalog.md).
    """
    _sized(m)
    p = param_counts(m)
    if not m.quant_bytes:
        return p["total"] * m.weight_bytes
    full = _unquantized_params(p)
    return full * m.weight_bytes + (p["total"] - full) * m.quant_bytes


def weights_read_dense(m: ModelSpec) -> float:
    """Bytes a step reads of the resident weights, routed experts included in full: all of
    them except an untied input-embedding table, of which a step reads only the rows of its
    tokens (negligible; docs/model.md §2.7). A tied table is the LM head and is read whole."""
    if m.tied_embeddings:
        return weight_bytes(m)
    return weight_bytes(m) - param_counts(m)["embedding"] * m.weight_bytes


def expert_weight_bytes(m: ModelSpec) -> float:
    """Bytes of all routed experts (the part of the weights a step reads only partly)."""
    _sized(m)
    return param_counts(m)["experts"] * (m.quant_bytes or m.weight_bytes)


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
    # Linear-attention layers do a fixed amount of work per token (neglected, docs/model.md).
    return 2.0 * (m.layers - m.linear_layers) * m.heads * (qk + v)


def flops_per_token(m: ModelSpec, context=0):
    """FLOPs to produce one token attending to ``context`` earlier tokens (LM head included)."""
    return (
        linear_flops_per_token(m) + lm_head_flops(m) + attention_flops_coef(m) * np.asarray(context)
    )


def gemm_peak_tflops(m: ModelSpec, dev: AcceleratorSpec) -> float:
    """Dense tensor peak the model's GEMMs run at: FP8 or INT8 (W8A8) checkpoints at the
    device's FP8 or INT8 peak where it has one, everything else (bf16, fp16, W4A16 int4,
    which dequantises to bf16) at the bf16 peak (docs/model/cost-model.md)."""
    fmt = m.weight_format.split(" ")[0].lower() if m.quant_bytes else ""
    if fmt == "fp8" and dev.peak_fp8_tflops:
        return dev.peak_fp8_tflops
    if fmt == "int8" and dev.peak_int8_tflops:
        return dev.peak_int8_tflops
    return dev.peak_tflops


def gemm_constants(eff: Efficiency, dev: AcceleratorSpec) -> tuple[float, float, float]:
    """(prefill MFU, decode MFU, half-saturation tokens) of the GEMM efficiency curve on
    ``dev``: the accelerator's own measured constants where its spec carries them, else the
    H100-fitted defaults; a value the user set in ``eff`` (a scenario, calibrate) wins over
    both (docs/model/cost-model.md "Per-operator roofline")."""
    given = eff.model_fields_set

    def pick(field: str, own: float | None) -> float:
        return own if own is not None and field not in given else getattr(eff, field)

    return (
        pick("mfu_prefill", dev.gemm_mfu),
        pick("mfu_decode", dev.gemm_mfu),
        pick("gemm_half_tokens", dev.gemm_half_tokens),
    )


def weight_mbu(eff: Efficiency, dev: AcceleratorSpec) -> float:
    """Fraction of HBM bandwidth the weights stream at: the accelerator's own measured
    ``gemm_mbu`` where its spec carries one, else ``eff.mbu``; a value the user set in
    ``eff`` wins (docs/model/cost-model.md "GEMM kernel fixed time")."""
    if dev.gemm_mbu is not None and "mbu" not in eff.model_fields_set:
        return dev.gemm_mbu
    return eff.mbu


def gemm_kernels(m: ModelSpec) -> int:
    """GEMM kernels one step launches: four per layer (vLLM's fused QKV projection, the O
    projection, the fused gate-up projection, the down projection) plus the LM head. An
    approximation for MoE and MLA layers, which launch more (docs/model/cost-model.md)."""
    return 4 * m.layers + 1


def ridge_point(dev: AcceleratorSpec) -> float:
    """FLOPs per byte at which the roofline turns from memory- to compute-bound."""
    return dev.peak_tflops * 1e12 / (dev.hbm_gbps * 1e9)


# ---------------------------------------------------------------- parallelism (§2.8)

ACT_BYTES = 2.0  # activations travel in bf16/fp16 (vLLM all-reduces in the model dtype)


@dataclass(frozen=True)
class Parallelism:
    """How an instance's devices split the model: tp · pp · ep divides the device count,
    the quotient is data-parallel replicas of the TP×PP group (ideal). Default: the
    ``ideal`` fabric, i.e. no communication cost (bit-identical to ideal TP)."""

    tp: int
    pp: int = 1
    ep: int = 1
    fabric: FabricSpec = FABRICS["ideal"]


def allreduce_time(fabric: FabricSpec, tp: int, nbytes):
    """One TP all-reduce of ``nbytes`` over ``tp`` devices of ``fabric``: α + bytes / β
    measured, else the ring (docs/model.md §2.8); 0 at tp 1."""
    if tp <= 1:
        return np.zeros_like(np.asarray(nbytes, dtype=np.float64))
    alpha, per_byte = fabric.allreduce_terms(tp)
    return alpha + np.asarray(nbytes, dtype=np.float64) * per_byte


def comm_coeffs(m: ModelSpec, devices: int, par: Parallelism) -> tuple[float, float]:
    """(seconds per step token, seconds per step) of TP, PP and EP traffic (docs/model.md §2.8).

    A step of T tokens: each TP group carries T / r of them (r = devices / (tp·pp) groups);
    per layer two all-reduces (attention out, MLP out) of (T/r)·hidden·2 bytes, each
    α + bytes / β (FabricSpec.allreduce_terms: measured, or the ring's 2(tp−1)·latency
    + 2(tp−1)/tp · bytes / bandwidth); (pp−1) stage boundaries of (T/r)·hidden·2
    bytes, each bytes / bw + latency; per MoE layer an all-to-all dispatch and a combine of
    (T·pp/devices)·k·hidden·2 bytes per device, each (ep−1)/ep · bytes / bw + latency.
    Each term is added only when its degree is above 1, so a 1-device instance pays exactly 0.
    """
    bw, lat = par.fabric.bytes_per_s, par.fabric.latency_s
    act = m.hidden_size * ACT_BYTES  # bytes of one token's hidden state
    groups = devices // (par.tp * par.pp)
    per_token, fixed = 0.0, 0.0
    if par.tp > 1:  # two all-reduces per layer, each α + bytes / β (allreduce_terms)
        alpha, per_byte = par.fabric.allreduce_terms(par.tp)
        per_token += 2.0 * m.layers * per_byte * act / groups
        fixed += 2.0 * m.layers * alpha
    if par.pp > 1:
        per_token += (par.pp - 1) * act / bw / groups
        fixed += (par.pp - 1) * lat
    if par.ep > 1 and m.is_moe:
        moe_layers = m.layers - m.first_dense_layers
        share = (par.ep - 1) / par.ep
        per_device = par.pp / devices  # tokens per device, per step token
        per_token += 2.0 * moe_layers * share * per_device * m.experts_per_token * act / bw
        fixed += 2.0 * moe_layers * lat
    return per_token, fixed


# ---------------------------------------------------------------- instance step times


@dataclass(frozen=True)
class InstanceCost:
    """Precomputed roofline coefficients of one model on one instance (floats, seconds)."""

    flops_rate_prefill: float  # saturated GEMM FLOP/s for prefill and recompute
    flops_rate_decode: float  # saturated GEMM FLOP/s for decode
    byte_rate: float  # effective bytes/s reading weights
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
    comm_per_token: float = 0.0  # TP/PP/EP fabric seconds per token of a step (§2.8)
    comm_fixed: float = 0.0  # TP/PP/EP fabric latency seconds per step
    # --- per-operator roofline (docs/model/cost-model.md); the defaults price attention
    # like the GEMMs' saturated decode rate would not, so build() always sets them
    attn_rate: float = 1e30  # attention FLOP/s (bf16 peak · mfu_attention)
    kv_rate: float = 1e30  # bytes/s streaming KV (HBM · mbu_kv)
    gemm_half: float = 0.0  # step tokens at which GEMM efficiency is half (T½ · groups)
    gemm_kernel: float = 0.0  # fixed seconds of one GEMM kernel (prologue, fill, epilogue)
    # --- power (docs/model.md §2.11; power.py fills them, defaults: not modelled)
    clock: float = 1.0  # core clock under the power cap, fraction of nominal (rates include it)
    j_per_flop: float = 0.0  # dynamic energy of one FLOP at nominal clock and voltage, J
    j_per_byte: float = 0.0  # energy of one byte to or from device memory, J
    idle_w: float = 0.0  # the instance's idle power (all its devices), W
    dvfs: float = 0.0  # 1: memory-bound steps run at the lowest clock that keeps them so
    volt_floor: float = 0.5  # clock fraction below which the voltage no longer drops
    # --- speculative decoding (docs/model.md §2.13; defaults: none). A decode
    # iteration is then one token per sequence of the expected speculative iteration:
    # γ draft steps plus one verify over γ+1 tokens, divided by the expected tokens τ.
    spec_tokens: float = 1.0  # γ + 1: tokens per sequence the target verifies per iteration
    spec_tau: float = 1.0  # τ: expected tokens per sequence per speculative iteration
    draft_weights: float = 0.0  # γ · draft weight bytes read per speculative iteration
    draft_kv_bpt: float = 0.0  # γ · draft KV bytes per context token per iteration
    draft_flops: float = 0.0  # γ · draft FLOPs per sequence (layers + LM head)
    draft_attn: float = 0.0  # γ · draft attention FLOPs per (query, key) pair
    # --- ced (docs/model.md §2.12; defaults: none). A causal encoder-decoder's
    # bounded replay: the last min(W, prompt) tokens of every prompt run the decoder layers.
    # On a prefill cost the prefill step does it (FLOPs per replayed token through the
    # decoder layers, attention FLOPs per (query, key) pair over them, fabric s per token);
    # on a decode cost only ced_window is set: the decode instance replays through the whole
    # model as a chunk in its iterations (engine/ced.py) before the request joins.
    ced_window: float = 0.0  # W, replay tokens per prompt (0: no replay here)
    ced_lin: float = 0.0
    ced_attn: float = 0.0
    ced_comm: float = 0.0
    # On a decode cost, a CED model's prefix recomputed here runs what a prompt token runs
    # (the encoder and the decoder's K/V projections) and attends over the encoder layers,
    # reading only their KV of the resident tokens (0: not CED, the full-depth terms above)
    ced_prompt_lin: float = 0.0  # FLOPs per recomputed token (no logits)
    ced_prompt_attn: float = 0.0  # attention FLOPs per (query, key) pair
    ced_prompt_kv: float = 0.0  # KV bytes read per attended token (the encoder layers')

    @classmethod
    def build(
        cls,
        m: ModelSpec,
        dev: AcceleratorSpec,
        devices: int,
        eff: Efficiency,
        par: Parallelism | None = None,
    ) -> InstanceCost:
        """``par`` None: ideal tensor parallelism over ``devices`` (no communication)."""
        expert_bytes = expert_weight_bytes(m)
        par = par or Parallelism(tp=devices)
        working = devices // par.pp  # one pipeline stage works at a time (§2.8)
        comm_per_token, comm_fixed = comm_coeffs(m, devices, par)
        peak = gemm_peak_tflops(m, dev) * 1e12 * working
        mfu_prefill, mfu_decode, half = gemm_constants(eff, dev)
        kernel = (dev.gemm_kernel_us or 0.0) / 1e6
        fixed = gemm_kernels(m) * kernel  # every step's GEMM kernels' fixed time
        return cls(
            flops_rate_prefill=peak * mfu_prefill,
            flops_rate_decode=peak * mfu_decode,
            byte_rate=dev.hbm_gbps * 1e9 * working * weight_mbu(eff, dev),
            attn_rate=dev.peak_tflops * 1e12 * working * eff.mfu_attention,
            kv_rate=dev.hbm_gbps * 1e9 * working * eff.mbu_kv,
            gemm_half=half * (devices // (par.tp * par.pp)),
            gemm_kernel=kernel,
            prefill_overhead=eff.prefill_overhead_ms / 1e3 + fixed,
            decode_overhead=eff.decode_overhead_ms / 1e3 + fixed,
            linear_flops=linear_flops_per_token(m),
            lm_head_flops=lm_head_flops(m),
            attn_coef=attention_flops_coef(m),
            kv_bpt=float(kv_bytes_per_token(m)),
            weights=weights_read_dense(m) - expert_bytes,
            expert_weights=expert_bytes,
            expert_frac=(m.experts_per_token / m.n_routed_experts) if m.is_moe else 0.0,
            memory_bytes=dev.memory_gb * 1e9 * devices,
            comm_per_token=comm_per_token,
            comm_fixed=comm_fixed,
        )

    def comm_time(self, tokens):
        """Fabric time of a step of ``tokens`` tokens (exactly 0.0 without communication)."""
        return np.asarray(tokens, dtype=np.float64) * self.comm_per_token + self.comm_fixed

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
        if self.ced_window:  # --- ced: the replay window through the decoder layers
            flops = flops + self.ced_replay_flops(n + c)
        return flops, kv_io

    def prefill_split(self, new_tokens, cached_tokens):
        """(GEMM FLOPs, attention FLOPs, KV bytes) of prefilling one request's
        ``new_tokens`` after ``cached_tokens``: the operator groups of operator_time. A CED
        replay window's FLOPs count as GEMM work (docs/model/cost-model.md)."""
        n = np.asarray(new_tokens, dtype=np.float64)
        c = np.asarray(cached_tokens, dtype=np.float64)
        gemm = n * self.linear_flops + self.lm_head_flops
        attn = self.attn_coef * (n * c + n * (n + 1.0) / 2.0)
        if self.ced_window:  # --- ced: the replay window through the decoder layers
            gemm = gemm + self.ced_replay_flops(n + c)
        return gemm, attn, self.kv_bpt * (n + c)

    def ced_replay_tokens(self, prompt):
        """--- ced: tokens of each prompt the prefill step replays (min(W, prompt))."""
        return np.minimum(self.ced_window, np.asarray(prompt, dtype=np.float64))

    def ced_replay_flops(self, prompt):
        """--- ced: the last w = min(W, s) tokens of an s-token prompt through the decoder
        layers, attending causally to the whole prompt (w·(s − w) + w(w + 1)/2 pairs)."""
        s = np.asarray(prompt, dtype=np.float64)
        w = self.ced_replay_tokens(s)
        return w * self.ced_lin + self.ced_attn * (w * (s - w) + w * (w + 1.0) / 2.0)


def gemm_time(cost: InstanceCost, flops, tokens, rate: float):
    """Compute time of a step's GEMMs: FLOPs at eff(T) = rate · T / (T + T½) for T step
    tokens, written flops · (T + T½) / (T · rate); 0 for a step of no tokens."""
    t = np.asarray(tokens, dtype=np.float64)
    safe = np.where(t > 0.0, t, 1.0)
    return np.where(t > 0.0, flops * (t + cost.gemm_half) / (safe * rate), 0.0)


def gemm_operator_time(cost: InstanceCost, flops, tokens, weight_bytes, rate: float):
    """One GEMM operator (or several of the same intensity) over ``tokens`` tokens:
    max(FLOPs at eff(T), its ``weight_bytes`` at the weights' bandwidth)."""
    return np.maximum(gemm_time(cost, flops, tokens, rate), weight_bytes / cost.byte_rate)


def gemm_kernel_time(cost: InstanceCost, flops, tokens, weight_bytes, rate: float):
    """ONE GEMM kernel: its fixed time (prologue, pipeline fill, epilogue; 0 where the
    accelerator has no measured one) plus gemm_operator_time. A step's kernels' fixed
    times sit in its overhead (InstanceCost.build, gemm_kernels)."""
    return cost.gemm_kernel + gemm_operator_time(cost, flops, tokens, weight_bytes, rate)


def attention_time(cost: InstanceCost, flops, kv_io):
    """The attention operator: max(FLOPs at the attention rate, KV bytes at the KV
    stream's bandwidth)."""
    return np.maximum(flops / cost.attn_rate, kv_io / cost.kv_rate)


def operator_time(cost: InstanceCost, gemm_flops, tokens, rate: float, attn_flops, kv_io):
    """Σ over the step's operators of max(compute, memory) (docs/model/cost-model.md):
    the GEMMs (FLOPs at eff(T), the weights ``tokens`` touch at the weights' bandwidth) plus
    attention (its FLOPs at the attention rate, ``kv_io`` KV bytes at the KV bandwidth)."""
    t_gemm = gemm_operator_time(cost, gemm_flops, tokens, cost.weights_read(tokens), rate)
    return t_gemm + attention_time(cost, attn_flops, kv_io)


def prefill_time(cost: InstanceCost, new_tokens, cached_tokens):
    """Time of ONE prefill step over a batch given as arrays of per-request tokens.

    Cached tokens are not recomputed but are attended to (and read).
    """
    n = np.atleast_1d(np.asarray(new_tokens, dtype=np.float64))
    return float(prefill_times(cost, n, cached_tokens, np.zeros(1, dtype=np.int64))[0])


def prefill_times(cost: InstanceCost, new_tokens, cached_tokens, starts):
    """Times of consecutive prefill steps: requests ``starts[k]`` up to the next start (or
    the end) form step k; per-request arrays as in prefill_time."""
    n = np.atleast_1d(np.asarray(new_tokens, dtype=np.float64))
    c = np.atleast_1d(np.asarray(cached_tokens, dtype=np.float64))
    gemm, attn, kv_io = cost.prefill_split(n, c)
    gemm = np.add.reduceat(np.broadcast_to(gemm, n.shape), starts)
    attn = np.add.reduceat(np.broadcast_to(attn, n.shape), starts)
    kv_io = np.add.reduceat(kv_io, starts)
    tokens = np.add.reduceat(n, starts)
    t = operator_time(cost, gemm, tokens, cost.flops_rate_prefill, attn, kv_io)
    comm = cost.comm_time(tokens)
    if cost.ced_window:  # --- ced: the replay window's decoder-layer traffic
        comm = comm + cost.ced_comm * np.add.reduceat(cost.ced_replay_tokens(n + c), starts)
    return t + cost.prefill_overhead + comm


def recompute_time(cost: InstanceCost, prefix_tokens):
    """Time for a decode instance to rebuild the KV of ``prefix_tokens`` (a prefill, no
    logits; a CED model's prompt pass, §2.12)."""
    n = np.asarray(prefix_tokens, dtype=np.float64)
    lin, attn = recompute_rates(cost)
    t = operator_time(
        cost, n * lin, n, cost.flops_rate_prefill, attn * n * (n + 1.0) / 2.0, cost.kv_bpt * n
    )
    return np.where(n > 0, t + cost.prefill_overhead + cost.comm_time(n), 0.0)


def recompute_rates(cost: InstanceCost) -> tuple[float, float]:
    """(FLOPs per recomputed token, attention FLOPs per pair) of a decode-side recompute:
    the full depth, or a CED model's prompt pass."""
    if cost.ced_prompt_lin:
        return cost.ced_prompt_lin, cost.ced_prompt_attn
    return cost.linear_flops, cost.attn_coef


def decode_iteration_time(cost: InstanceCost, batch, context):
    """Time of one decode iteration: ``batch`` sequences attending to ``context`` tokens in all."""
    b = np.asarray(batch, dtype=np.float64)
    ctx = np.asarray(context, dtype=np.float64)
    if cost.spec_tau != 1.0 or cost.spec_tokens != 1.0:  # --- speculative
        return speculative_iteration_time(cost, b, ctx)
    gemm = b * (cost.linear_flops + cost.lm_head_flops)
    t = operator_time(
        cost, gemm, b, cost.flops_rate_decode, cost.attn_coef * ctx, cost.kv_bpt * ctx
    )
    return t + cost.decode_overhead + cost.comm_time(b)


def link_rate(link: LinkSpec, nics: int = 1) -> float:
    """Bytes per second a KV transfer reaches over ``nics`` NICs (or channels) of ``link``:
    min(η · NICs · line rate, the instance's ceiling) (docs/model.md "KV transfer cost")."""
    rate = link.efficiency * nics * link.bandwidth_gbps * 1e9
    if link.ceiling_gbps is not None:
        rate = min(rate, link.ceiling_gbps * 1e9)
    return rate


def transfer_fixed(link: LinkSpec) -> float:
    """Seconds one transfer pays whatever its size: the wire latency plus the connector's
    per-transfer setup (docs/model.md "KV transfer cost")."""
    return (link.latency_us + link.setup_us) / 1e6


def transfer_time(link: LinkSpec, nbytes, nics: int = 1):
    """Unqueued time to move ``nbytes`` in one transfer over ``nics`` NICs of ``link``:
    latency + setup + bytes / min(η · NICs · line rate, ceiling)."""
    b = np.asarray(nbytes, dtype=np.float64)
    return transfer_fixed(link) + b / link_rate(link, nics)


# ---------------------------------------------------------------- closed-form decode series


def decode_series_coeffs(cost: InstanceCost, batch: int, context0: float) -> tuple[float, ...]:
    """Iteration j of a fixed batch takes max(a1 + s1·j, a2 + s2·j) + overhead.

    The context grows by ``batch`` tokens per iteration, so only attention depends on j:
    (a1, s1) and (a2, s2) are its compute and KV-stream terms, linear in j. The GEMM
    operator's max(compute, memory) is constant for the batch and sits in the overhead
    with the fixed cost and the batch's fabric time (§2.8). Returns (a1, s1, a2, s2, o).
    """
    if cost.spec_tau != 1.0 or cost.spec_tokens != 1.0:  # --- speculative
        return speculative_series_coeffs(cost, batch, context0)
    ar, kr = cost.attn_rate, cost.kv_rate
    a1 = cost.attn_coef * context0 / ar
    s1 = cost.attn_coef * batch / ar
    a2 = cost.kv_bpt * context0 / kr
    s2 = cost.kv_bpt * batch / kr
    return (
        a1,
        s1,
        a2,
        s2,
        decode_fixed(cost, batch, 1.0)
        + cost.decode_overhead
        + (batch * cost.comm_per_token + cost.comm_fixed),
    )


def decode_fixed(cost: InstanceCost, batch: int, g: float) -> float:
    """The GEMM operator of a decode iteration verifying ``g`` tokens per sequence:
    max(GEMM FLOPs at eff(batch · g), weights read / weights' bandwidth)."""
    tokens = float(batch * g)
    gemm = tokens * (cost.linear_flops + cost.lm_head_flops)
    t_c = gemm * (tokens + cost.gemm_half) / (tokens * cost.flops_rate_decode)
    t_m = float(cost.weights_read(batch * g)) / cost.byte_rate
    return t_c if t_c > t_m else t_m


# ---------------------------------------------------------------- asymmetric models (CED)
# docs/model.md §2.12: a causal encoder-decoder (seed 003, "Asymmetric Models")
# runs a prompt through its first ``encoder_layers`` layers only and projects every
# decoder layer's K and V from the last encoder state; a generated token runs all layers.


def check_ced(m: ModelSpec, encoder_layers: int) -> None:
    """Refuse a split the model cannot take: CED is modelled for dense, uniform stacks."""
    from prefixbench.errors import ScenarioError

    if m.is_moe or m.is_mla or m.linear_layers or m.sliding_layers:
        raise ScenarioError(
            f"{m.name}: ced_encoder_layers needs a dense model with identical layers (no MoE, "
            "MLA, linear or windowed attention)",
            where="model.ced_encoder_layers",
            fix="pick a dense model (e.g. llama-3.1-70b) or drop ced_encoder_layers",
        )
    if not 1 <= encoder_layers < m.layers:
        raise ScenarioError(
            f"ced_encoder_layers={encoder_layers} must be between 1 and {m.layers - 1} "
            f"({m.name} has {m.layers} layers)",
            where="model.ced_encoder_layers",
            fix=f"set it to, e.g., {m.layers // 2}",
        )


def ced_kv_projection_params(m: ModelSpec, encoder_layers: int) -> int:
    """k_proj + v_proj (and their biases) of the decoder layers: what projects their KV."""
    kv_out = m.kv_heads * m.head_dim
    per_layer = 2 * m.hidden_size * kv_out + (2 * kv_out if m.qkv_bias else 0)
    return (m.layers - encoder_layers) * per_layer


def ced_prompt_rates(m: ModelSpec, encoder_layers: int) -> tuple[float, float]:
    """(Linear FLOPs per prompt token, attention FLOPs per (query, key) pair) of a CED
    model's prompt pass: the encoder layers plus the decoder layers' K/V projections, no
    logits."""
    enc = m.model_copy(update={"layers": encoder_layers})
    proj = ced_kv_projection_params(m, encoder_layers)
    return linear_flops_per_token(enc) + 2.0 * proj, attention_flops_coef(enc)


def ced_decode_cost(cost: InstanceCost, m: ModelSpec, encoder_layers: int) -> InstanceCost:
    """A decode instance's cost for a CED model: a prefix it recomputes runs the prompt
    pass (ced_prompt_rates) and reads the encoder layers' KV of what it attends to."""
    from dataclasses import replace

    check_ced(m, encoder_layers)
    lin, attn = ced_prompt_rates(m, encoder_layers)
    kv = cost.kv_bpt * encoder_layers / m.layers  # identical layers: KV per layer alike
    return replace(cost, ced_prompt_lin=lin, ced_prompt_attn=attn, ced_prompt_kv=kv)


def ced_prefill_cost(
    cost: InstanceCost,
    m: ModelSpec,
    encoder_layers: int,
    devices: int,
    par: Parallelism | None,
    replay_on: str = "prefill",
    window: int = 0,
) -> InstanceCost:
    """A prefill instance's cost for a CED model: per token the encoder layers plus the
    decoder layers' K/V projections, attention over the encoder layers, TP/PP traffic of
    the encoder layers. KV bytes per token are the full model's (every layer's KV goes to
    decode). ``replay_on`` prefill: the last ``window`` tokens of each prompt also run the
    decoder layers here (ced_* fields), so a step reads the whole model's weights.
    ``replay_on`` decode: encoder-only, no LM head; a step reads the encoder and the
    projections (the embedding table only by the rows of its tokens, §2.7)."""
    from dataclasses import replace

    check_ced(m, encoder_layers)
    enc = m.model_copy(update={"layers": encoder_layers})
    proj = ced_kv_projection_params(m, encoder_layers)
    par = par or Parallelism(tp=devices)
    per_token, fixed = comm_coeffs(enc, devices, par)
    lin, attn = ced_prompt_rates(m, encoder_layers)
    common = {
        "linear_flops": lin,
        "attn_coef": attn,
        "comm_per_token": per_token,
        "comm_fixed": fixed,
    }
    if replay_on == "decode":
        head = param_counts(enc)["lm_head"] * m.weight_bytes  # tied: the embedding table
        return replace(
            cost,
            **common,
            lm_head_flops=0.0,
            weights=weights_read_dense(enc) - head + proj * (m.quant_bytes or m.weight_bytes),
        )
    full_comm, full_fixed = comm_coeffs(m, devices, par)  # every step replays some tokens
    common["comm_fixed"] = full_fixed
    return replace(
        cost,
        **common,
        weights=weights_read_dense(m),
        ced_window=float(window),
        ced_lin=linear_flops_per_token(m) - linear_flops_per_token(enc),
        ced_attn=attention_flops_coef(m) - attention_flops_coef(enc),
        ced_comm=full_comm - per_token,
    )


def ced_prefill_weight_bytes(m: ModelSpec, encoder_layers: int) -> float:
    """Weights a prefill instance holds when the replay runs on decode: the input embedding,
    the encoder layers (and their final norm) and the decoder layers' K/V projections; no
    decoder layers, no LM head."""
    enc = m.model_copy(update={"layers": encoder_layers})
    untied_head = 0 if m.tied_embeddings else param_counts(enc)["lm_head"]
    proj = ced_kv_projection_params(m, encoder_layers)
    head = untied_head * m.weight_bytes
    return weight_bytes(enc) - head + proj * (m.quant_bytes or m.weight_bytes)


# ---------------------------------------------------------------- speculative decoding
# docs/model.md §2.13. A draft (a catalog model, or the target's own MTP layers)
# proposes γ tokens per sequence, the target verifies all γ+1 in one pass; with
# acceptance rate α per token the expected tokens per iteration are
# τ = (1 − α^(γ+1)) / (1 − α) (Leviathan et al., "Fast Inference from Transformers via
# Speculative Decoding", ICML 2023, eq. 1). The engine uses the expected value
# (deterministic): every sequence emits τ tokens per iteration, priced as one token per
# sequence at 1/τ of the iteration.


def expected_tokens(gamma: int, alpha: float) -> float:
    """τ = (1 − α^(γ+1)) / (1 − α); γ + 1 when every draft token is accepted."""
    if alpha >= 1.0:
        return float(gamma + 1)
    return (1.0 - alpha ** (gamma + 1)) / (1.0 - alpha)


def speculative_cost(
    cost: InstanceCost, draft: ModelSpec, gamma: int, alpha: float
) -> InstanceCost:
    """``cost`` (a decode instance's) with a draft of γ steps per iteration: the draft's
    weights and KV are read once per step (memory-bound: check_draft_bound), its FLOPs
    counted for the utilisation and energy figures."""
    from dataclasses import replace

    return replace(
        cost,
        spec_tokens=float(gamma + 1),
        spec_tau=expected_tokens(gamma, alpha),
        draft_weights=gamma * weights_read_dense(draft),
        draft_kv_bpt=gamma * float(kv_bytes_per_token(draft)),
        draft_flops=gamma * (linear_flops_per_token(draft) + lm_head_flops(draft)),
        draft_attn=gamma * attention_flops_coef(draft),
    )


def check_draft_bound(cost: InstanceCost, max_batch: int) -> None:
    """The model prices a draft step memory-bound: refuse a draft whose step would be
    compute-bound at the largest batch (its FLOPs per byte past the device's ridge)."""
    from prefixbench.errors import ScenarioError

    if cost.draft_weights == 0.0:
        return
    compute = max_batch * cost.draft_flops / cost.flops_rate_decode
    memory = cost.draft_weights / cost.byte_rate
    attn = cost.draft_attn / cost.flops_rate_decode
    if compute > memory or attn > cost.draft_kv_bpt / cost.byte_rate:
        raise ScenarioError(
            f"the draft's steps would be compute-bound at batch {max_batch}, which the "
            "speculative model does not price",
            where="cluster.decode.speculative",
            fix="use a smaller draft, or lower cluster.max_decode_batch",
        )


def speculative_iteration_time(cost: InstanceCost, b, ctx):
    """Time per token per sequence of a speculative iteration (docs/model.md §2.13):
    [the verify pass's operators (operator_time) + draft weights / weights' bandwidth
    + draft KV / KV bandwidth + (γ+1) overheads + fabric of the verify pass] / τ."""
    g, tau = cost.spec_tokens, cost.spec_tau
    vgemm = b * g * (cost.linear_flops + cost.lm_head_flops)
    verify = operator_time(
        cost, vgemm, b * g, cost.flops_rate_decode, cost.attn_coef * g * ctx, cost.kv_bpt * ctx
    )
    draft = cost.draft_weights / cost.byte_rate + cost.draft_kv_bpt * ctx / cost.kv_rate
    return (verify + draft + g * cost.decode_overhead + cost.comm_time(b * g)) / tau


def speculative_series_coeffs(cost: InstanceCost, batch: int, context0: float):
    """decode_series_coeffs of a speculative decode instance (engine.series.coeffs)."""
    g, tau = cost.spec_tokens, cost.spec_tau
    ar, kr, br = cost.attn_rate, cost.kv_rate, cost.byte_rate
    dkv = cost.draft_kv_bpt / kr
    a1 = (cost.attn_coef * g * context0 / ar + dkv * context0) / tau
    s1 = (cost.attn_coef * g * batch / ar + dkv * batch) / tau
    a2 = (cost.kv_bpt * context0 / kr + dkv * context0) / tau
    s2 = (cost.kv_bpt * batch / kr + dkv * batch) / tau
    o = (
        decode_fixed(cost, batch, g)
        + cost.decode_overhead * g
        + float(cost.comm_time(batch * g))
        + cost.draft_weights / br
    ) / tau
    return a1, s1, a2, s2, o
