"""Routers: which prefill and which decode instance serves a request (docs/model.md §1.3).
Names users type → the engine's integer code (engine/disagg.py route_prefill,
route_decode) and a description."""

from __future__ import annotations

from typing import NamedTuple


class Router(NamedTuple):
    name: str
    code: int
    description: str


PREFILL_ROUTERS: tuple[Router, ...] = (
    Router(
        "least_tokens",
        0,
        "the prefill instance with the fewest queued and running prompt tokens (ties: lowest index)",
    ),
    Router("round_robin", 1, "prefill instances in turn"),
)
DECODE_ROUTERS: tuple[Router, ...] = (
    Router(
        "least_load",
        0,
        "the decode instance with the fewest admitted-and-unfinished requests (ties: lowest index)",
    ),
    Router(
        "prefix_affinity",
        1,
        "the decode instance whose resident replicas cover the longest leading run of the "
        "request's blocks; ties (including no replica anywhere) go to the least loaded",
    ),
    Router("round_robin", 2, "decode instances in turn"),
)
