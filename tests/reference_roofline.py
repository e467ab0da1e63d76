"""The reference simulator's own roofline, written from docs/model.md §2 and §3.1.

It reads only raw numbers: the model's config.json shape (catalog ``ModelSpec`` fields:
layers, hidden size, heads, KV heads, head dim, MLP width, vocabulary, MoE and MLA widths,
byte widths), the accelerator's datasheet figures (``AcceleratorSpec``: peak FLOP/s, HBM
bandwidth, memory), the device count and the scenario's efficiency numbers. Nothing is
imported from the product's cost model or engine, and the arithmetic is laid out per HF
module (q_proj, k_proj, ..., down_proj) rather than per formula, so that a wrong coefficient
in the product shows up as a disagreement with the reference simulator.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace


def _module_params(m) -> dict[str, float]:
    """Parameters of one model by module, named as in Hugging Face checkpoints.

    Returns totals over all layers: ``attention`` (projections and their biases), ``norms``
    (two RMSNorms per layer, the MLA latent norms, the final norm), ``dense_mlp`` (gated MLPs
    of dense layers, and MoE layers' shared experts and router), ``routed`` (all routed
    experts), ``active_routed`` (the routed experts one token uses), ``embed``, ``lm_head``.
    """
    h, nh = m.hidden_size, m.heads
    per_layer_attn = 0.0
    per_layer_norms = 2.0 * h  # input_layernorm + post_attention_layernorm
    if m.kv_lora_rank > 0:  # DeepSeek-V2 multi-head latent attention
        q_head = m.qk_nope_head_dim + m.qk_rope_head_dim
        if m.q_lora_rank > 0:
            q_a_proj = h * m.q_lora_rank
            q_b_proj = m.q_lora_rank * nh * q_head
            per_layer_attn += q_a_proj + q_b_proj
            per_layer_norms += m.q_lora_rank  # q_a_layernorm
        else:
            per_layer_attn += h * nh * q_head  # q_proj
        kv_a_proj_with_mqa = h * (m.kv_lora_rank + m.qk_rope_head_dim)
        kv_b_proj = m.kv_lora_rank * nh * (m.qk_nope_head_dim + m.v_head_dim)
        o_proj = nh * m.v_head_dim * h
        per_layer_attn += kv_a_proj_with_mqa + kv_b_proj + o_proj
        per_layer_norms += m.kv_lora_rank  # kv_a_layernorm
    else:
        q_out, kv_out = nh * m.head_dim, m.kv_heads * m.head_dim
        q_proj, k_proj, v_proj = h * q_out, h * kv_out, h * kv_out
        o_proj = q_out * h
        biases = (q_out + 2 * kv_out) if m.qkv_bias else 0
        per_layer_attn += q_proj + k_proj + v_proj + o_proj + biases

    def gated_mlp(width: int) -> float:  # gate_proj + up_proj + down_proj
        return float(h * width + h * width + width * h)

    if m.n_routed_experts > 0:
        moe_layers = m.layers - m.first_dense_layers
        expert = gated_mlp(m.moe_intermediate_size)
        router = h * m.n_routed_experts  # mlp.gate
        dense_mlp = m.first_dense_layers * gated_mlp(m.intermediate_size) + moe_layers * (
            m.n_shared_experts * expert + router
        )
        routed = moe_layers * m.n_routed_experts * expert
        active_routed = moe_layers * m.experts_per_token * expert
    else:
        dense_mlp = m.layers * gated_mlp(m.intermediate_size)
        routed = active_routed = 0.0
    embed = float(m.vocab_size * h)
    return {
        "attention": m.layers * per_layer_attn,
        "norms": m.layers * per_layer_norms + h,  # + model.norm
        "dense_mlp": float(dense_mlp),
        "routed": float(routed),
        "active_routed": float(active_routed),
        "embed": embed,
        "lm_head": 0.0 if m.tied_embeddings else embed,
    }


def kv_bytes_per_token(m) -> float:
    """docs/model.md §2.2: K and V of every layer, or the MLA latent plus its RoPE key."""
    if m.kv_lora_rank > 0:
        return m.layers * (m.kv_lora_rank + m.qk_rope_head_dim) * m.kv_bytes
    return m.layers * (m.kv_heads * m.head_dim + m.kv_heads * m.head_dim) * m.kv_bytes


def weights_bytes(m) -> float:
    """All resident weights (every expert included), bytes."""
    p = _module_params(m)
    return sum(v for k, v in p.items() if k != "active_routed") * m.weight_bytes


@dataclass(frozen=True)
class Efficiency:
    """The scenario's efficiency block as plain numbers (fractions; overheads in ms)."""

    mfu_prefill: float
    mfu_decode: float
    mbu: float
    prefill_overhead_ms: float
    decode_overhead_ms: float
    # per-operator roofline: GEMM half-saturation (tokens per device), attention's share
    # of the bf16 peak, the KV stream's share of HBM bandwidth
    gemm_half_tokens: float = 0.0
    mfu_attention: float = 1.0
    mbu_kv: float = 1.0
    given: frozenset = frozenset()  # fields the scenario set: an accelerator's own yield

    @classmethod
    def of(cls, e) -> Efficiency:
        return cls(
            e.mfu_prefill, e.mfu_decode, e.mbu, e.prefill_overhead_ms, e.decode_overhead_ms,
            e.gemm_half_tokens, e.mfu_attention, e.mbu_kv, frozenset(e.model_fields_set),
        )  # fmt: skip

    def on(self, accelerator, layers: int) -> Efficiency:
        """This block on ``accelerator``: its measured GEMM curve (gemm_mfu for prefill and
        decode, gemm_half_tokens) and weights' MBU (gemm_mbu) unless the scenario set them,
        and its GEMM kernels' fixed time (four per layer plus the LM head, gemm_kernel_us
        each) in every step's overhead (docs/model/cost-model.md "GEMM kernel fixed time")."""
        own = {
            "mfu_prefill": getattr(accelerator, "gemm_mfu", None),
            "mfu_decode": getattr(accelerator, "gemm_mfu", None),
            "gemm_half_tokens": getattr(accelerator, "gemm_half_tokens", None),
            "mbu": getattr(accelerator, "gemm_mbu", None),
        }
        fixed_ms = (4 * layers + 1) * (getattr(accelerator, "gemm_kernel_us", None) or 0.0) / 1e3
        return replace(
            self,
            **{k: v for k, v in own.items() if v is not None and k not in self.given},
            prefill_overhead_ms=self.prefill_overhead_ms + fixed_ms,
            decode_overhead_ms=self.decode_overhead_ms + fixed_ms,
        )


