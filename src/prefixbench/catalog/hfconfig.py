"""Read a Hugging Face ``config.json`` the user already has on disk into a ModelSpec.

Nothing is downloaded. Every problem is a CatalogError whose ``where`` is the file and whose
message names the offending key and how to fix it, so the CLI prints one line.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..errors import CatalogError
from .specs import ModelSpec

_DTYPE_BYTES = {"bfloat16": 2.0, "float16": 2.0, "half": 2.0, "float32": 4.0, "float": 4.0}
_CONTEXT_KEYS = ("max_position_embeddings", "max_sequence_length", "seq_length")


class _Reader:
    """Typed access to one config dict, raising CatalogError that names the file and key."""

    def __init__(self, cfg: dict[str, Any], where: str, prefix: str) -> None:
        self.cfg = cfg
        self.where = where
        self.prefix = prefix  # "text_config." when the text model is nested

    def error(self, key: str, what: str, fix: str) -> CatalogError:
        return CatalogError(f"key '{self.prefix}{key}' {what}", where=self.where, fix=fix)

    def _int(self, key: str, value: Any, minimum: int) -> int:
        integral = isinstance(value, int) or (isinstance(value, float) and value.is_integer())
        if isinstance(value, bool) or not integral or value < minimum:
            bound = "a positive integer" if minimum > 0 else "an integer >= 0"
            raise self.error(key, f"must be {bound}, got {value!r}", f"set it to {bound}")
        return int(value)

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


def _read_json(path: Path) -> dict[str, Any]:
    import os

    where = str(path)
    if not os.path.lexists(path):  # a directory or FIFO is refused by read_capped below
        raise CatalogError(
            "config file not found",
            where=where,
            fix="pass the path of a Hugging Face config.json on disk (nothing is downloaded)",
        )
    from ..files import INT_DIGITS_HINT, read_capped

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


def _is_qwen2(cfg: dict[str, Any]) -> bool:
    archs = cfg.get("architectures") or []
    if not isinstance(archs, list):  # a hand-edited file: one name, or not a name at all
        archs = [archs]
    model_type = str(cfg.get("model_type", ""))
    return model_type.startswith("qwen2") or any(str(a).startswith("Qwen2") for a in archs)


def _max_context(r: _Reader) -> int:
    for key in _CONTEXT_KEYS:
        if r.cfg.get(key) is not None:
            return r.required(key)
    return r.required(_CONTEXT_KEYS[0])  # raises: names the usual key


def _name(path: Path) -> str:
    folder = path.resolve().parent.name if path.name == "config.json" else ""
    return (folder or path.stem).lower()


def load_hf_config(path: Path) -> ModelSpec:
    """A ModelSpec from a Hugging Face ``config.json`` on disk (never downloaded)."""
    path = Path(path)
    where = str(path)
    r = _text_model(_read_json(path), where)

    layers = r.required("num_hidden_layers")
    hidden = r.required("hidden_size")
    heads = r.required("num_attention_heads")
    if r.cfg.get("head_dim") is None and hidden % heads:
        raise r.error(
            "head_dim",
            f"is missing and hidden_size {hidden} is not divisible by {heads} heads",
            'add "head_dim": <int>',
        )
    head_dim = r.optional("head_dim", hidden // heads)

    kv_lora_rank = r.optional("kv_lora_rank", 0, minimum=0)
    mla_need = 1 if kv_lora_rank else 0  # MLA widths are required only when MLA is on
    n_routed = r.optional("n_routed_experts", 0, minimum=0)
    moe_layer_freq = r.optional("moe_layer_freq", 1)
    if n_routed and moe_layer_freq != 1:
        raise r.error(
            "moe_layer_freq",
            f"is {moe_layer_freq}; only MoE in every layer after first_k_dense_replace is modelled",
            "use a model with moe_layer_freq 1",
        )

    spec = dict(
        name=_name(path),
        layers=layers,
        hidden_size=hidden,
        heads=heads,
        kv_heads=r.optional("num_key_value_heads", heads),
        head_dim=head_dim,
        intermediate_size=r.required("intermediate_size"),
        vocab_size=r.required("vocab_size"),
        tied_embeddings=bool(r.cfg.get("tie_word_embeddings", False)),
        qkv_bias=bool(r.cfg.get("attention_bias", False)) or _is_qwen2(r.cfg),
        max_context=_max_context(r),
        kv_lora_rank=kv_lora_rank,
        q_lora_rank=r.optional("q_lora_rank", 0, minimum=0),
        qk_rope_head_dim=r.required("qk_rope_head_dim") if mla_need else 0,
        qk_nope_head_dim=r.required("qk_nope_head_dim") if mla_need else 0,
        v_head_dim=r.required("v_head_dim") if mla_need else 0,
        n_routed_experts=n_routed,
        n_shared_experts=r.optional("n_shared_experts", 0, minimum=0) if n_routed else 0,
        experts_per_token=r.required("num_experts_per_tok") if n_routed else 0,
        moe_intermediate_size=r.required("moe_intermediate_size") if n_routed else 0,
        first_dense_layers=r.optional("first_k_dense_replace", 0, minimum=0) if n_routed else 0,
        weight_bytes=_dtype_bytes(r),
        kv_bytes=_dtype_bytes(r),
        source=where,
    )
    if spec["experts_per_token"] > n_routed or spec["first_dense_layers"] > layers:
        key = (
            "num_experts_per_tok"
            if spec["experts_per_token"] > n_routed
            else "first_k_dense_replace"
        )
        raise r.error(key, "exceeds n_routed_experts / num_hidden_layers", "check the MoE keys")
    return ModelSpec(**spec)
