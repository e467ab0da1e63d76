"""What the catalog knows about a model, an accelerator and a link.

Every spec carries ``source``: where its numbers come from (model card / config.json URL,
datasheet). Specs are Pydantic models so a user's own file is validated like a preset.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator


class _Spec(BaseModel):
    model_config = ConfigDict(extra="forbid", defer_build=True, frozen=True, allow_inf_nan=False)


class ModelSpec(_Spec):
    """A decoder-only transformer's shape, as in its Hugging Face ``config.json``."""

    name: str = Field(description="Catalog key users type, e.g. 'qwen2-1.5b'.")
    hf_id: str = Field("", description="Hugging Face repository id the shape is taken from.")
    layers: int = Field(gt=0, description="num_hidden_layers.")
    hidden_size: int = Field(gt=0, description="hidden_size (model width).")
    heads: int = Field(gt=0, description="num_attention_heads.")
    kv_heads: int = Field(gt=0, description="num_key_value_heads (GQA); equals heads for MHA.")
    head_dim: int = Field(gt=0, description="Per-head dimension (head_dim, or hidden_size/heads).")
    intermediate_size: int = Field(gt=0, description="Dense MLP width (gated: 3 matrices).")
    vocab_size: int = Field(gt=0, description="vocab_size.")
    tied_embeddings: bool = Field(
        False, description="tie_word_embeddings: LM head shares the embedding."
    )
    qkv_bias: bool = Field(False, description="Q/K/V projections carry a bias (Qwen2).")
    max_context: int = Field(gt=0, description="max_position_embeddings: longest prompt+output.")
    # Multi-head latent attention (DeepSeek-V2/V3). kv_lora_rank > 0 switches MLA on.
    kv_lora_rank: int = Field(0, ge=0, description="MLA: compressed KV latent width (0 = no MLA).")
    q_lora_rank: int = Field(0, ge=0, description="MLA: compressed Q width (0 = plain q_proj).")
    qk_rope_head_dim: int = Field(0, ge=0, description="MLA: decoupled RoPE key width per head.")
    qk_nope_head_dim: int = Field(0, ge=0, description="MLA: non-RoPE query/key width per head.")
    v_head_dim: int = Field(0, ge=0, description="MLA: value width per head.")
    # Mixture of experts (DeepSeek style). n_routed_experts > 0 switches MoE on.
    n_routed_experts: int = Field(0, ge=0, description="MoE: routed experts per MoE layer.")
    n_shared_experts: int = Field(0, ge=0, description="MoE: always-active shared experts.")
    experts_per_token: int = Field(0, ge=0, description="MoE: routed experts active per token.")
    moe_intermediate_size: int = Field(0, ge=0, description="MoE: width of one expert's MLP.")
    first_dense_layers: int = Field(
        0,
        ge=0,
        description="MoE: layers with a dense MLP instead of experts (leading ones for DeepSeek's "
        "first_k_dense_replace, interleaved ones for moe_layer_freq / decoder_sparse_step / "
        "interleave_moe_layer_step; only their number matters).",
    )
    shared_expert_intermediate_size: int = Field(
        0,
        ge=0,
        description="MoE: width of the always-active shared-expert MLP when given as one block "
        "(Qwen-MoE shared_expert_intermediate_size, Llama-4); 0 = n_shared_experts × "
        "moe_intermediate_size.",
    )
    # Attention layer pattern. All layers are full softmax attention unless stated here.
    sliding_window: int = Field(
        0, ge=0, description="Window of the sliding-window layers (0 = none)."
    )
    sliding_layers: int = Field(
        0, ge=0, description="Layers with sliding-window (or chunked) attention."
    )
    linear_layers: int = Field(
        0,
        ge=0,
        description="Linear-attention layers (MiniMax lightning): fixed state, no growing KV.",
    )
    weight_bytes: float = Field(2.0, gt=0, description="Bytes per weight (2 = bf16).")
    kv_bytes: float = Field(2.0, gt=0, description="Bytes per KV element (2 = bf16).")
    quant_bytes: float = Field(
        0.0,
        ge=0,
        description="Bytes per weight of the quantized linear layers, scales and zeros included "
        "(0 = not quantized: every weight takes weight_bytes).",
    )
    weight_format: str = Field(
        "", description="How the weights are stored, e.g. 'fp8 block 128x128'."
    )
    notes: tuple[str, ...] = Field(
        (), description="What reading the config left out, one line each."
    )
    params_reported: float = Field(0.0, ge=0, description="Total parameters the model card states.")
    source: str = Field("", description="Where these numbers come from (URL of config.json/card).")

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank > 0

    @property
    def is_moe(self) -> bool:
        return self.n_routed_experts > 0

    @property
    def full_layers(self) -> int:
        """Layers whose KV grows with the context (full softmax attention)."""
        return self.layers - self.sliding_layers - self.linear_layers

    @model_validator(mode="after")
    def _layer_pattern(self) -> ModelSpec:
        if self.sliding_layers + self.linear_layers > self.layers:
            raise ValueError("sliding_layers + linear_layers exceed layers")
        if self.sliding_layers and not self.sliding_window:
            raise ValueError("sliding_layers needs a sliding_window")
        return self


