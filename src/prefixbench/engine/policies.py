"""The hand-off policies: names users type, the engine's integer code and what each does.

At hand-off the engine asks the policy three things (disagg.admit / disagg.handoff): which
resident replica blocks the request may use, which of its blocks to keep as replicas
afterwards, and how the prefix KV reaches the decode node (moved over the link or
recomputed there). A new policy is a new code handled in those two compiled helpers and a
new entry in prefixbench/registry/policies.py; this table derives from it.
"""

from __future__ import annotations

from typing import NamedTuple

from ..registry import POLICIES as _REGISTRY


class Entry(NamedTuple):
    code: int
    description: str


# from the registry (prefixbench/registry/policies.py); tests/test_registry.py checks each
# code against engine/layout.py's POL_* constants
POLICIES: dict[str, Entry] = {p.name: Entry(p.code, p.mechanism) for p in _REGISTRY}
