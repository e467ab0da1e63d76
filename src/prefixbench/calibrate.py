"""Efficiency blocks from files: load one (for `cost --efficiency` and scenarios)."""

from __future__ import annotations

from pathlib import Path

from pydantic import ValidationError

from .costmodel import Efficiency
from .errors import ScenarioError


def load_efficiency(path: str | Path) -> Efficiency:
    """An efficiency block from a YAML file (top level, or under an ``efficiency`` key)."""
    from .loader import format_validation_error, read_yaml

    path = Path(path)
    data = read_yaml(path)
    if isinstance(data, dict) and isinstance(data.get("efficiency"), dict):
        data = data["efficiency"]
    if not isinstance(data, dict):
        raise ScenarioError(
            "not an efficiency block", where=str(path), fix="write a mapping of mfu_prefill, mbu…"
        )
    data = {k: v for k, v in data.items() if k in Efficiency.model_fields}
    try:
        return Efficiency.model_validate(data)
    except ValidationError as e:
        raise format_validation_error(e, str(path)) from None
