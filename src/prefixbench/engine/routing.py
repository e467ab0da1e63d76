"""Routing registries: which prefill and which decode instance serves a request.

Each router is a function ``(state, rid) -> instance index``; ``state`` exposes per-instance
load arrays. Keyed by the names scenarios use.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Router = Callable[[Any, int], int]


def _argmin(values) -> int:
    best, best_i = values[0], 0
    for i in range(1, len(values)):
        if values[i] < best:
            best, best_i = values[i], i
    return best_i


def prefill_least_tokens(state: Any, rid: int) -> int:
    """The prefill instance with the fewest queued and running prompt tokens (ties: lowest index)."""
    return _argmin(state.prefill_load)


def decode_least_load(state: Any, rid: int) -> int:
    """The decode instance with the fewest admitted-and-unfinished requests (ties: lowest index)."""
    return _argmin(state.decode_load)


def decode_prefix_affinity(state: Any, rid: int) -> int:
    """The decode instance whose resident replicas cover the longest leading run of the
    request's blocks; ties (including no replica anywhere) go to the least-loaded instance.
    Replicas only pay off when routing keeps locality."""
    i0, i1 = state.ptr[rid], state.ptr[rid + 1]
    if i1 == i0 or len(state.dec) == 1:
        return decode_least_load(state, rid)
    chain = state.bh[i0:i1]
    best, best_i, loads = -1, 0, state.decode_load
    for i, dec in enumerate(state.dec):
        n = dec.store.match(chain)
        if n > best or (n == best and loads[i] < loads[best_i]):
            best, best_i = n, i
    return best_i


def _round_robin(kind: str) -> Router:
    def route(state: Any, rid: int) -> int:
        n = state.counts[kind]
        i = state.rr[kind] % n
        state.rr[kind] += 1
        return i

    route.__doc__ = f"{kind} instances in turn."
    return route


PREFILL_ROUTERS: dict[str, Router] = {
    "least_tokens": prefill_least_tokens,
    "round_robin": _round_robin("prefill"),
}
DECODE_ROUTERS: dict[str, Router] = {
    "least_load": decode_least_load,
    "prefix_affinity": decode_prefix_affinity,
    "round_robin": _round_robin("decode"),
}
