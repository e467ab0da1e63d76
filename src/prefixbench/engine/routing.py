"""Routers: which prefill and which decode instance serves a request.

Names users type → the engine's integer code (disagg.route_prefill, disagg.route_decode)
and a description; used to validate scenarios, for CLI choices and the docs.
"""

from __future__ import annotations

from ..registry import routers as _registry
from .policies import Entry

# from the registry (prefixbench/registry/routers.py)
PREFILL_ROUTERS: dict[str, Entry] = {
    r.name: Entry(r.code, r.description) for r in _registry.PREFILL_ROUTERS
}
DECODE_ROUTERS: dict[str, Entry] = {
    r.name: Entry(r.code, r.description) for r in _registry.DECODE_ROUTERS
}
