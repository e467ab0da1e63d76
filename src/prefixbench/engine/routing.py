"""Routers: which prefill and which decode instance serves a request.

Names users type → the engine's integer code (disagg.route_prefill, disagg.route_decode)
and a description; used to validate scenarios, for CLI choices and the docs.
"""

from __future__ import annotations

from .policies import Entry

PREFILL_ROUTERS: dict[str, Entry] = {
    "least_tokens": Entry(
        0,
        "the prefill instance with the fewest queued and running prompt tokens (ties: lowest index)",
    ),
    "round_robin": Entry(1, "prefill instances in turn"),
    "kv_aware": Entry(
        2,
        "Dynamo's KV router: the lowest weight x uncached prompt tokens (after the "
        "instance's prefix-cache overlap) + queued prompt tokens (ties: lowest index)",
    ),
}
DECODE_ROUTERS: dict[str, Entry] = {
    "least_load": Entry(
        0,
        "the decode instance with the fewest admitted-and-unfinished requests (ties: lowest index)",
    ),
    "prefix_affinity": Entry(
        1,
        "the decode instance whose resident replicas cover the longest leading run of the "
        "request's blocks; ties (including no replica anywhere) go to the least loaded",
    ),
    "round_robin": Entry(2, "decode instances in turn"),
    "kv_aware": Entry(
        3,
        "Dynamo's KV router: the lowest weight x prompt tokens not resident there + KV "
        "tokens its admitted requests hold (ties: lowest index)",
    ),
}
