"""Strict numbers in user files: a pydantic model in lax mode reads ``true`` as 1.0 and
``"100"`` as 100; a hardware, efficiency or calibration file must say a number plainly
(docs/reliability.md, "One validation path")."""

from __future__ import annotations

import types
import typing


def _numeric(annotation) -> bool:
    """Whether a field's type is a number (int or float, optionally None)."""
    args = typing.get_args(annotation) if isinstance(annotation, types.UnionType) or \
        typing.get_origin(annotation) is typing.Union else (annotation,)  # fmt: skip
    kinds = [a for a in args if a is not type(None)]
    return bool(kinds) and all(a in (int, float) for a in kinds)


def loose_number(data: dict, model) -> tuple[str, object] | None:
    """The first (field, value) of ``data`` where ``model`` wants a number and the file gives
    a boolean or text that is not a number; None when every number is plain."""
    fields = getattr(model, "model_fields", {})
    for k, v in data.items():
        info = fields.get(k)
        if info is None or not _numeric(info.annotation):
            continue
        if isinstance(v, bool) or (isinstance(v, str) and not _number_text(v)):
            return k, v
    return None


def _number_text(text: str) -> bool:
    """YAML 1.1 reads ``1e-3`` (no dot) as text: that is still a number; ``"yes"`` is not."""
    try:
        float(text)
    except ValueError:
        return False
    return text.strip().lower() not in ("nan", "inf", "+inf", "-inf", "infinity")
