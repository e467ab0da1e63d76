"""Hugging Face model ids (``ORG/NAME``) wherever a model is accepted.

An id resolves, in order, to:

1. the catalog preset whose ``hf_id`` it is (``meta-llama/Llama-3.1-8B`` → ``llama-3.1-8b``),
   or one of the listed same-shape variants (``HF_ALIASES``);
2. the ``config.json`` of the model's snapshot in the local Hugging Face hub cache
   (``$HF_HUB_CACHE``, else ``$HF_HOME/hub``, else ``~/.cache/huggingface/hub``; the layout
   is ``models--ORG--NAME/snapshots/REVISION/config.json``, the revision named by
   ``refs/main`` first);
3. with the optional ``huggingface_hub`` package installed (``pip install
   'prefixbench[hf]'``) and ``HF_HUB_OFFLINE`` unset, the config alone fetched into that
   cache (``hf_hub_download(id, "config.json")``), where it is kept for the next time.

Offline and uncached, the error is one line saying how to get the config. Weights are never
downloaded.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from ..errors import CatalogError

# Instruct/chat variants whose config.json has the base model's shape (same layers, widths,
# heads, vocabulary and context; Meta's model cards: "instruction tuned" versions of the same
# architecture). Only variants checked this way are listed.
HF_ALIASES = {
    "meta-llama/llama-3.1-8b-instruct": "llama-3.1-8b",
    "meta-llama/llama-3.1-70b-instruct": "llama-3.1-70b",
}

_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")


def looks_like_hf_id(name: str) -> bool:
    """``ORG/NAME`` with no ``.json`` ending and no file of that name on disk."""
    if not _ID.match(name) or name.lower().endswith(".json"):
        return False
    try:
        return not Path(name).exists()
    except (OSError, ValueError):
        return True


def catalog_name(hf_id: str) -> str | None:
    """The catalog preset an HF id names, or None."""
    from .models import MODELS

    key = hf_id.strip().lower()
    for name, spec in MODELS.items():
        if spec.hf_id and spec.hf_id.lower() == key:
            return name
    return HF_ALIASES.get(key)


def hub_cache() -> Path:
    """The hub cache folder, as huggingface_hub finds it."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    home = os.environ.get("HF_HOME") or os.path.join("~", ".cache", "huggingface")
    return Path(home).expanduser() / "hub"


def cached_config(hf_id: str, cache: Path | None = None) -> Path | None:
    """The cached ``config.json`` of ``hf_id`` (``refs/main`` first, else the newest)."""
    org, name = hf_id.split("/", 1)
    root = (cache or hub_cache()) / f"models--{org}--{name}"
    snapshots = root / "snapshots"
    ref = root / "refs" / "main"
    try:
        if ref.is_file():
            pinned = snapshots / ref.read_text().strip() / "config.json"
            if pinned.is_file():
                return pinned
        found = sorted(snapshots.glob("*/config.json"), key=lambda p: p.stat().st_mtime)
    except OSError:
        return None
    return found[-1] if found else None


def _fetch(hf_id: str) -> Path | None:
    """config.json fetched into the hub cache, or None without the extra or offline."""
    if os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on"):
        return None
    try:
        from huggingface_hub import hf_hub_download  # optional extra: prefixbench[hf]
    except ImportError:
        return None
    try:
        return Path(hf_hub_download(hf_id, "config.json", cache_dir=str(hub_cache())))
    except Exception:  # noqa: BLE001 - offline, gated, missing: all mean "not fetched"
        return None


def resolve_hf_id(hf_id: str):
    """The ModelSpec an HF id names (catalog, then the hub cache, then a fetch)."""
    from . import MODELS
    from .hfconfig import load_hf_config

    preset = catalog_name(hf_id)
    if preset is not None:
        return MODELS[preset]
    path = cached_config(hf_id) or _fetch(hf_id)
    if path is None:
        raise CatalogError(
            f"model '{hf_id}' is not in the catalog nor in the Hugging Face cache ({hub_cache()})",
            fix=f"fetch its config with `huggingface-cli download {hf_id} config.json`, or "
            "`pip install 'prefixbench[hf]'` to fetch it when online, or pass a config.json "
            "path",
        )
    return load_hf_config(path).model_copy(update={"name": hf_id, "hf_id": hf_id})
