"""Layer-wise KV streaming (``cluster.link.streaming: layerwise``, docs/model.md §1.7.1).

A prefill step of duration ``T`` over a model of ``L`` layers computes layer ``l``'s KV by
``t_s + (l + 1)·T/L`` (the step's time spread evenly over its layers). With layer-wise
streaming the decode instance admits the request when its prefill step starts (the hand-off
moves from the step's end to its start), and the KV then moves in chunks on the shared NIC
groups, FCFS per chunk (a chunk starts when it is ready and both the egress and the
ingress group are free, and holds both):

* the part of the moved prompt the prefill node had cached (its prefix-cache hit) is one
  chunk, ready at admission;
* the part the step computes is ``L`` chunks of ``1/L`` of its bytes, layer ``l``'s ready
  when layer ``l`` is computed.

The chunks of the requests of one step go cached parts first, then layer by layer, in batch
order within a layer. A request admitted later (it waited for decode memory) sends its
chunks alone, each ready at the later of its admission and its layer's end. The KV has
landed one link latency after its last chunk ends. Alone on a link that keeps pace
(``bytes/(L·B) <= T/L``) only the last layer's share is exposed after the prefill ends.

The timeline shows one ``kv`` slice per request, from its first chunk's start to its last
chunk's end; the slices of requests sharing a step interleave, so they overlap on a track.
"""

from __future__ import annotations

import numpy as np

from . import layout as L
from .jit import jit
from .nics import hold
from .queues import push
from .timeline import record


@jit
def _chunk(IS, F, p, d, ready, occupy):
    """One chunk of ``occupy`` seconds from prefill ``p`` to decode ``d``, FCFS on both NIC
    groups; returns its start."""
    return hold(IS, F, p, d, ready, occupy)[0]


@jit
def _split(IS, R, rid):
    """(cached tokens, computed tokens) of the request's moved KV: it moves the last
    ``transfer_tokens`` of its prompt, of which the last ``prompt − prefill_hit`` were
    computed by its prefill step."""
    n, io = IS[L.IP_N], IS[L.H_O]
    xfer = IS[io + L.O_XT * n + rid]
    new = np.int64(R[rid * L.NR + L.R_PROMPT]) - IS[io + L.O_PH * n + rid]
    if xfer < new:
        new = xfer
    return xfer - new, new


@jit
def _layer_end(ts, te, nl, l):
    """When the step from ``ts`` to ``te`` has computed layer ``l`` (0-based)."""
    return ts + (l + 1) * (te - ts) / nl


@jit
def _land(IS, F, R, EHT, EHI, TLF, TLI, rid, d, last_end):
    n = IS[L.IP_N]
    ft = IS[L.H_FT]
    F[ft + L.T_XE * n + rid] = last_end
    land = last_end + F[L.FP_LINK_LAT]
    tier = IS[L.IP_POLICY] == L.POL_TIERED or IS[L.IP_POLICY] == L.POL_COST_AWARE
    if tier and F[ft + L.T_PROMO * n + rid] > land:
        land = F[ft + L.T_PROMO * n + rid]  # the promoted host blocks land later
    push(EHT, EHI, IS, land, L.EV_TRANSFER, rid, 0)
    if IS[L.IP_REC]:
        p = IS[IS[L.H_O] + L.O_PI * n + rid]
        nbytes = np.int64(IS[IS[L.H_O] + L.O_XT * n + rid] * F[L.FP_DC + L.C_KV])
        track = (p * IS[L.IP_ND] + d) * IS[L.IP_NC]
        record(TLF, TLI, IS, L.REC_LINK, track, F[ft + L.T_XS * n + rid], last_end, rid, nbytes, 0)


@jit
def stream_one(IS, F, R, EHT, EHI, TLF, TLI, rid, d, t):
    """Send a request admitted at ``t`` outside its step's joint pass, chunk by chunk."""
    n, ft = IS[L.IP_N], IS[L.H_FT]
    p = IS[IS[L.H_O] + L.O_PI * n + rid]
    rate, kv, nl = F[L.FP_LINK_BPS], F[L.FP_DC + L.C_KV], IS[L.IP_LAYERS]
    ts, te = F[ft + L.T_PS * n + rid], F[ft + L.T_PE * n + rid]
    cached, new = _split(IS, R, rid)
    end = t
    if cached > 0:
        occ = cached * kv / rate
        s = _chunk(IS, F, p, d, t, occ)
        F[ft + L.T_XS * n + rid] = s
        end = s + occ
    occ = new * kv / rate / nl
    for ly in range(nl):
        ready = _layer_end(ts, te, nl, ly)
        if t > ready:
            ready = t
        s = _chunk(IS, F, p, d, ready, occ)
        if cached == 0 and ly == 0:
            F[ft + L.T_XS * n + rid] = s
        end = s + occ
    _land(IS, F, R, EHT, EHI, TLF, TLI, rid, d, end)


@jit
def stream_batch(IS, F, R, EHT, EHI, TLF, TLI, first, t):
    """The joint pass of a prefill step starting at ``t`` (its requests linked through
    R_PBN from ``first``): the deferred requests' cached chunks in batch order, then each
    layer's chunks in batch order."""
    n, ft, io = IS[L.IP_N], IS[L.H_FT], IS[L.H_O]
    rate, kv, nl = F[L.FP_LINK_BPS], F[L.FP_DC + L.C_KV], IS[L.IP_LAYERS]
    if first == -1:
        return
    te = F[ft + L.T_PE * n + first]
    rid = first
    while rid != -1:
        if R[rid * L.NR + L.R_FLAGS] & L.F_STREAM:
            cached, new = _split(IS, R, rid)
            if cached > 0:
                d = IS[io + L.O_DI * n + rid]
                occ = cached * kv / rate
                s = _chunk(IS, F, IS[io + L.O_PI * n + rid], d, t, occ)
                F[ft + L.T_XS * n + rid] = s
                F[ft + L.T_XE * n + rid] = s + occ
        rid = R[rid * L.NR + L.R_PBN]
    for ly in range(nl):
        ready = _layer_end(t, te, nl, ly)
        rid = first
        while rid != -1:
            if R[rid * L.NR + L.R_FLAGS] & L.F_STREAM:
                cached, new = _split(IS, R, rid)
                d = IS[io + L.O_DI * n + rid]
                occ = new * kv / rate / nl
                s = _chunk(IS, F, IS[io + L.O_PI * n + rid], d, ready, occ)
                if cached == 0 and ly == 0:
                    F[ft + L.T_XS * n + rid] = s
                F[ft + L.T_XE * n + rid] = s + occ
            rid = R[rid * L.NR + L.R_PBN]
    rid = first
    while rid != -1:
        fl = rid * L.NR + L.R_FLAGS
        if R[fl] & L.F_STREAM:
            R[fl] &= ~L.F_STREAM
            d = IS[io + L.O_DI * n + rid]
            _land(IS, F, R, EHT, EHI, TLF, TLI, rid, d, F[ft + L.T_XE * n + rid])
        rid = R[rid * L.NR + L.R_PBN]
