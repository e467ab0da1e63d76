"""The host-DRAM tier under a decode instance's HBM replicas (policy ``replicate_tiered``).

SGLang HiCache / LMCache style (docs/model.md, "Host tier"): an idle replica block trimmed
from HBM is demoted to the host pool (its copy queues on the host path) instead of dropped;
the pool is LRU with its own capacity, and a block is in at most one tier. At admission the
request's chain is matched HBM first, then the host tier continues the leading run; those
host blocks leave the pool and come back either over the host path (a promotion) or over the
link from the prefill node, whichever lands first at decision time (``promote_or_send``).

Records: block ``h`` of decode ``d`` at ``4·U·(D + P) + 4·U·d + 4·h`` in ``B32`` (tokens,
LRU prev, LRU next, present); used tokens, capacity, LRU head/tail and the peak in the
instance's ``IS`` record.
"""

from __future__ import annotations

from . import layout as L
from .hostpath import host_path_free, host_path_move
from .jit import jit
from .queues import lru_append, lru_unlink


@jit
def ht_base(IS, d):
    U = IS[L.IP_U]
    return 4 * U * (IS[L.IP_ND] + IS[L.IP_NP]) + 4 * U * d


@jit
def leading_present(B32, base, bid, i0, i1):
    """Leading blocks of ``bid[i0:i1]`` present in the block records at ``base`` (a host
    tier's, or the L3 store's: the same four-slot layout)."""
    k = 0
    for j in range(i0, i1):
        if B32[base + 4 * bid[j] + L.HT_IN] == 0:
            break
        k += 1
    return k


@jit
def ht_match(IS, B32, d, bid, i0, i1):
    """Leading blocks of ``bid[i0:i1]`` present in decode ``d``'s host tier."""
    return leading_present(B32, ht_base(IS, d), bid, i0, i1)


@jit
def ht_remove(IS, B32, d, h):
    base = ht_base(IS, d)
    b = L.DI0 + d * L.NDI
    lru_unlink(B32, IS, b + L.D_HLRUH, base, L.HT_PREV, L.HT_NEXT, h)
    B32[base + 4 * h + L.HT_IN] = 0
    IS[b + L.D_HUSED] -= B32[base + 4 * h + L.HT_TOK]


@jit
def ht_take(IS, B32, d, bid, i0, i1, i2):
    """The chain's blocks past the HBM run leave the host tier, as they are all going to HBM
    (a block is in one tier at a time): the host run ``bid[i0:i1]`` may be promoted, later
    ones (past a gap) will cross the link anyway. Returns the host run's tokens."""
    base = ht_base(IS, d)
    tok = 0
    for j in range(i0, i2):
        if B32[base + 4 * bid[j] + L.HT_IN]:
            if j < i1:
                tok += B32[base + 4 * bid[j] + L.HT_TOK]
            ht_remove(IS, B32, d, bid[j])
    return tok


@jit
def ht_write(IS, F, B8, d, h, tokens, t):
    """Write-through (``IP_HWP`` 1 or 2): HBM block ``h``'s host copy is queued on the path
    at ``t`` unless it has one; a trim then needs no copy (``ST_BACKED``)."""
    st = d * IS[L.IP_U] + h
    if B8[st] & L.ST_BACKED == 0:
        B8[st] |= L.ST_BACKED
        host_path_move(IS, F, d, t, tokens * F[L.FP_DC + L.C_KV])


@jit
def ht_write_run(IS, F, B32, B8, bid, d, i0, i1, t):
    """Write-through of the resident, ready blocks of ``bid[i0:i1]``, root first."""
    U = IS[L.IP_U]
    for j in range(i0, i1):
        h = bid[j]
        if B8[d * U + h] & L.ST_READY:
            ht_write(IS, F, B8, d, h, B32[4 * U * d + 4 * h + L.RS_TOK], t)


@jit
def ht_demote(IS, F, B32, d, h, tokens, t, copy):
    """Block ``h`` trimmed from HBM at ``t``: into the host tier as its freshest block (LRU
    host blocks dropped over capacity), its copy queued on the host path unless it was
    written through (``copy`` False). A block larger than the whole pool is dropped."""
    b = L.DI0 + d * L.NDI
    cap = IS[b + L.D_HCAP]
    if tokens > cap:
        return
    base = ht_base(IS, d)
    B32[base + 4 * h + L.HT_IN] = 1
    B32[base + 4 * h + L.HT_TOK] = tokens
    lru_append(B32, IS, b + L.D_HLRUH, base, L.HT_PREV, L.HT_NEXT, h)
    IS[b + L.D_HUSED] += tokens
    while IS[b + L.D_HUSED] > cap:
        ht_remove(IS, B32, d, IS[b + L.D_HLRUH])
    if copy:
        host_path_move(IS, F, d, t, tokens * F[L.FP_DC + L.C_KV])


@jit
def promote_or_send(IS, F, d, t, link_start, rest_tok, host_tok):
    """True to promote ``host_tok`` tokens over the host path, False to send them over the
    link with the request's other ``rest_tok``. Decided at ``t`` from the queues as they
    are: the promotion's landing (host path free time + bytes / rate + latency) and the rest's
    landing over the link (``link_start`` + bytes / rate + latency; at once if nothing
    crosses) against everything's landing over the link; ties promote (the link stays free
    for others)."""
    kv = F[L.FP_DC + L.C_KV]
    f = L.DF0 + d * L.NDF
    promo = host_path_free(F, d, t) + host_tok * kv / F[f + L.DF_HP_BPS] + F[f + L.DF_HP_LAT]
    bps, lat = F[L.FP_LINK_BPS], F[L.FP_LINK_LAT]
    rest = t
    if rest_tok > 0:
        rest = link_start + rest_tok * kv / bps + lat
    everything = link_start + (rest_tok + host_tok) * kv / bps + lat
    land = promo if promo > rest else rest
    return land <= everything


@jit
def ht_account(IS, F, d, lo, t):
    """Host KV over time (mem_changed's window), its peak, and the capacity invariant."""
    b = L.DI0 + d * L.NDI
    if t > lo:
        F[L.DF0 + d * L.NDF + L.DF_HAREA] += IS[b + L.D_LHUSED] * (t - lo)
    used = IS[b + L.D_HUSED]
    IS[b + L.D_LHUSED] = used
    if used > IS[b + L.D_HPEAK]:
        IS[b + L.D_HPEAK] = used
    assert used <= IS[b + L.D_HCAP], "host KV over its pool"
