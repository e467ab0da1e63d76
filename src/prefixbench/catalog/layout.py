"""Which layers of a config.json are what: MoE or dense MLP, full, windowed or linear attention.

Each reader takes the typed config reader of ``hfconfig`` and returns ModelSpec fields. Keys
that change a model's size but are not modelled raise a CatalogError naming them: a model is
never silently read as something smaller (docs/catalog.md, "Your own model").
"""

from __future__ import annotations

from typing import Any

# Expert count, by layout: DeepSeek, Mixtral / MiniMax / Llama-4, Qwen-MoE / OLMoE.
_EXPERT_KEYS = ("n_routed_experts", "num_local_experts", "num_experts")
# Keys that change a model's size in ways prefixbench does not model, and what they describe.
_UNMODELLED = {
    "attn_layer_period": "Jamba's Mamba/attention interleave",
    "layers_block_type": "a Mamba/attention hybrid",
    "hybrid_override_pattern": "a Mamba/attention hybrid",
    "mamba_d_state": "Mamba layers",
    "ssm_state_size": "state-space (Mamba) layers",
    "ssm_cfg": "state-space (Mamba) layers",
    "full_attention_interval": "gated-DeltaNet linear attention (Qwen3-Next)",
    "linear_num_value_heads": "gated-DeltaNet linear attention",
    "block_types": "recurrent (Griffin) blocks",
    "cross_attention_layers": "cross-attention layers (vision)",
    "moe_num_experts": "an MoE layout other than DeepSeek's, Mixtral's or Qwen's",
    "num_shared_experts": "shared experts in an unsupported layout",
    "moe_shared_expert_intermediate_size": "shared experts in an unsupported layout",
}
_LAYER_KINDS = ("full_attention", "sliding_attention", "chunked_attention", "linear_attention")


def refuse_unmodelled(r) -> None:
    for key, what in _UNMODELLED.items():
        if r.cfg.get(key) is None:
            continue
        raise r.error(
            key,
            f"describes {what}, which prefixbench does not model",
            "remove the key only if it does not change the model's size, or use a supported model",
        )


# ---------------------------------------------------------------- mixture of experts


def _expert_count(r) -> tuple[str, int]:
    found = [(k, r.optional(k, 0, minimum=0)) for k in _EXPERT_KEYS if r.cfg.get(k) is not None]
    counts = {n for _, n in found if n}
    if len(counts) > 1:
        raise r.error(found[1][0], f"disagrees with '{found[0][0]}'", "keep one expert count")
    key = next((k for k, n in found if n), _EXPERT_KEYS[0])
    return key, counts.pop() if counts else 0


def _moe_layers(r, layers: int) -> int:
    """How many layers carry experts, by whichever interleave the config uses."""
    if "interleave_moe_layer_step" in r.cfg or "moe_layers" in r.cfg:  # Llama-4
        if r.cfg.get("moe_layers") is not None:
            return len(set(r.int_list("moe_layers", layers)))
        step = r.optional("interleave_moe_layer_step", 1)
        return len(range(step - 1, layers, step))
    # Counted arithmetically, not by looping over layers (a config may claim 2^31 of them).
    if "decoder_sparse_step" in r.cfg or "mlp_only_layers" in r.cfg:  # Qwen2-MoE, Qwen3-MoE
        step = r.optional("decoder_sparse_step", 1)  # layer i is MoE when (i + 1) % step == 0
        dense = set(r.int_list("mlp_only_layers", layers))
        return layers // step - sum(1 for i in dense if (i + 1) % step == 0)
    if "expert_layer_period" in r.cfg:  # Jamba: layer i is MoE when i % period == offset
        period = r.optional("expert_layer_period", 1)
        offset = r.optional("expert_layer_offset", 0, minimum=0)
        return (layers - 1 - offset) // period + 1 if offset < min(period, layers) else 0
    first = r.optional("first_k_dense_replace", 0, minimum=0)  # DeepSeek
    freq = r.optional("moe_layer_freq", 1)  # layer i >= first is MoE when i % freq == 0
    if first > layers:
        raise r.error("first_k_dense_replace", "exceeds num_hidden_layers", "check the MoE keys")
    return (layers - 1) // freq - (first - 1) // freq


def _shared(r, model_type: str, expert_width: int) -> dict[str, int]:
    if r.cfg.get("shared_expert_intermediate_size"):  # Qwen2-MoE: one wide shared expert
        return {"shared_expert_intermediate_size": r.required("shared_expert_intermediate_size")}
    if r.cfg.get("shared_intermediate_size"):  # MiniMax-Text-01 / M1 (0 there)
        return {"shared_expert_intermediate_size": r.required("shared_intermediate_size")}
    if model_type.startswith("llama4"):  # Llama4TextMoe always has one shared expert
        return {"shared_expert_intermediate_size": expert_width}
    return {"n_shared_experts": r.optional("n_shared_experts", 0, minimum=0)}