class AcceleratorSpec(_Spec):
    """One accelerator device (a GPU), from its datasheet."""

    name: str = Field(description="Catalog key, e.g. 'h100-sxm'.")
    vendor: str = Field("", description="Maker.")
    # Upper bounds are far past any part (B200: 2,250 TFLOP/s, 7,700 GB/s, 180 GB) so a
    # hypothetical device fits, while a unit slip (FLOP/s for TFLOP/s) does not.
    peak_tflops: float = Field(
        gt=0, le=1e6, description="Dense BF16 tensor peak, TFLOP/s (no sparsity)."
    )
    peak_fp8_tflops: float | None = Field(
        None, gt=0, le=1e6, description="Dense FP8 tensor peak, TFLOP/s (None: no FP8 cores)."
    )
    peak_int8_tflops: float | None = Field(
        None, gt=0, le=1e6, description="Dense INT8 tensor peak, TOP/s (None: not published)."
    )
    hbm_gbps: float = Field(gt=0, le=1e6, description="Memory bandwidth, GB/s (10^9 bytes/s).")
    memory_gb: float = Field(gt=0, le=1e5, description="Memory capacity, GB (10^9 bytes).")
    source: str = Field("", description="Datasheet the numbers come from.")
    # --- GEMM efficiency, eff(T) = gemm_mfu · T / (T + gemm_half_tokens) of the weight
    # format's peak (docs/model/cost-model.md "Per-operator roofline"). None: the H100-fitted
    # defaults of physics.costmodel (an accelerator without kernel measurements of its own).
    gemm_mfu: float | None = Field(
        None,
        gt=0,
        le=1,
        description="Fraction of the tensor peak a saturated GEMM reaches "
        "on this part, measured (None: the H100-fitted default).",
    )
    gemm_half_tokens: float | None = Field(
        None,
        ge=0,
        le=1e6,
        description="Tokens per device at which a GEMM reaches half of "
        "gemm_mfu on this part, measured (None: the H100-fitted default).",
    )
    # --- GEMM kernel fixed time and weight bandwidth (docs/model/cost-model.md "GEMM kernel
    # fixed time"): what a small GEMM pays whatever its shape. None: not measured, 0 µs and
    # the weights' default MBU (Efficiency.mbu).
    gemm_kernel_us: float | None = Field(
        None,
        ge=0,
        le=1e4,
        description="Fixed time of one GEMM kernel on this part (prologue, pipeline fill, "
        "epilogue), µs, measured (None: 0).",
    )
    gemm_mbu: float | None = Field(
        None,
        gt=0,
        le=1,
        description="Fraction of HBM bandwidth a GEMM reading its weights reaches on this "
        "part, measured (None: the default MBU).",
    )
    gemm_source: str = Field("", description="Measurements the GEMM constants are fitted on.")
    # --- power: None means "not modelled" (a user file may leave them out)
    tdp_w: float | None = Field(
        None, gt=0, le=1e5, description="Board power limit (TDP), W, from the datasheet."
    )
    idle_w: float | None = Field(
        None, ge=0, le=1e5, description="Power with no kernel running, W (docs/model.md §2.11)."
    )
    memory_pj_per_bit: float | None = Field(
        None, gt=0, le=1e3, description="Energy to move one bit to or from device memory, pJ."
    )
    power_source: str = Field("", description="Where the power figures come from.")


class LinkSpec(_Spec):
    """A prefill→decode KV link, per direction, per channel."""

    name: str = Field(description="Catalog key, e.g. 'roce-200g'.")
    bandwidth_gbps: float = Field(
        gt=0, le=1e5, description="Usable bandwidth per direction, GB/s (bytes)."
    )
    latency_us: float = Field(
        ge=0, le=1e7, description="One-way latency per transfer, microseconds."
    )
    efficiency: float = Field(
        1.0,
        gt=0,
        le=1,
        description="Fraction of the line rate a KV transfer reaches (η, measured; 0 to 1).",
    )
    setup_us: float = Field(
        0.0,
        ge=0,
        le=1e7,
        description="Software cost of one transfer (descriptor preparation, posting, "
        "completion notification), µs; paid once per request's transfer.",
    )
    ceiling_gbps: float | None = Field(
        None,
        gt=0,
        le=1e5,
        description="Most GB/s one instance's NICs reach together, however many (the "
        "host's PCIe / memory path behind them, measured); none: no ceiling.",
    )
    kind: str = Field("", description="Family: pcie, nvlink, infiniband, roce, ethernet.")
    source: str = Field("", description="Specification or datasheet the numbers come from.")
