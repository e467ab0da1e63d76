"""What `prefixbench catalog` prints: derived figures of presets as plain dicts."""

from __future__ import annotations

from prefixbench.catalog import ACCELERATORS, LINKS, MODELS, get_accelerator, get_model
from prefixbench.catalog.specs import AcceleratorSpec
from prefixbench.catalog.userfile import load_hardware
from prefixbench.errors import CatalogError
from prefixbench.physics import costmodel as cm
from prefixbench.support.suggest import did_you_mean


def list_entries() -> dict[str, list[dict]]:
    """Every preset by kind, with its headline numbers."""
    from prefixbench.scenario.loader import preset_names

    return {
        "models": [
            {
                "name": m.name,
                "params_b": round(cm.param_counts(m)["total"] / 1e9, 3),
                "kv_bytes_per_token": cm.kv_bytes_per_token(m),
                "attention": "MLA" if m.is_mla else ("MHA" if m.kv_heads == m.heads else "GQA"),
                "max_context": m.max_context,
            }
            for m in MODELS.values()
        ],
        "accelerators": [
            {
                "name": a.name,
                "bf16_tflops": a.peak_tflops,
                "hbm_gbps": a.hbm_gbps,
                "memory_gb": a.memory_gb,
                "ridge_flops_per_byte": round(cm.ridge_point(a), 1),
            }
            for a in ACCELERATORS.values()
        ],
        "links": [
            {
                "name": k.name,
                "kind": k.kind,
                "bandwidth_gbps": k.bandwidth_gbps,
                "latency_us": k.latency_us,
            }
            for k in LINKS.values()
        ],
        "workloads": [{"name": n} for n in preset_names()],
    }


def _weight_bytes(m) -> float | None:
    """None when the weight format is not modelled (weight_format says which)."""
    try:
        return cm.weight_bytes(m)
    except CatalogError:
        return None


def _width(nbytes: float) -> str:
    return {1.0: "8-bit", 2.0: "16-bit", 4.0: "32-bit"}.get(nbytes, f"{nbytes:g} bytes")


def _layer_pattern(m) -> str:
    parts = [f"{m.full_layers} full"]
    if m.sliding_layers:
        parts.append(f"{m.sliding_layers} sliding (window {m.sliding_window:,})")
    if m.linear_layers:
        parts.append(f"{m.linear_layers} linear")
    kind = "MLA" if m.is_mla else ("MHA" if m.kv_heads == m.heads else "GQA")
    return f"{kind}: " + " + ".join(parts)


def _kv_extras(m) -> dict:
    """KV dtype, layer pattern, and what windows and linear layers do to the KV."""
    out = {"kv_dtype": _width(m.kv_bytes), "attention_layers": _layer_pattern(m)}
    if m.sliding_layers:
        out["kv_bytes_per_token_at_max_context"] = int(
            round(float(cm.kv_bytes_per_token(m, m.max_context)))
        )
    if m.linear_layers:
        out["linear_state_bytes_per_sequence"] = cm.state_bytes_per_sequence(m)
    return out


def _moe_extras(m) -> dict:
    if not m.is_moe:
        return {}
    return {
        "experts": f"{m.n_routed_experts} routed, {m.experts_per_token} per token, "
        f"{m.layers - m.first_dense_layers} of {m.layers} layers"
    }


def show(name: str, accelerator: str = "h100-sxm") -> dict:
    """Derived figures of one preset (model, accelerator or link) or a config.json path."""
    key = name.strip().lower()
    if key.endswith((".yaml", ".yml")):
        return _hardware(load_hardware(name))
    if key in ACCELERATORS:
        return _hardware(ACCELERATORS[key])
    if key in LINKS:
        return _hardware(LINKS[key])
    if key in MODELS or name.endswith(".json"):
        m = get_model(name)
        dev = get_accelerator(accelerator)
        p = cm.param_counts(m)
        return {
            "kind": "model",
            "name": m.name,
            "hf_id": m.hf_id,
            "kv_bytes_per_token": cm.kv_bytes_per_token(m),
            **_kv_extras(m),
            "params": p["total"],
            "active_params": p["active"],
            "weight_bytes": _weight_bytes(m),
            "weight_format": m.weight_format or _width(m.weight_bytes),
            **_moe_extras(m),
            "flops_per_token": float(cm.flops_per_token(m)),
            "attention_flops_per_context_token": cm.attention_flops_coef(m),
            "layers": m.layers,
            "heads": m.heads,
            "kv_heads": m.kv_heads,
            "head_dim": m.head_dim,
            "mla": m.is_mla,
            "moe": m.is_moe,
            "max_context": m.max_context,
            "accelerator": dev.name,
            "ridge_flops_per_byte": cm.ridge_point(dev),
            "source": m.source,
            **({"notes": "; ".join(m.notes)} if m.notes else {}),
        }
    known = list(MODELS) + list(ACCELERATORS) + list(LINKS)
    raise CatalogError(f"unknown catalog entry '{name}'", fix=did_you_mean(name, known))


def _hardware(spec) -> dict:
    if isinstance(spec, AcceleratorSpec):
        return {
            "kind": "accelerator",
            **spec.model_dump(),
            "ridge_flops_per_byte": cm.ridge_point(spec),
        }
    return {"kind": "link", **spec.model_dump()}


def run_notes(m) -> list[str]:
    """What a simulation of ``m`` leaves out, one line each (shown with the run's notes)."""
    notes = [f"{m.name}: {n}" for n in m.notes]
    if m.sliding_layers and m.max_context > m.sliding_window:
        notes.append(
            f"{m.name}: its {m.sliding_layers} sliding-window layers are charged KV for every "
            f"token, also past their {m.sliding_window:,}-token window (docs/model.md §2.2)"
        )
    if m.linear_layers:
        notes.append(
            f"{m.name}: the fixed state of its {m.linear_layers} linear-attention layers "
            f"({cm.state_bytes_per_sequence(m) / 1e6:,.0f} MB per sequence) is not charged"
        )
    return notes
