"""Block-granular KV caches as records: the prefill prefix cache and the decode replicas.

A prompt's cacheable part is a chain of block ids; a hit is the longest leading run of
cached blocks. Eviction is LRU with leaf-first order: when a chain is touched its blocks are
refreshed tail first, so the root of a chain is always fresher than its tail and an
eviction never strands a reachable suffix behind a missing root.

* Prefix cache (per prefill or colocated instance): LRU over blocks, capacity in tokens.
* Replica store (per decode instance): each block has a refcount (active requests using
  it). Blocks with refcount 0 are idle: kept in LRU order and trimmed first when admission
  needs memory. A block is pending from admission until its KV lands; only ready blocks
  give hits. A pending block whose request ends before it lands is dropped.

Block hashes become dense ids first (``dense_block_ids``), so the records are indexed, not
hashed.
"""

from __future__ import annotations

import numpy as np

from ..workload.dense import dense_ids
from . import layout as L
from .hosttier import ht_demote
from .jit import entry, jit
from .layout import (
    D_IDLE,
    D_LRUH,
    D_USED,
    DI0,
    H_PC,
    H_PI,
    IP_ND,
    IP_PCAP,
    IP_POLICY,
    IP_U,
    NDI,
    NPI,
    P_HELD,
    P_LRUH,
    P_USED,
    PC_IN,
    PC_NEXT,
    PC_PREV,
    PC_TOK,
    POL_COST_AWARE,
    POL_TIERED,
    RS_NEXT,
    RS_PREV,
    RS_REF,
    RS_TOK,
    ST_ACTIVE_MASK,
    ST_IN,
    ST_INACT,
    ST_READY,
)
from .queues import lru_append, lru_unlink


