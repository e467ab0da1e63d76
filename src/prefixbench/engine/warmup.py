"""Warm-up traffic: the hot set of ``replicate_hotset`` crossing the link at the start.

With ``cluster.link.prewarm: link`` (docs/model.md "Warm-up traffic") each decode instance's
hot blocks are resident from the start (they hold memory) but not ready: at the first
arrival, prefill instance ``d mod P`` writes them to decode instance ``d`` as one transfer,
queued FCFS on the same NICs (or channel) as the requests' KV, so requests whose KV comes
next wait behind it; the blocks give hits from the moment it lands. With ``free`` (the
default, the seed's behaviour) they are ready at time zero and nothing moves.

The transfer's landing is a TRANSFER event whose payload is ``-(d + 1)`` (a request's is
its index, never negative). A block trimmed before the landing and brought back by a
request is that request's (it has a reference until it lands): the landing leaves it.
"""

from __future__ import annotations

import numpy as np

from . import layout as L
from .jit import entry, jit


def payload(d: int) -> int:
    """The TRANSFER event payload of decode instance ``d``'s prewarm."""
    return -(d + 1)


@entry
def send(IS, F, B8, d, t, nbytes):
    """Queue decode instance ``d``'s prewarm transfer at ``t``; clears its hot blocks'
    ready bit; returns the landing time (the NIC clocks advance like a request's)."""
    U = IS[L.IP_U]
    for h in range(U):
        B8[d * U + h] &= 0xFF ^ L.ST_READY
    p = d % IS[L.IP_NP]
    occupy = nbytes / F[L.FP_LINK_BPS]
    start = t
    fn = IS[L.H_FNIC]
    eg, ig = fn + p, fn + IS[L.IP_NP] + d
    if IS[L.IP_SHARED]:
        if F[eg] > start:
            start = F[eg]
        if F[ig] > start:
            start = F[ig]
        F[eg] = start + occupy
        F[ig] = start + occupy
    else:
        nc = IS[L.IP_NC]
        ch = IS[L.H_FCH] + (p * IS[L.IP_ND] + d) * nc
        c = 0
        for i in range(1, nc):
            if F[ch + i] < F[ch + c]:
                c = i
        if F[ch + c] > start:
            start = F[ch + c]
        F[ch + c] = start + occupy
    if start >= F[L.FP_TWARM]:
        F[L.G_LINK] += occupy
        nn = IS[L.IP_NP] + IS[L.IP_ND]
        F[eg + nn] += occupy
        F[ig + nn] += occupy
    return start + occupy + F[L.FP_LINK_LAT]


@jit
def landed(IS, B32, B8, d):
    """Decode instance ``d``'s hot blocks hold their KV: the idle ones still waiting for it
    become ready (a block a request holds is that request's)."""
    U = IS[L.IP_U]
    rs = 4 * U * d
    for h in range(U):
        s = B8[d * U + h]
        if s & L.ST_IN and not s & L.ST_READY and B32[rs + 4 * h + L.RS_REF] == 0:
            B8[d * U + h] = s | L.ST_READY


def hot_bytes(hot_tokens: np.ndarray, kv_bpt: float) -> float:
    return float(hot_tokens.sum()) * kv_bpt
