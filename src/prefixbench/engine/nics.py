"""The KV link's queues: the NIC groups' (or private channels') FCFS clocks and busy time.

Shared NICs (docs/model.md "NICs"): a move from prefill instance ``p`` to decode instance
``d`` starts when ``p``'s egress group and ``d``'s ingress group are both free and holds
both (an RDMA write occupies both ends). Private paths: the least busy channel of the
(``p``, ``d``) pair (ties: the lowest index). Every mover — a request's KV (disagg.send_kv),
a layer-wise chunk (streaming), a hot-set warm-up (warmup) — goes through ``hold``; every
estimate of when a move would start (disagg.link_start, costaware.link_ready) through
``free_at``, so that they cannot disagree.
"""

from __future__ import annotations

from . import layout as L
from .jit import jit
from .window import clipped, in_window


@jit
def _channel(IS, F, p, d):
    """Index in F of the least busy private channel of (p, d)."""
    ch = IS[L.H_FCH] + (p * IS[L.IP_ND] + d) * IS[L.IP_NC]
    c = 0
    for i in range(1, IS[L.IP_NC]):
        if F[ch + i] < F[ch + c]:
            c = i
    return ch + c


@jit
def free_at(IS, F, p, d, t):
    """When a move from ``p`` to ``d`` issued at ``t`` would start (nothing reserved)."""
    start = t
    if IS[L.IP_SHARED]:
        fn = IS[L.H_FNIC]
        if F[fn + p] > start:
            start = F[fn + p]
        if F[fn + IS[L.IP_NP] + d] > start:
            start = F[fn + IS[L.IP_NP] + d]
    elif F[_channel(IS, F, p, d)] > start:
        start = F[_channel(IS, F, p, d)]
    return start


@jit
def hold(IS, F, p, d, ready, occupy):
    """Reserve the link from ``p`` to ``d`` for ``occupy`` seconds, from ``ready`` or when
    it is free; books the busy time inside the measured window on the link and on both
    ends; returns (start, channel index within the pair: 0 on shared NICs)."""
    start = free_at(IS, F, p, d, ready)
    fn = IS[L.H_FNIC]
    eg, ig = fn + p, fn + IS[L.IP_NP] + d
    c = 0
    if IS[L.IP_SHARED]:
        F[eg] = start + occupy
        F[ig] = start + occupy
    else:
        ch = _channel(IS, F, p, d)
        c = ch - (IS[L.H_FCH] + (p * IS[L.IP_ND] + d) * IS[L.IP_NC])
        F[ch] = start + occupy
    if in_window(F, start):
        busy = clipped(F, start, start + occupy)
        nn = IS[L.IP_NP] + IS[L.IP_ND]
        F[L.G_LINK] += busy
        F[eg + nn] += busy
        F[ig + nn] += busy
    return start, c