def dense_block_ids(blk_hash: np.ndarray, hot: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """Block hashes as dense ids in [0, U): (request blocks, hot blocks, U).

    Hashes that are already small non-negative integers (synthetic prefix ids, Mooncake
    hash ids and tiled copies of them) are used as they are; others are numbered in order
    of first appearance (workload/dense.py: a compiled hash table, linear time). Equal hash
    <=> equal id either way, which is all the caches need.
    """
    total = blk_hash.shape[0] + hot.shape[0]
    if total == 0:
        return blk_hash, hot, 0
    both = [a for a in (blk_hash, hot) if a.size]
    lo = min(int(a.min()) for a in both)
    hi = max(int(a.max()) for a in both)
    if lo >= 0 and hi < min(2**31 - 1, 4 * total + 65536):
        return blk_hash, hot, hi + 1
    ids, u = dense_ids(np.concatenate((blk_hash, hot)))
    return ids[: blk_hash.shape[0]], ids[blk_hash.shape[0] :], u


@jit
def pc_match(IS, B32, p, bid, bt, i0, i1):
    base = IS[H_PC] + 4 * IS[IP_U] * p
    hit = 0
    for j in range(i0, i1):
        if B32[base + 4 * bid[j] + PC_IN] == 0:
            break
        hit += bt[j]
    return hit


@jit
def pc_insert(IS, B32, p, bid, bt, i0, i1):
    pb = IS[H_PI] + p * NPI
    cap = pc_room(IS, p)
    base = IS[H_PC] + 4 * IS[IP_U] * p
    hp = pb + P_LRUH
    for j in range(i1 - 1, i0 - 1, -1):
        h = bid[j]
        rec = base + 4 * h
        if B32[rec + PC_IN]:
            lru_unlink(B32, IS, hp, base, PC_PREV, PC_NEXT, h)
            lru_append(B32, IS, hp, base, PC_PREV, PC_NEXT, h)
        elif bt[j] <= cap:
            B32[rec + PC_IN] = 1
            B32[rec + PC_TOK] = bt[j]
            lru_append(B32, IS, hp, base, PC_PREV, PC_NEXT, h)
            IS[pb + P_USED] += bt[j]
    pc_evict(IS, B32, p)


@jit
def pc_room(IS, p):
    """The prefix cache's capacity on prefill instance ``p``: its KV pool less the prompt
    KV held for pulls in flight (0 when the hold is off)."""
    cap = IS[IP_PCAP] - IS[IS[H_PI] + p * NPI + P_HELD]
    return cap if cap > 0 else 0


@jit
def pc_evict(IS, B32, p):
    """Drop least recently used blocks until the cache fits its room."""
    cap = pc_room(IS, p)
    base = IS[H_PC] + 4 * IS[IP_U] * p
    pb = IS[H_PI] + p * NPI
    hp = pb + P_LRUH
    while IS[pb + P_USED] > cap:
        h = IS[hp]
        lru_unlink(B32, IS, hp, base, PC_PREV, PC_NEXT, h)
        B32[base + 4 * h + PC_IN] = 0
        IS[pb + P_USED] -= B32[base + 4 * h + PC_TOK]


@jit
def rs_match(B8, U, d, bid, i0, i1):
    """Number of leading blocks resident and ready on decode instance ``d``."""
    o = d * U
    k = 0
    for j in range(i0, i1):
        if B8[o + bid[j]] & ST_READY == 0:
            break
        k += 1
    return k


@jit
def prefill_hit(IS, R, B32, p, bid, bt, rid):
    """Tokens of ``rid``'s prompt in prefill instance ``p``'s prefix cache, at most
    ``prompt − 1``: the last prompt token is always computed (docs/model.md §1.4)."""
    ptr = IS[L.H_PTR]
    i0, i1 = IS[ptr + rid], IS[ptr + rid + 1]
    prompt = R[rid * L.NR + L.R_PROMPT]
    hit = 0
    if i1 > i0:
        hit = pc_match(IS, B32, p, bid, bt, i0, i1)
        if prompt - 1 < hit:
            hit = prompt - 1
    return hit


@jit
def decode_hit(IS, B8, bid, bt, rid, d):
    """(Blocks, tokens) of ``rid``'s leading run resident and ready on decode ``d``."""
    ptr = IS[L.H_PTR]
    i0, i1 = IS[ptr + rid], IS[ptr + rid + 1]
    k = 0
    if i1 > i0:
        k = rs_match(B8, IS[L.IP_U], d, bid, i0, i1)
    tok = 0
    for j in range(i0, i0 + k):
        tok += bt[j]
    return k, tok


@jit
def rs_drop(IS, B32, B8, d, h):
    U = IS[IP_U]
    rec = 4 * U * d + 4 * h
    IS[DI0 + d * NDI + D_USED] -= B32[rec + RS_TOK]
    B32[rec + RS_TOK] = 0
    B32[rec + RS_REF] = 0
    B8[d * U + h] = 0


@jit
def rs_release_one(IS, B32, B8, d, h):
    U = IS[IP_U]
    base = 4 * U * d
    rec = base + 4 * h
    r = B32[rec + RS_REF] - 1
    assert r >= 0, "replica refcount went negative"
    B32[rec + RS_REF] = r
    if r == 0:
        if B8[d * U + h] & ST_READY:
            b = DI0 + d * NDI
            lru_append(B32, IS, b + D_LRUH, base, RS_PREV, RS_NEXT, h)
            B8[d * U + h] |= ST_INACT
            IS[b + D_IDLE] += B32[rec + RS_TOK]
        else:  # its transfer never landed: nothing to keep
            rs_drop(IS, B32, B8, d, h)


@jit
def rs_trim(IS, F, B32, B8, d, need, now):
    """Trim idle blocks LRU until ``need`` tokens are free; replicate_tiered demotes each
    to the host tier at ``now`` (hosttier.ht_demote)."""
    base = 4 * IS[IP_U] * d
    b = DI0 + d * NDI
    tiered = IS[IP_POLICY] == POL_TIERED or IS[IP_POLICY] == POL_COST_AWARE
    freed = 0
    while freed < need and IS[b + D_LRUH] != -1:
        h = IS[b + D_LRUH]
        lru_unlink(B32, IS, b + D_LRUH, base, RS_PREV, RS_NEXT, h)
        t = B32[base + 4 * h + RS_TOK]
        freed += t
        IS[b + D_IDLE] -= t
        backed = B8[d * IS[IP_U] + h] & L.ST_BACKED
        rs_drop(IS, B32, B8, d, h)
        if tiered:
            ht_demote(IS, F, B32, d, h, t, now, backed == 0)
    return freed


@jit
def trim_for(IS, F, B32, B8, d, need, t):
    """An admission trims ``need`` tokens at ``t`` (blocks.rs_trim): when the last copy its
    demotions queued lands (write-back: the HBM they held is reused only then), or -inf
    when it queued none."""
    f = L.DF0 + d * L.NDF
    before = F[f + L.DF_HP_FREE]
    rs_trim(IS, F, B32, B8, d, need, t)
    if F[f + L.DF_HP_FREE] != before:
        return F[f + L.DF_HP_FREE] + F[f + L.DF_HP_LAT]
    return -L.INF


@entry
def prewarm(IS, B32, B8, hot_ids, hot_tok):
    """Prewarm the hot set on every decode instance: ready and idle, least hot trimmed first."""
    U = IS[IP_U]
    for d in range(IS[IP_ND]):
        b = DI0 + d * NDI
        rs = 4 * U * d
        for k in range(hot_ids.shape[0] - 1, -1, -1):
            h = hot_ids[k]
            if B8[d * U + h] & ST_IN == 0:
                B32[rs + 4 * h + RS_TOK] = hot_tok[k]
                B32[rs + 4 * h + RS_REF] = 0
                B8[d * U + h] = ST_IN | ST_READY | ST_INACT
                lru_append(B32, IS, b + D_LRUH, rs, RS_PREV, RS_NEXT, h)
                IS[b + D_USED] += hot_tok[k]
                IS[b + D_IDLE] += hot_tok[k]


@jit
def rs_acquire(IS, B32, B8, bid, d, i0, i1):
    """Take a reference on blocks ``bid[i0:i1]`` (resident replicas a request will use):
    an idle block leaves the trimmable LRU list."""
    U = IS[IP_U]
    rs = 4 * U * d
    b = DI0 + d * NDI
    for j in range(i0, i1):
        h = bid[j]
        rec = rs + 4 * h
        if B32[rec + RS_REF] == 0:
            lru_unlink(B32, IS, b + D_LRUH, rs, RS_PREV, RS_NEXT, h)
            B8[d * U + h] &= ST_ACTIVE_MASK
            IS[b + D_IDLE] -= B32[rec + RS_TOK]
        B32[rec + RS_REF] += 1


@jit
def rs_idle_tokens(IS, B32, bid, d, i0, i1):
    """Tokens of blocks ``bid[i0:i1]`` that are idle (refcount 0): trimmable room that a
    request about to use them cannot count on."""
    rs = 4 * IS[IP_U] * d
    idle = 0
    for j in range(i0, i1):
        rec = rs + 4 * bid[j]
        if B32[rec + RS_REF] == 0:
            idle += B32[rec + RS_TOK]
    return idle


@jit
def rs_add_pending(IS, B32, B8, d, h, tokens):
    """A block that will become a replica once its transfer lands (referenced, not ready)."""
    U = IS[IP_U]
    rec = 4 * U * d + 4 * h
    B32[rec + RS_TOK] = tokens
    B32[rec + RS_REF] = 1
    B8[d * U + h] = ST_IN
    IS[DI0 + d * NDI + D_USED] += tokens


@jit
def rs_release_chain(IS, R, B32, B8, bid, d, rid):
    """Drop request ``rid``'s references on its replica blocks (the held hit, then the
    persisted ones), tail first, so that the chain's root stays the freshest idle block."""
    ptr = IS[L.H_PTR]
    rr = rid * L.NR
    i0, i1 = IS[ptr + rid], IS[ptr + rid + 1]
    held_end = i0 + R[rr + L.R_NHIT]
    pers = R[rr + L.R_FLAGS] & L.F_PERS
    pflag = IS[L.H_PFLAG]
    for j in range(i1 - 1, i0 - 1, -1):
        if j < held_end or (pers and B8[pflag + j]):
            rs_release_one(IS, B32, B8, d, bid[j])
