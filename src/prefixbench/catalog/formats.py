"""How a model's bytes are stored: weight formats (``quantization_config``) and KV dtypes.

A format is a byte width per element. Quantized formats store the linear layers (attention
projections, MLPs, experts) at ``quant_bytes`` per weight, scales and zeros included; the
embeddings, LM head, norms and router stay at the checkpoint's ``torch_dtype``. Sources and the
arithmetic behind each width are in docs/catalog.md ("Weight and KV formats").
"""

from __future__ import annotations

from typing import Any

from ..errors import CatalogError
from .specs import ModelSpec

UNMODELLED = "not modelled: "  # weight_format prefix of a quant_method prefixbench cannot size

KV_DTYPES: dict[str, float] = {"bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "int8": 1.0}
"""Bytes per KV element. fp8 (e4m3/e5m2) and int8 caches keep one scale per tensor or head."""

_FP8_BLOCK = 128  # DeepSeek-V3 weight_block_size [128, 128], one float32 scale per block
_INT_GROUP = 128  # GPTQ/AWQ group_size 128, one fp16 scale and one packed zero per group


def int_group_bytes(bits: int, group_size: int, zeros: bool = True, scale_bytes: float = 2.0):
    """Bytes per weight of a grouped integer format: the packed weight plus its group's scale
    (and packed zero point), spread over the ``group_size`` weights sharing them."""
    per_group = scale_bytes + (bits / 8 if zeros else 0.0)
    return bits / 8 + (per_group / group_size if group_size > 0 else 0.0)


def fp8_block_bytes(rows: int, cols: int) -> float:
    """FP8 weights with one float32 scale per ``rows × cols`` block (DeepSeek-V3 layout)."""
    return 1.0 + 4.0 / (rows * cols)


WEIGHT_FORMATS: dict[str, tuple[float, str]] = {
    # name -> (bytes per quantized weight, label); bf16/fp16 mean "not quantized" (0).
    "bf16": (0.0, "bf16"),
    "fp16": (0.0, "fp16"),
    "fp8": (fp8_block_bytes(_FP8_BLOCK, _FP8_BLOCK), "fp8 block 128x128"),
    "int8": (1.0, "int8 per-channel"),
    "int4": (int_group_bytes(4, _INT_GROUP), "int4 g128"),
}
"""Weight formats a scenario may force with ``model.weights`` (overriding the config)."""


def _known(kind: str, name: str, table: dict) -> str:
    if name in table:
        return name
    raise CatalogError(f"unknown {kind} '{name}'", fix=f"use one of {', '.join(table)}")


def with_formats(m: ModelSpec, kv_dtype: str | None = None, weights: str | None = None):
    """``m`` with its KV dtype and/or weight format replaced (None keeps the config's)."""
    update: dict[str, Any] = {}
    if kv_dtype is not None:
        update["kv_bytes"] = KV_DTYPES[_known("KV dtype", kv_dtype, KV_DTYPES)]
    if weights is not None:
        qbytes, label = WEIGHT_FORMATS[_known("weight format", weights, WEIGHT_FORMATS)]
        # Unquantized tensors (embeddings, norms, router) are served in 16-bit.
        update.update(weight_bytes=2.0, quant_bytes=qbytes, weight_format=label)
    return m.model_copy(update=update) if update else m


# ---------------------------------------------------------------- quantization_config


def _qerror(where: str, key: str, what: str) -> CatalogError:
    path = f"quantization_config.{key}" if key else "quantization_config"
    return CatalogError(
        f"key '{path}' {what}",
        where=where,
        fix="set the format yourself with --set model.weights=fp8|int8|int4 "
        "(or model.weights in the scenario)",
    )


def _qint(qc: dict, key: str, where: str, allowed: tuple[int, ...] | None = None) -> int:
    v = qc.get(key)
    if isinstance(v, bool) or not isinstance(v, int) or abs(v) > 2**31:
        raise _qerror(where, key, f"must be an integer, got {v!r}")
    if allowed is not None and v not in allowed:
        raise _qerror(where, key, f"is {v}; supported: {', '.join(map(str, allowed))}")
    return v


def _fp8(qc: dict, where: str) -> tuple[float, str]:
    block = qc.get("weight_block_size")
    if block is None:  # per-tensor scale: negligible
        return 1.0, "fp8 per-tensor"
    if (
        not isinstance(block, list)
        or len(block) != 2
        or not all(isinstance(b, int) and not isinstance(b, bool) and 0 < b <= 2**20 for b in block)
    ):
        raise _qerror(where, "weight_block_size", f"must be [rows, cols], got {block!r}")
    return fp8_block_bytes(*block), f"fp8 block {block[0]}x{block[1]}"


def _gptq_awq(qc: dict, where: str, method: str) -> tuple[float, str]:
    bits_key = "bits" if "bits" in qc else "w_bit"
    group_key = "group_size" if "group_size" in qc else "q_group_size"
    bits = _qint(qc, bits_key, where, (2, 3, 4, 8))
    group = _qint(qc, group_key, where) if group_key in qc else _INT_GROUP
    if group == 0 or group < -1:
        raise _qerror(where, group_key, f"is {group}; use a positive group size or -1")
    zeros = bool(qc.get("zero_point", True)) if method == "awq" else True
    g = f"g{group}" if group > 0 else "per-channel"
    return int_group_bytes(bits, group, zeros), f"{method} int{bits} {g}"


def _compressed_tensors(qc: dict, where: str) -> tuple[float, str]:
    groups = qc.get("config_groups")
    if not isinstance(groups, dict) or not groups:
        raise _qerror(where, "config_groups", "must be a non-empty mapping")
    widths: dict[float, tuple[float, str]] = {}
    for name, group in groups.items():
        w = group.get("weights") if isinstance(group, dict) else None
        if not isinstance(w, dict):
            raise _qerror(where, f"config_groups.{name}.weights", "is missing")
        key = f"config_groups.{name}.weights"
        bits = _qint(w, "num_bits", where, (4, 8)) if "num_bits" in w else 8
        strategy = w.get("strategy", "tensor")
        nvfp4 = "nvfp4" in str(qc.get("format", ""))
        if strategy in ("tensor", "channel", "token"):
            width = bits / 8
        elif strategy == "group":
            size = _qint(w, "group_size", where)
            if size <= 0:
                raise _qerror(where, f"{key}.group_size", f"must be positive, got {size}")
            zeros = not w.get("symmetric", True)
            width = int_group_bytes(bits, size, zeros, scale_bytes=1.0 if nvfp4 else 2.0)
        elif strategy == "block":
            block = w.get("block_structure")
            if not (
                isinstance(block, list)
                and len(block) == 2
                and all(
                    isinstance(b, int) and not isinstance(b, bool) and 0 < b <= 2**20 for b in block
                )
            ):
                raise _qerror(
                    where, f"{key}.block_structure", f"must be [rows, cols], got {block!r}"
                )
            width = bits / 8 + 2.0 / (block[0] * block[1])
        else:
            raise _qerror(where, f"{key}.strategy", f"'{strategy}' is not modelled")
        widths[round(width, 9)] = (width, f"compressed-tensors {bits}-bit {strategy}")
    if len(widths) > 1:
        raise _qerror(where, "config_groups", "mixes weight widths across groups")
    return next(iter(widths.values()))


def quantization(qc: Any, where: str) -> tuple[float, str]:
    """(bytes per quantized weight, label) from a config's ``quantization_config``."""
    if not isinstance(qc, dict):
        raise _qerror(where, "", "must be a mapping")
    method = str(qc.get("quant_method", "")).lower()
    if method == "fp8":
        return _fp8(qc, where)
    if method in ("gptq", "awq"):
        return _gptq_awq(qc, where, method)
    if method == "compressed-tensors":
        return _compressed_tensors(qc, where)
    # Not an error yet: model.weights may replace it. Sizing these weights is (weight_bytes).
    return 0.0, f"{UNMODELLED}quant_method '{_short(qc.get('quant_method'))}'"


def _short(value: Any) -> str:
    text = str(value)
    return text if len(text) <= 40 else text[:40] + "…"
