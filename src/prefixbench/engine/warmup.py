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
from . import paging as pg
from . import refresh as rf
from .blocks import rs_trim
from .disagg import mem_changed
from .jit import entry, jit
from .nics import hold
from .queues import lru_append, push


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
    return link_send(IS, F, d, t, nbytes)


@jit
def link_send(IS, F, d, t, nbytes):
    """Occupy the link from prefill instance ``d mod P`` to ``d`` for ``nbytes`` from ``t``
    (FCFS like a request's KV); returns the landing time."""
    p = d % IS[L.IP_NP]
    occupy = nbytes / F[L.FP_LINK_BPS]
    start = hold(IS, F, p, d, t, occupy)[0]
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


# ---------------------------------------------------------------- refresh


@jit
def refresh(IS, F, R, B32, B8, EHT, EHI, TLF, TLI, t):
    """Re-rank the hot set from the block uses since the last refresh (most used first,
    ties lowest id, taken while their tokens fit the capacity: the first hot set's rule),
    make it the set requests persist, and warm every decode instance with the blocks it
    lacks (in rank order, trimming idle replicas LRU for room; an instance stops at the
    first block that does not fit), over the link or free; then schedule the next refresh
    while requests remain."""
    s = rf.section(IS)
    U, D, hot = IS[L.IP_U], IS[L.IP_ND], IS[L.H_HOT]
    cnt, tok, order = s + rf.S_N, s + rf.S_N + U, s + rf.S_N + 2 * U
    for h in range(U):
        B8[hot + h] = 0
    total = 0.0
    k = 0
    while True:
        best = -1
        for h in range(U):
            if F[cnt + h] > 0.0 and B8[hot + h] == 0 and (best == -1 or F[cnt + h] > F[cnt + best]):
                best = h
        if best == -1 or total + F[tok + best] > F[s + rf.S_CAP]:
            break
        total += F[tok + best]
        B8[hot + best] = 1
        F[order + k] = best
        k += 1
    for h in range(U):
        F[cnt + h] = 0.0
    link = F[s + rf.S_LINK] != 0.0
    budget = IS[L.IP_BUDGET]
    for d in range(D):
        b = L.DI0 + d * L.NDI
        rs = 4 * U * d
        # paged: the blocks of the iterations started by now are taken first (and the idle
        # replicas those trim), as at an admission: the free memory is today's, not the
        # last boundary's
        if IS[L.IP_PAGED] and pg.sync(IS, F, R, B32, B8, d, t):
            mem_changed(IS, F, TLF, TLI, d, t)
        added = 0
        for i in range(k):
            h = np.int64(F[order + i])
            if B8[d * U + h] & L.ST_IN:
                continue
            n_tok = np.int64(F[tok + h])
            free = budget - IS[b + L.D_PRIV] - IS[b + L.D_USED]
            if free < n_tok:
                if free + IS[b + L.D_IDLE] < n_tok:
                    break
                rs_trim(IS, F, B32, B8, d, n_tok - free, t)
            B32[rs + 4 * h + L.RS_TOK] = n_tok
            B32[rs + 4 * h + L.RS_REF] = 0
            B8[d * U + h] = L.ST_IN | L.ST_INACT if link else L.ST_IN | L.ST_INACT | L.ST_READY
            lru_append(B32, IS, b + L.D_LRUH, rs, L.RS_PREV, L.RS_NEXT, h)
            IS[b + L.D_USED] += n_tok
            IS[b + L.D_IDLE] += n_tok
            added += n_tok
        if added:
            F[s + rf.S_BYTES] += added * F[L.FP_DC + L.C_KV]
            mem_changed(IS, F, TLF, TLI, d, t)
            if link:
                land = link_send(IS, F, d, t, added * F[L.FP_DC + L.C_KV])
                push(EHT, EHI, IS, land, L.EV_TRANSFER, -(d + 1), 0)
    n = IS[L.IP_N]
    if IS[L.GI_INSYS] > 0 or F[IS[L.H_FT] + L.T_ARR * n + n - 1] > t:
        push(EHT, EHI, IS, t + F[s + rf.S_PERIOD], L.EV_TIMEOUT, -1, 0)
