"""Built-in presets: models, accelerators and links, kept as cited data.

Registries are plain dicts keyed by the names users type. ``get_model`` also accepts a
Hugging Face id (``hub.py``: the catalog's own ids, then the local hub cache) and the path of
a Hugging Face ``config.json`` on disk; ``get_accelerator`` and
``get_link`` the path of a hardware YAML file (``userfile``).
"""

from __future__ import annotations

from pathlib import Path

from prefixbench.support.suggest import did_you_mean

from ..errors import CatalogError
from .accelerators import ACCELERATORS
from .links import LINKS
from .models import MODELS
from .specs import AcceleratorSpec, LinkSpec, ModelSpec
from .userfile import is_path, load_hardware

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
    "hardware_label",
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
    """A catalog model by name, a Hugging Face id (``catalog/hub.py``), or a model read from
    a ``config.json`` path."""
    from .hub import looks_like_hf_id, resolve_hf_id

    if looks_like_hf_id(name):
        return resolve_hf_id(name)
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
    """A catalog accelerator by name, or one read from a hardware YAML file path."""
    if is_path(name):
        return load_hardware(name, "accelerator")  # type: ignore[return-value]
    return _lookup("accelerator", name, ACCELERATORS)


def get_link(name: str) -> LinkSpec:
    """A catalog link by name, or one read from a hardware YAML file path."""
    if is_path(name):
        return load_hardware(name, "link")  # type: ignore[return-value]
    return _lookup("link", name, LINKS)


def hardware_label(ref: str) -> str:
    """What to call an accelerator or link in a title: its name, also when given as a file."""
    if not is_path(ref):
        return ref
    try:
        return load_hardware(ref).name
    except CatalogError:
        return ref
