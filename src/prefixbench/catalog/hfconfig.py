"""Read a Hugging Face ``config.json`` the user already has on disk into a ModelSpec.

Nothing is downloaded. Every problem is a CatalogError whose ``where`` is the file and whose
message names the offending key and how to fix it, so the CLI prints one line.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..errors import CatalogError
from .formats import quantization
from .layout import attention_pattern, moe_fields, refuse_unmodelled
from .specs import ModelSpec

_DTYPE_BYTES = {"bfloat16": 2.0, "float16": 2.0, "half": 2.0, "float32": 4.0, "float": 4.0}
_CONTEXT_KEYS = ("max_position_embeddings", "max_sequence_length", "seq_length")
MAX_INT = 2**31 - 1  # larger sizes are typos (or attacks), not models
MAX_CONFIG_BYTES = 16 * 2**20  # real configs are a few kB; anything this big is not one
# Per-architecture defaults of keys a config may omit (transformers' config classes):
# GemmaConfig, Gemma2Config and Gemma3TextConfig default tie_word_embeddings=True, head_dim=256.
_TIED_BY_DEFAULT = ("gemma",)
_HEAD_DIM_DEFAULT = {"gemma": 256}


class _Reader:
    """Typed access to one config dict, raising CatalogError that names the file and key."""

    def __init__(self, cfg: dict[str, Any], where: str, prefix: str) -> None:
        self.cfg = cfg
        self.where = where
        self.prefix = prefix  # "text_config." when the text model is nested

    def flag(self, key: str, default: bool) -> bool:
        """A true/false key: JSON true or false only (``"false"`` is not True)."""
        value = self.cfg.get(key)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise self.error(key, f"is {_short(value)}, not true or false", "write true or false")
        return value

    def error(self, key: str, what: str, fix: str) -> CatalogError:
        return CatalogError(f"key '{self.prefix}{key}' {what}", where=self.where, fix=fix)

    def _int(self, key: str, value: Any, minimum: int) -> int:
        integral = isinstance(value, int) or (isinstance(value, float) and value.is_integer())
        if isinstance(value, bool) or not integral or value < minimum:
            bound = "a positive integer" if minimum > 0 else "an integer >= 0"
            raise self.error(key, f"must be {bound}, got {_short(value)}", f"set it to {bound}")
        if value > MAX_INT:
            raise self.error(
                key, f"is too large ({_short(value)})", f"use a value of at most {MAX_INT:,}"
            )
        return int(value)

    def int_list(self, key: str, below: int) -> list[int]:
        """A list of integers in [0, below) (layer indices, 0/1 flags), or [] when absent."""
        value = self.cfg.get(key)
        if value is None:
            return []
        if not isinstance(value, list) or len(value) > MAX_INT:
            raise self.error(key, "must be a list of integers", "copy it from the model's config")
        for item in value:
            if isinstance(item, bool) or not isinstance(item, int) or not 0 <= item < below:
                raise self.error(
                    key, f"holds {_short(item)}", f"use integers from 0 to {below - 1}"
                )
        return value

    def required(self, key: str) -> int:
        if self.cfg.get(key) is None:
            raise self.error(
                key,
                "is missing",
                f'add "{key}": <positive int> (copy it from the model\'s config.json)',
            )
        return self._int(key, self.cfg[key], 1)

    def optional(self, key: str, default: int, minimum: int = 1) -> int:
        """``default`` when absent or null (e.g. DeepSeek's ``q_lora_rank: null``)."""
        value = self.cfg.get(key)
        return default if value is None else self._int(key, value, minimum)


def _short(value: Any) -> str:
    """``repr(value)`` cut to a readable length (a 5,000-digit integer is not a message)."""
    try:
        text = repr(value)
    except ValueError:  # an int too long to print
        return "an integer too long to print"
    return text if len(text) <= 40 else f"{text[:20]}…({len(text)} characters)"


def _read_json(path: Path) -> dict[str, Any]:
    import os

    where = str(path)
    if not os.path.lexists(path):  # a directory or FIFO is refused by read_capped below
        raise CatalogError(
            "config file not found",
            where=where,
            fix="pass the path of a Hugging Face config.json on disk (nothing is downloaded)",
        )
    from prefixbench.support.files import INT_DIGITS_HINT, read_capped

    try:
        text = read_capped(path, CatalogError, "config file").decode("utf-8")
    except UnicodeDecodeError as err:
        raise CatalogError(
            f"cannot read config file ({err})", where=where, fix="check the path"
        ) from err
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as err:
        raise CatalogError(
            f"invalid JSON at line {err.lineno}, column {err.colno}: {err.msg}",
            where=where,
            fix="fix the JSON syntax there (a config.json is one JSON object)",
        ) from err
    except (ValueError, RecursionError):  # the int-str limit, or nesting too deep
        raise CatalogError(
            "a number is too large or the JSON nested too deeply to read",
            where=where,
            fix=INT_DIGITS_HINT,
        ) from None
    if not isinstance(raw, dict):
        raise CatalogError(
            "config must be a JSON object", where=where, fix="use the model's config.json as is"
        )
    return raw


def _text_model(raw: dict[str, Any], where: str) -> _Reader:
    """Multimodal configs nest the language model under ``text_config``; use it when needed."""
    nested = raw.get("text_config")
    if "num_hidden_layers" not in raw and isinstance(nested, dict):
        return _Reader({**raw, **nested}, where, "text_config.")
    return _Reader(raw, where, "")


def _dtype_bytes(r: _Reader) -> float:
    key = "torch_dtype" if "torch_dtype" in r.cfg else "dtype"
    dtype = r.cfg.get(key)
    if dtype is None:
        return 2.0  # configs without a dtype are served in 16-bit
    if not isinstance(dtype, str) or dtype.lower() not in _DTYPE_BYTES:
        raise r.error(key, f"has unsupported value {dtype!r}", "use bfloat16, float16 or float32")
    return _DTYPE_BYTES[dtype.lower()]


def _model_type(cfg: dict[str, Any]) -> str:
    return str(cfg.get("model_type", "")).lower()


def _is_qwen2(cfg: dict[str, Any]) -> bool:
    archs = cfg.get("architectures") or []
    if not isinstance(archs, list):  # a hand-edited file: one name, or not a name at all
        archs = [archs]
    return _model_type(cfg).startswith("qwen2") or any(str(a).startswith("Qwen2") for a in archs)


def _max_context(r: _Reader) -> int:
    for key in _CONTEXT_KEYS:
        if r.cfg.get(key) is not None:
            return r.required(key)
    return r.required(_CONTEXT_KEYS[0])  # raises: names the usual key


def _name(path: Path) -> str:
    folder = path.resolve().parent.name if path.name == "config.json" else ""
    return (folder or path.stem).lower()


def _tied(r: _Reader) -> bool:
    return r.flag("tie_word_embeddings", _model_type(r.cfg).startswith(_TIED_BY_DEFAULT))


def _head_dim(r: _Reader, hidden: int, heads: int) -> int:
    family = next((f for f in _HEAD_DIM_DEFAULT if _model_type(r.cfg).startswith(f)), None)
    if r.cfg.get("head_dim") is None and family is None and hidden % heads:
        raise r.error(
            "head_dim",
            f"is missing and hidden_size {hidden} is not divisible by {heads} heads",
            'add "head_dim": <int>',
        )
    default = _HEAD_DIM_DEFAULT[family] if family else hidden // heads
    return r.optional("head_dim", default)


def _kv_heads(r: _Reader, heads: int, mla: bool) -> int:
    kv_heads = r.optional("num_key_value_heads", heads)
    if not mla and heads % kv_heads:
        raise r.error(
            "num_key_value_heads",
            f"({kv_heads}) does not divide num_attention_heads ({heads})",
            "use a divisor of the attention heads (each KV head serves a whole group)",
        )
    return kv_heads


def _weights(r: _Reader) -> dict[str, Any]:
    qc = r.cfg.get("quantization_config")
    if qc is None:
        return {}
    qbytes, label = quantization(qc, r.where)
    return {"quant_bytes": qbytes, "weight_format": label}


def _notes(r: _Reader) -> tuple[str, ...]:
    notes = []
    mtp = r.optional("num_nextn_predict_layers", 0, minimum=0)
    if mtp:
        notes.append(
            f"num_nextn_predict_layers={mtp}: the multi-token-prediction module (used only for "
            "speculative decoding) is not counted"
        )
    if r.cfg.get("mlp_bias") is True:
        notes.append("mlp_bias: the MLP biases (well under 0.1 % of the weights) are not counted")
    if isinstance(r.cfg.get("vision_config"), dict):
        notes.append("vision_config: the vision encoder is not counted")
    return tuple(notes)


def load_hf_config(path: Path) -> ModelSpec:
    """A ModelSpec from a Hugging Face ``config.json`` on disk (never downloaded)."""
    path = Path(path)
    where = str(path)
    r = _text_model(_read_json(path), where)
    refuse_unmodelled(r)

    layers = r.required("num_hidden_layers")
    hidden = r.required("hidden_size")
    heads = r.required("num_attention_heads")
    kv_lora_rank = r.optional("kv_lora_rank", 0, minimum=0)
    mla_need = 1 if kv_lora_rank else 0  # MLA widths are required only when MLA is on
    max_context = _max_context(r)
    moe = moe_fields(r, layers)
    dtype = _dtype_bytes(r)
    spec = dict(
        name=_name(path),
        layers=layers,
        hidden_size=hidden,
        heads=heads,
        head_dim=_head_dim(r, hidden, heads),
        kv_heads=_kv_heads(r, heads, bool(kv_lora_rank)),
        intermediate_size=moe.pop("intermediate_size", None) or r.required("intermediate_size"),
        vocab_size=r.required("vocab_size"),
        tied_embeddings=_tied(r),
        qkv_bias=r.flag("attention_bias", False) or _is_qwen2(r.cfg),
        max_context=max_context,
        kv_lora_rank=kv_lora_rank,
        q_lora_rank=r.optional("q_lora_rank", 0, minimum=0),
        qk_rope_head_dim=r.required("qk_rope_head_dim") if mla_need else 0,
        qk_nope_head_dim=r.required("qk_nope_head_dim") if mla_need else 0,
        v_head_dim=r.required("v_head_dim") if mla_need else 0,
        **moe,
        **attention_pattern(r, layers, max_context),
        weight_bytes=dtype,
        kv_bytes=dtype,
        **_weights(r),
        notes=_notes(r),
        source=where,
    )
    return ModelSpec(**spec)
