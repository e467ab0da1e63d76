"""The four hand-off policies as strategies behind one interface.

At hand-off the core asks the policy three things: which resident replica blocks the
request may use, which of its blocks to keep as replicas afterwards, and how the prefix
KV reaches the decode node (moved over the link or recomputed there). A new policy (for
instance a cost-aware one) is a subclass registered in ``POLICIES``.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Handoff:
    transfer_tokens: int  # tokens whose KV crosses the link
    recompute_tokens: int  # prefix tokens the decode instance recomputes itself


class HandoffPolicy:
    name = "base"
    uses_replicas = False  # may serve blocks from decode-side replicas
    persist_all = False  # keep every transferred block as a replica (LRU)

    def __init__(self, hot_blocks: frozenset[int] = frozenset()) -> None:
        self.hot_blocks = hot_blocks

    def persists(self, block: int) -> bool:
        """Keep ``block`` resident on the decode node once its transfer lands?"""
        return self.persist_all

    def handoff(self, prompt: int, prefill_hit: int, replica_hit: int) -> Handoff:
        """How the prompt's KV reaches the decode node, given the hits on both sides."""
        return Handoff(prompt - replica_hit, 0)


class TransferPerRequest(HandoffPolicy):
    """The whole prompt KV (prefix + suffix) crosses the link on every request."""

    name = "transfer_per_request"

    def handoff(self, prompt: int, prefill_hit: int, replica_hit: int) -> Handoff:
        return Handoff(prompt, 0)


class RecomputeOnDecode(HandoffPolicy):
    """Only the KV the prefill node computed crosses; the cached prefix is rebuilt on decode."""

    name = "recompute_on_decode"

    def handoff(self, prompt: int, prefill_hit: int, replica_hit: int) -> Handoff:
        return Handoff(prompt - prefill_hit, prefill_hit)


class ReplicateHotset(HandoffPolicy):
    """A prewarmed set of globally hot blocks stays resident; other misses are not kept."""

    name = "replicate_hotset"
    uses_replicas = True

    def persists(self, block: int) -> bool:
        return block in self.hot_blocks  # a trimmed hot block is re-kept on its next transfer


class ReplicateAllLRU(HandoffPolicy):
    """Every transferred block becomes a resident replica, trimmed LRU when memory is short."""

    name = "replicate_all_lru"
    uses_replicas = True
    persist_all = True


POLICIES: dict[str, type[HandoffPolicy]] = {
    p.name: p for p in (TransferPerRequest, RecomputeOnDecode, ReplicateHotset, ReplicateAllLRU)
}