def moe_fields(r, layers: int) -> dict[str, Any]:
    """ModelSpec MoE fields (empty for a dense model), plus the dense MLP width if it differs."""
    key, experts = _expert_count(r)
    if not experts:
        if r.cfg.get("num_experts_per_tok"):
            raise r.error(
                "num_experts_per_tok",
                f"is set but no expert count is ({', '.join(_EXPERT_KEYS)})",
                "add the expert count, or remove the key for a dense model",
            )
        return {}
    per_token = r.required("num_experts_per_tok")
    if per_token > experts:
        raise r.error("num_experts_per_tok", f"exceeds {key} ({experts})", "check the MoE keys")
    # Mixtral, MiniMax and Llama-4 give the expert width as intermediate_size.
    width_key = (
        "moe_intermediate_size" if r.cfg.get("moe_intermediate_size") else "intermediate_size"
    )
    width = r.required(width_key)
    model_type = str(r.cfg.get("model_type", "")).lower()
    fields: dict[str, Any] = {
        "n_routed_experts": experts,
        "experts_per_token": per_token,
        "moe_intermediate_size": width,
        "first_dense_layers": layers - _moe_layers(r, layers),
        **_shared(r, model_type, width),
    }
    if r.cfg.get("intermediate_size_mlp") is not None:  # Llama-4: dense layers are wider
        fields["intermediate_size"] = r.required("intermediate_size_mlp")
    return fields


# ---------------------------------------------------------------- attention layer pattern


def _layer_types(r, layers: int, kinds: list) -> dict[str, int]:
    if len(kinds) != layers or any(k not in _LAYER_KINDS for k in kinds):
        raise r.error(
            "layer_types",
            f"must list one of {', '.join(_LAYER_KINDS)} per layer ({layers})",
            "copy it from the model's config",
        )
    linear = kinds.count("linear_attention")
    if linear and not str(r.cfg.get("model_type", "")).startswith("minimax"):
        raise r.error(
            "layer_types",
            "has linear-attention layers of a kind prefixbench does not model",
            "only MiniMax lightning attention is modelled",
        )
    windowed = kinds.count("sliding_attention") + kinds.count("chunked_attention")
    return {"sliding_layers": windowed, "linear_layers": linear}


def _window(r, key: str) -> int:
    return r.optional(key, 0, minimum=0)


def attention_pattern(r, layers: int, max_context: int) -> dict[str, int]:
    """sliding_window, sliding_layers and linear_layers of a config (all 0: full attention)."""
    model_type = str(r.cfg.get("model_type", "")).lower()
    window = _window(r, "sliding_window")
    linear = 0
    if isinstance(r.cfg.get("layer_types"), list):
        counts = _layer_types(r, layers, r.cfg["layer_types"])
        sliding, linear = counts["sliding_layers"], counts["linear_layers"]
        if counts["sliding_layers"] and "chunked_attention" in r.cfg["layer_types"]:
            window = _window(r, "attention_chunk_size")
    elif r.cfg.get("attn_type_list") is not None:  # MiniMax: 0 lightning (linear), 1 softmax
        kinds = r.int_list("attn_type_list", 2)
        if len(kinds) != layers:
            raise r.error("attn_type_list", f"must have {layers} entries", "one per layer")
        linear, sliding = kinds.count(0), 0
    elif model_type.startswith("gemma2"):  # Gemma2DecoderLayer: even layers slide
        window = window or 4096
        sliding = (layers + 1) // 2
    elif model_type.startswith("gemma3") and r.cfg.get("sliding_window_pattern"):
        pattern = r.optional("sliding_window_pattern", 1)  # every pattern-th layer is global
        sliding = layers - layers // pattern
    elif r.cfg.get("attention_chunk_size") is not None:  # Llama-4: chunked except NoPE layers
        window = _window(r, "attention_chunk_size")
        flags = r.int_list("no_rope_layers", 2)
        if flags:
            sliding = sum(flags)
        else:
            every = r.optional("no_rope_layer_interval", 4)  # every n-th layer is global
            sliding = layers - layers // every
    elif window and "use_sliding_window" in r.cfg:  # Qwen2: SWA above max_window_layers
        full = r.optional("max_window_layers", layers, minimum=0)
        sliding = max(layers - full, 0) if r.cfg["use_sliding_window"] else 0
    else:  # Mistral v0.1: every layer slides when sliding_window is set
        sliding = layers if window else 0
    if sliding and (not window or window >= max_context):
        sliding, window = 0, 0  # a window as long as the context is full attention
    return {
        "sliding_window": window if sliding else 0,
        "sliding_layers": sliding,
        "linear_layers": linear,
    }
