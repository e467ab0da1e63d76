"""The hand-off policies: names users type, the engine's integer code and what each does.

At hand-off the engine asks the policy three things (disagg.admit / disagg.handoff): which
resident replica blocks the request may use, which of its blocks to keep as replicas
afterwards, and how the prefix KV reaches the decode node (moved over the link or
recomputed there). A new policy is a new code handled in those two compiled helpers and a
new entry here; the registry validates names, feeds CLI choices and the docs.
"""

from __future__ import annotations

from typing import NamedTuple

from .layout import (
    POL_ALL_LRU,
    POL_COND,
    POL_COST_AWARE,
    POL_HOTSET,
    POL_RECOMPUTE,
    POL_TIERED,
    POL_TRANSFER,
)


class Entry(NamedTuple):
    code: int
    description: str


POLICIES: dict[str, Entry] = {
    "transfer_per_request": Entry(
        POL_TRANSFER, "the whole prompt KV (prefix + suffix) crosses the link on every request"
    ),
    "recompute_on_decode": Entry(
        POL_RECOMPUTE,
        "only the KV the prefill node computed crosses; the cached prefix is rebuilt on decode",
    ),
    "replicate_hotset": Entry(
        POL_HOTSET,
        "a prewarmed set of globally hot blocks stays resident; other misses are not kept",
    ),
    "replicate_all_lru": Entry(
        POL_ALL_LRU,
        "every transferred block becomes a resident replica, trimmed LRU when memory is short",
    ),
    "replicate_tiered": Entry(
        POL_TIERED,
        "as all-LRU, but blocks trimmed from HBM drop to a host-DRAM tier and come back over "
        "the host path when that lands before the link would",
    ),
    "cost_aware": Entry(
        POL_COST_AWARE,
        "per request, the cheaper of transfer and recompute now (queues, batch stall); "
        "keeps blocks used before (decayed count)",
    ),
    "conditional_disagg": Entry(
        POL_COND,
        "Dynamo's conditional disaggregation: a prompt whose uncached part is short, or "
        "mostly resident on its decode instance, prefills there (chunks in the decode "
        "iterations); others prefill remotely, as all-LRU",
    ),
}
