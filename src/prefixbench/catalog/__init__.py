"""Built-in presets: models, accelerators and links, kept as cited data.

Registries are plain dicts keyed by the names users type. ``get_model`` also accepts the
path of a Hugging Face ``config.json`` on disk (never downloaded).
"""

from __future__ import annotations

from pathlib import Path

from ..errors import CatalogError
from ..suggest import did_you_mean
from .accelerators import ACCELERATORS
from .links import LINKS
from .models import MODELS
from .specs import AcceleratorSpec, LinkSpec, ModelSpec

__all__ = [
    "ACCELERATORS",
    "LINKS",
    "MODELS",
    "AcceleratorSpec",
    "LinkSpec",
    "ModelSpec",
    "get_accelerator",
    "get_link",
    "get_model",
]


def _lookup(kind: str, name: str, registry: dict):
    key = name.strip().lower()
    if key in registry:
        return registry[key]
    raise CatalogError(
        f"unknown {kind} '{name}'",
        fix=did_you_mean(name, registry) + " (see `prefixbench catalog`)",
    )


def get_model(name: str) -> ModelSpec:
    """A catalog model by name, or a model read from a ``config.json`` path."""
    if name.endswith(".json") or "/" in name or _is_file(name):
        from .hfconfig import load_hf_config

        return load_hf_config(Path(name))
    return _lookup("model", name, MODELS)


def _is_file(name: str) -> bool:
    try:
        return Path(name).is_file()
    except (OSError, ValueError):  # a name too long for a path, or with a NUL byte
        return False


def get_accelerator(name: str) -> AcceleratorSpec:
    return _lookup("accelerator", name, ACCELERATORS)


def get_link(name: str) -> LinkSpec:
    return _lookup("link", name, LINKS)