@dataclass(frozen=True)
class Split:
    """docs/model.md §2.8: how the instance's devices split the model, and the scale-up
    fabric's raw numbers (GB/s per device and direction, µs per ring step). The default is
    ideal tensor parallelism: no fabric cost at all."""

    tp: int | None = None  # None: devices / (pp·ep)
    pp: int = 1
    ep: int = 1
    fabric_gbps: float = math.inf
    fabric_us: float = 0.0
    # measured TP all-reduce (α µs, message GB/s); None: the ring model from the two above
    allreduce_alpha_us: float | None = None
    allreduce_gbps: float | None = None


def cap_clock(accelerator, eff: Efficiency, cap_w: float | None) -> float:
    """docs/model.md §2.11: the core clock (fraction of nominal) at which one device whose
    SMs and HBM are both fully busy draws ``cap_w``: idle + memory power (pJ/bit at the
    effective bandwidth) + compute power (TDP − idle − memory at full clock) · clock ·
    max(clock, 0.5)². Found by bisection (the product solves it in closed form)."""
    if cap_w is None or cap_w >= accelerator.tdp_w:
        return 1.0
    watts_per_bps = accelerator.memory_pj_per_bit * 1e-12 * 8  # J per byte = W per byte/s
    mem = watts_per_bps * accelerator.hbm_gbps * 1e9 * eff.mbu
    comp = accelerator.tdp_w - accelerator.idle_w - mem

    def draw(clock: float) -> float:
        volts = clock if clock > 0.5 else 0.5
        return accelerator.idle_w + mem + comp * clock * volts * volts

    lo, hi = 0.0, 1.0
    for _ in range(200):
        mid = (lo + hi) / 2
        if draw(mid) > cap_w:
            hi = mid
        else:
            lo = mid
    return lo


class Roofline:
    """Step times of one model on one instance (``devices`` accelerators split as §2.8)."""

    def __init__(
        self,
        model,
        accelerator,
        devices: int,
        eff: Efficiency,
        split: Split | None = None,
        cap_w: float | None = None,
        encoder_layers: int | None = None,
        replay_on: str = "prefill",  # --- ced: where the bounded replay runs
        replay_window: int = 0,
    ) -> None:
        p = _module_params(model)
        split = split or Split()
        eff = eff.on(accelerator, model.layers)
        # §2.8: one pipeline stage runs at a time, so a step sees devices / pp of them.
        at_once = devices // split.pp
        # §2.11: a power cap lowers the core clock, so every FLOP rate, not the HBM rate
        clock = cap_clock(accelerator, eff, cap_w)
        self.peak = accelerator.peak_tflops * 1e12 * at_once * clock  # bf16: attention
        # the GEMMs of an FP8 / INT8 (W8A8) checkpoint run at the datasheet's FP8 / INT8 peak
        fmt = model.weight_format.split(" ")[0].lower() if model.quant_bytes else ""
        dtype_peak = {"fp8": accelerator.peak_fp8_tflops, "int8": accelerator.peak_int8_tflops}
        self.gemm_peak = (dtype_peak.get(fmt) or accelerator.peak_tflops) * 1e12 * at_once * clock
        self.hbm = accelerator.hbm_gbps * 1e9 * at_once  # bytes/s
        self.memory = accelerator.memory_gb * 1e9 * devices  # bytes
        self.eff = eff
        self._comm_setup(model, devices, split)
        self.replicas = devices // (self.tp * self.pp)  # TP×PP groups sharing a step's tokens
        wb = model.weight_bytes
        # Per token through the layers: 2 FLOPs per weight it multiplies (§2.1 F_lin).
        self.f_lin = 2.0 * (p["attention"] + p["norms"] + p["dense_mlp"] + p["active_routed"])
        self.f_head = 2.0 * model.hidden_size * model.vocab_size  # §2.1 F_head
        if model.kv_lora_rank > 0:
            d_qk, d_v = model.qk_nope_head_dim + model.qk_rope_head_dim, model.v_head_dim
        else:
            d_qk = d_v = model.head_dim
        # QK^T (d_qk multiply-adds) and AV (d_v) per head, per layer, per (query, key) pair.
        self.attn = model.layers * model.heads * (2.0 * d_qk + 2.0 * d_v)
        self.kv = kv_bytes_per_token(model)
        routed = p["routed"] * wb
        self.w_all = (
            p["attention"] + p["norms"] + p["dense_mlp"] + p["routed"] + p["embed"] + p["lm_head"]
        ) * wb
        # an untied input embedding is resident but a step reads only its tokens' rows
        # (§2.7): it is not part of what a step reads; a tied one is the LM head, read whole
        self.w_dense = self.w_all - routed - (0.0 if model.tied_embeddings else p["embed"] * wb)
        self.w_routed = routed
        self.route_frac = (
            model.experts_per_token / model.n_routed_experts if model.n_routed_experts else 0.0
        )
        # prefill's own terms: the whole stack, or (§2.12, a causal encoder-decoder) the
        # first ``encoder_layers`` layers plus k_proj and v_proj of every later layer
        self.p_lin, self.p_attn, self.p_w, self.p_layers = (
            self.f_lin,
            self.attn,
            self.w_dense,
            model.layers,
        )
        # --- ced: prefill's LM head, resident weights, replay window (tokens per prompt)
        self.p_head, self.p_resident, self.p_window = self.f_head, self.w_all, 0
        if encoder_layers is not None:
            self._encoder_setup(model, encoder_layers, p, wb)
            self._replay_setup(model, encoder_layers, p, wb, replay_on, replay_window)

    @staticmethod
    def _prompt_params(model, encoder: int, p: dict) -> float:
        """Parameters a CED prompt token multiplies: the encoder layers (per-layer shares of
        the dense stack, every layer alike), the final norm, and k_proj and v_proj of every
        decoder layer."""
        final_norm = model.hidden_size
        per_layers = p["attention"] + (p["norms"] - final_norm) + p["dense_mlp"]
        kv_out = model.kv_heads * model.head_dim
        k_and_v = 2 * model.hidden_size * kv_out + (2 * kv_out if model.qkv_bias else 0)
        return per_layers * encoder / model.layers + final_norm + (model.layers - encoder) * k_and_v

    def _encoder_setup(self, model, encoder: int, p: dict, wb: float) -> None:
        """Prefill runs the prompt pass: attention over the encoder layers; the embedding
        and LM head do not scale."""
        self.p_lin = 2.0 * self._prompt_params(model, encoder, p)
        self.p_attn = self.attn * encoder / model.layers
        head = p["embed"] if model.tied_embeddings else p["lm_head"]
        self.p_w = (self._prompt_params(model, encoder, p) + head) * wb
        self.p_layers = encoder

    def prompt_pass(self, model, encoder: int) -> None:
        """--- ced (§2.12): a prefix this (decode) instance recomputes runs the prompt pass
        of a CED model: FLOPs per token, attention FLOPs per pair over the encoder layers,
        and the encoder layers' KV bytes read per attended token."""
        share = encoder / model.layers
        lin = 2.0 * self._prompt_params(model, encoder, _module_params(model))
        self.ced_prompt = (lin, self.attn * share, self.kv * share)

    def _replay_setup(self, model, encoder: int, p: dict, wb: float, on: str, window: int):
        """--- ced (§2.12): the bounded replay of each prompt's last ``window`` tokens
        through the decoder layers. On prefill: here, in the prefill step, which then reads
        the whole model. On decode: prefill is the encoder alone (no LM head; it holds the
        embedding, the encoder and the projections)."""
        decoder = model.layers - encoder
        final_norm = model.hidden_size
        per_layers = p["attention"] + (p["norms"] - final_norm) + p["dense_mlp"]
        kv_out = model.kv_heads * model.head_dim
        k_and_v = 2 * model.hidden_size * kv_out + (2 * kv_out if model.qkv_bias else 0)
        encoder_part = per_layers * encoder / model.layers + final_norm + decoder * k_and_v
        if on == "decode":
            self.p_head = 0.0
            self.p_w = encoder_part * wb  # the embedding: only its tokens' rows (§2.7)
            self.p_resident = (encoder_part + p["embed"]) * wb
            return
        self.p_window = window
        self.p_w = self.w_dense
        self.r_lin = 2.0 * per_layers * decoder / model.layers  # per replayed token
        self.r_attn = self.attn * decoder / model.layers  # per (query, key) pair

    # ---------------------------------------------------------------- §2.8

    def _comm_setup(self, model, devices: int, split: Split) -> None:
        # tp by default: every device the pipeline stages and expert groups leave
        self.tp = max(devices // (split.pp * split.ep), 1) if split.tp is None else split.tp
        self.pp, self.ep, self.devices = split.pp, split.ep, devices
        self.bw = split.fabric_gbps * 1e9  # bytes/s per device and direction
        self.hop = split.fabric_us * 1e-6  # s per ring step
        self.ar_alpha = split.allreduce_alpha_us
        self.ar_gbps = split.allreduce_gbps
        self.layers, self.hidden = model.layers, model.hidden_size
        self.moe_layers = model.layers - model.first_dense_layers if model.n_routed_experts else 0
        self.k = model.experts_per_token

    def comm(self, tokens: float, layers: int | None = None) -> float:
        """§2.8: fabric seconds of one step of ``tokens`` tokens, collective by collective
        (over ``layers`` layers: the whole stack by default)."""
        tp, pp, ep = self.tp, self.pp, self.ep
        layers = self.layers if layers is None else layers
        per_group = tokens * tp * pp / self.devices  # tokens one TP×PP group carries
        hidden_bytes = per_group * self.hidden * 2  # bf16 activations
        total = 0.0
        if tp > 1:
            # ring all-reduce: reduce-scatter then all-gather, tp − 1 steps each, a 1/tp chunk
            steps = 2 * (tp - 1)
            one = steps * (hidden_bytes / tp) / self.bw + steps * self.hop
            if self.ar_alpha is not None:  # measured: α + S / β, whatever tp
                one = self.ar_alpha * 1e-6 + hidden_bytes / (self.ar_gbps * 1e9)
            for _layer in range(layers):
                total += one  # after attention (o_proj)
                total += one  # after the MLP (down_proj)
        for _boundary in range(pp - 1):
            total += hidden_bytes / self.bw + self.hop
        if ep > 1 and self.moe_layers:
            routed = tokens * pp / self.devices * self.k * self.hidden * 2  # per device
            one = routed * (ep - 1) / ep / self.bw + self.hop
            for _layer in range(self.moe_layers):
                total += one  # dispatch
                total += one  # combine
        return total

    # ---------------------------------------------------------------- §2.7

    def weights_read(self, tokens: float) -> float:
        """W(B): dense weights plus the routed experts at least one of B tokens uses."""
        if self.w_routed == 0.0:
            return self.w_dense
        untouched = (1.0 - self.route_frac) ** tokens
        return self.w_dense + self.w_routed * (1.0 - untouched)

    def _ops(self, gemm, tokens, weights, attn, kv_bytes, mfu: float, overhead_ms: float):
        """Σ over operators of max(compute, memory): the GEMMs at eff(T) = mfu · T/(T + T½),
        T the tokens each TP×PP group carries, reading ``weights``; attention at the
        attention share of the bf16 peak, streaming ``kv_bytes``."""
        per_group = tokens / self.replicas
        e = self.eff
        g_eff = mfu * per_group / (per_group + e.gemm_half_tokens) if tokens > 0 else 1.0
        t_gemm = max(gemm / (self.gemm_peak * g_eff), weights / (self.hbm * e.mbu))
        t_attn = max(attn / (self.peak * e.mfu_attention), kv_bytes / (self.hbm * e.mbu_kv))
        return t_gemm + t_attn + overhead_ms * 1e-3

    # ---------------------------------------------------------------- §2.3, §2.4, §2.6

    def prefill_step(self, parts: list[tuple[int, int]]) -> float:
        """One prefill step over requests given as (new tokens, cached tokens)."""
        gemm, attn = 0.0, 0.0
        new = 0
        kv_tokens = 0
        replayed = 0
        for n, c in parts:
            causal = n * c + n * (n + 1) / 2  # pairs (query, attended key)
            gemm += self.p_lin * n + self.p_head
            attn += self.p_attn * causal
            new += n
            kv_tokens += n + c
            if self.p_window:  # --- ced: the prompt's last w tokens through the decoder
                s = n + c  # (the replay's FLOPs count as GEMM work)
                w = min(self.p_window, s)
                gemm += self.r_lin * w + self.r_attn * (w * (s - w) + w * (w + 1) / 2)
                replayed += w
        weights = self.p_w if self.w_routed == 0.0 else self.weights_read(new)
        e = self.eff
        step = self._ops(
            gemm, new, weights, attn, self.kv * kv_tokens, e.mfu_prefill, e.prefill_overhead_ms
        )
        if replayed:  # the decoder layers' collectives over the replayed tokens
            step += self.comm(replayed) - self.comm(replayed, self.p_layers)
        return step + self.comm(new, self.p_layers)

    def recompute(self, n: int, after: int = 0) -> float:
        """Rebuild n prefix tokens on this instance, attending to ``after`` tokens already
        resident before them: a prefill without logits."""
        attn = self.attn * (n * (n + 1) / 2 + n * after)
        e = self.eff
        return self._ops(
            self.f_lin * n, n, self.weights_read(n), attn, self.kv * (n + after),
            e.mfu_prefill, e.prefill_overhead_ms,
        ) + self.comm(n)  # fmt: skip

    def speculate(self, draft: Roofline, gamma: int, alpha: float) -> None:
        """§2.13: speculative decoding with ``draft`` (its own roofline on this hardware)
        proposing ``gamma`` tokens, each accepted with probability ``alpha``."""
        self.spec = (draft, gamma, sum(alpha**i for i in range(gamma + 1)))
        self.kv_resident = self.kv + draft.kv  # the draft keeps its own KV of every token

    def reprefill(self, n: int, cached: int) -> float:
        """Rebuild a preempted sequence's n tokens of KV attending to ``cached`` resident
        ones (docs/model.md "Paged admission and preemption"): a prefill without logits."""
        attn = self.attn * (n * cached + n * (n + 1) / 2)
        e = self.eff
        return self._ops(
            self.f_lin * n, n, self.weights_read(n), attn, self.kv * (n + cached),
            e.mfu_prefill, e.prefill_overhead_ms,
        ) + self.comm(n)  # fmt: skip

    def decode_iteration(self, batch: int, context: int) -> float:
        """One decode iteration: ``batch`` sequences attending to ``context`` tokens in all."""
        if getattr(self, "spec", None):
            return self._speculative_iteration(batch, context)
        gemm = batch * self.f_lin + batch * self.f_head
        e = self.eff
        return self._ops(
            gemm, batch, self.weights_read(batch), self.attn * context, self.kv * context,
            e.mfu_decode, e.decode_overhead_ms,
        ) + self.comm(batch)  # fmt: skip

    def _speculative_iteration(self, batch: int, context: int) -> float:
        """§2.13, per token of each sequence: one speculative iteration (γ draft steps, each
        reading the draft's weights and KV, memory-bound; one target pass over γ + 1 tokens
        per sequence reading the target's weights and KV once) over the expected tokens."""
        draft, gamma, tokens = self.spec
        verified = batch * (gamma + 1)
        gemm = verified * (self.f_lin + self.f_head)
        attn = self.attn * (gamma + 1) * context
        e = self.eff
        total = self._ops(
            gemm, verified, self.weights_read(verified), attn, self.kv * context, e.mfu_decode, 0.0
        ) + self.comm(verified)
        for _step in range(gamma):  # the draft's weights and its KV at their bandwidths
            total += draft.w_dense / (self.hbm * e.mbu) + draft.kv * context / (self.hbm * e.mbu_kv)
        for _pass in range(gamma + 1):
            total += e.decode_overhead_ms * 1e-3
        return total / tokens

    def mixed_step(self, batch: int, context: int, chunks: list[tuple[int, int, bool]]) -> float:
        """Colocated chunked step (docs/coupled.md): one decode token per running sequence
        plus prefill chunks (n new tokens after ``done`` already prefilled, and whether the
        chunk ends its prompt and so produces logits), priced at decode efficiency."""
        if getattr(self, "spec", None) and batch > 0:  # --- spec
            return self._speculative_mixed(batch, context, chunks)
        gemm = batch * (self.f_lin + self.f_head)
        attn_f = self.attn * context
        tokens = batch
        kv_bytes = self.kv * context
        for n, done, last, *prompt in chunks:
            lin, attn, kv_read = self.chunk_terms(prompt)
            gemm += lin * n
            attn_f += attn * (n * done + n * (n + 1) / 2)
            if last:
                gemm += self.f_head
            tokens += n
            kv_bytes += kv_read * done + self.kv * n
        e = self.eff
        return self._ops(
            gemm, tokens, self.weights_read(tokens), attn_f, kv_bytes,
            e.mfu_decode, e.decode_overhead_ms,
        ) + self.comm(tokens)  # fmt: skip

    def chunk_terms(self, prompt) -> tuple[float, float, float]:
        """(FLOPs per token, attention FLOPs per pair, KV bytes read per attended token) of
        a chunk: a recomputed prefix (``prompt`` = [True]) of a CED model runs its prompt
        pass (prompt_pass); anything else the whole model."""
        ced = getattr(self, "ced_prompt", None)
        if prompt and prompt[0] and ced is not None:
            return ced
        return self.f_lin, self.attn, self.kv

    # --- spec: speculative decoding beside recompute chunks (docs/model.md §1.9, §2.13)

    def chunk_room(self, batch: int, budget: int) -> int:
        """Chunk tokens one engine iteration carries beside ``batch`` sequences: the budget
        less the batch; speculative, the budget less the batch's γ + 1 tokens each (vLLM V1
        schedules draft tokens in the same budget), over the expected tokens τ (the real
        iteration carries τ times the engine's chunk)."""
        if not getattr(self, "spec", None) or batch == 0:
            return budget - batch
        _draft, gamma, tokens = self.spec
        return math.floor((budget - batch * (gamma + 1)) / tokens + 1e-9)  # float-safe floor

    def _speculative_mixed(self, batch: int, context: int, chunks) -> float:
        """One REAL speculative iteration carrying τ times the engine's chunks, per token of
        each sequence (over τ): γ draft steps for the batch; one target pass over the batch's
        γ + 1 tokens each and the chunk tokens. A chunk's FLOPs over the real iteration are
        τ times its engine chunk's (so a job's FLOPs sum to its prefill's); it reads its
        done prefix once and writes its τ·n tokens."""
        draft, gamma, tokens = self.spec
        verified = batch * (gamma + 1)
        gemm = verified * (self.f_lin + self.f_head)
        attn_f = self.attn * (gamma + 1) * context
        kv_bytes = self.kv * float(context)
        real_chunk = tokens * sum(c[0] for c in chunks)
        for n, done, _last, *prompt in chunks:
            lin, attn, kv_read = self.chunk_terms(prompt)
            gemm += tokens * lin * n
            attn_f += tokens * attn * (n * done + n * (n + 1) / 2)
            kv_bytes += kv_read * done + self.kv * tokens * n
        real = verified + real_chunk
        e = self.eff
        total = self._ops(gemm, real, self.weights_read(real), attn_f, kv_bytes, e.mfu_decode, 0.0)
        total += self.comm(verified + real_chunk)
        for _step in range(gamma):  # the draft's weights and its KV at their bandwidths
            total += draft.w_dense / (self.hbm * e.mbu) + draft.kv * context / (self.hbm * e.mbu_kv)
        for _pass in range(gamma + 1):
            total += e.decode_overhead_ms * 1e-3
        return total / tokens

    def prefix_cache_tokens(self, fraction: float) -> int:
        """§1.4: (HBM − weights) · prefill_cache_fraction / K tokens."""
        return int((self.memory - self.p_resident) * fraction / self.kv)


# ---------------------------------------------------------------- §3.1 reference demand


def reference_demand(
    req, decode: Roofline, instances: int, max_batch: int, block: int = 1
) -> float:
    """Reference decode KV demand per instance, tokens (docs/model.md §3.1); with paged
    admission the largest request in whole blocks of ``block`` tokens."""
    n = len(req)
    arrival = [float(x) for x in req.arrival]
    prompt = [int(x) for x in req.prompt_len]
    output = [int(x) for x in req.output_len]
    span = arrival[-1] - arrival[0] if n > 1 else 0.0
    lam = (n - 1) / span / instances if span > 0 else 0.0
    e_prompt = sum(prompt) / n
    e_out = sum(output) / n
    L = 1.0
    for _ in range(100):
        b = max(L, 1.0)
        t_iter = decode.decode_iteration(b, b * (e_prompt + e_out / 2))
        new = min(lam * e_out * t_iter, float(max_batch))
        if abs(new - L) < 1e-9:
            break
        L = (L + new) / 2
    largest = max(p + o for p, o in zip(prompt, output, strict=True))
    active = (L + 3 * math.sqrt(L)) * (e_prompt + e_out) + math.ceil(largest / block) * block
    # working set: shared blocks (>= 2 references), most referenced first (ties by hash),
    # carrying >= 90 % of the references to shared blocks
    refs: dict[int, int] = {}
    toks: dict[int, int] = {}
    for h, t in zip(req.blk_hash.tolist(), req.blk_tokens.tolist(), strict=True):
        refs[h] = refs.get(h, 0) + 1
        toks.setdefault(h, t)
    shared = sorted((h for h in refs if refs[h] >= 2), key=lambda h: (-refs[h], h))
    total = sum(refs[h] for h in shared)
    ws = 0.0
    covered = 0
    for h in shared:
        covered += refs[h]
        ws += toks[h]
        if covered / total >= 0.9:
            break
    return active + min(ws, active)
