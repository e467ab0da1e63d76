"""The engine's queues: the event heap, each decode batch's heap, and intrusive lists.

* The event heap is a binary heap over ``EHT`` (time) and ``EHI`` (kind<<56|seq, a, b),
  ordered by (time, kind, insertion number): equal times resolve by kind priority, then in
  insertion order, so every run has one reproducible order (as SimPy's queue).
* A decode batch heap holds (iteration at which the sequence finishes, request id).
* FIFO queues (prefill, join, recompute, wait) are linked lists through per-request link
  fields of ``R`` (a request sits in at most one queue of a kind): a queue's head is
  ``IS[hp]`` and its tail ``IS[hp + 1]``; the wait queue is doubly linked (a timeout
  removes from the middle).
* LRU lists (prefix cache, idle replicas) are doubly linked through block records of
  ``B32``.
"""

from __future__ import annotations

from .jit import entry_sig, sig
from .layout import (
    D_HSZ,
    D_RQH,
    DI0,
    F_RC,
    GI_HSZ,
    GI_SEQ,
    H_CAPB,
    H_DH,
    KIND_SHIFT,
    NDI,
    NR,
    R_FLAGS,
    R_PBN,
    R_RDEP,
    R_RDONE,
    R_RQN,
    R_RSH,
    R_RTOT,
    R_WQN,
    R_WQP,
)


@sig("void(float64[::1], int64[::1], int64, int64)")
def _move(EHT, EHI, dst, src):
    """Heap slot ``src`` moves to ``dst``."""
    EHT[dst] = EHT[src]
    EHI[3 * dst] = EHI[3 * src]
    EHI[3 * dst + 1] = EHI[3 * src + 1]
    EHI[3 * dst + 2] = EHI[3 * src + 2]


@sig("void(float64[::1], int64[::1], int64, float64, int64, int64, int64)")
def _put(EHT, EHI, i, t, key, a, b):
    EHT[i] = t
    EHI[3 * i] = key
    EHI[3 * i + 1] = a
    EHI[3 * i + 2] = b


@entry_sig("void(float64[::1], int64[::1], int64[::1], float64, int64, int64, int64)")
def push(EHT, EHI, IS, t, kind, a, b):
    IS[GI_SEQ] += 1
    key = (kind << KIND_SHIFT) | IS[GI_SEQ]
    i = IS[GI_HSZ]
    IS[GI_HSZ] = i + 1
    while i > 0:
        p = (i - 1) >> 1
        if t < EHT[p] or (t == EHT[p] and key < EHI[3 * p]):
            _move(EHT, EHI, i, p)
            i = p
        else:
            break
    _put(EHT, EHI, i, t, key, a, b)


@sig("Tuple((float64, int64, int64, int64))(float64[::1], int64[::1], int64[::1])")
def pop(EHT, EHI, IS):
    t0, k0, a0, b0 = EHT[0], EHI[0], EHI[1], EHI[2]
    size = IS[GI_HSZ] - 1
    IS[GI_HSZ] = size
    if size > 0:
        t, key, a, b = EHT[size], EHI[3 * size], EHI[3 * size + 1], EHI[3 * size + 2]
        i = 0
        while True:
            c = 2 * i + 1
            if c >= size:
                break
            c2 = c + 1
            if c2 < size and (EHT[c2] < EHT[c] or (EHT[c2] == EHT[c] and EHI[3 * c2] < EHI[3 * c])):
                c = c2
            if EHT[c] < t or (EHT[c] == t and EHI[3 * c] < key):
                _move(EHT, EHI, i, c)
                i = c
            else:
                break
        _put(EHT, EHI, i, t, key, a, b)
    return t0, k0 >> KIND_SHIFT, a0, b0


@sig("UniTuple(int64, 3)(int64[::1], int64)")
def _batch_heap(IS, d):
    """(iterations base, request ids base, size field) of decode instance ``d``'s heap."""
    capb = IS[H_CAPB]
    base = IS[H_DH] + 2 * capb * d
    return base, base + capb, DI0 + d * NDI + D_HSZ


@sig("boolean(int64, int64, int64, int64)")
def _less(it1, rid1, it2, rid2):
    return it1 < it2 or (it1 == it2 and rid1 < rid2)


@sig("void(int64[::1], int64, int64, int64, int64)")
def _batch_move(IS, base, rb, dst, src):
    IS[base + dst] = IS[base + src]
    IS[rb + dst] = IS[rb + src]


@sig("void(int64[::1], int64, int64, int64)")
def batch_push(IS, d, it, rid):
    base, rb, sz = _batch_heap(IS, d)
    i = IS[sz]
    IS[sz] = i + 1
    while i > 0:
        p = (i - 1) >> 1
        if not _less(it, rid, IS[base + p], IS[rb + p]):
            break
        _batch_move(IS, base, rb, i, p)
        i = p
    IS[base + i] = it
    IS[rb + i] = rid


@sig("int64(int64[::1], int64)")
def batch_pop(IS, d):
    base, rb, sz = _batch_heap(IS, d)
    r0 = IS[rb]
    size = IS[sz] - 1
    IS[sz] = size
    if size > 0:
        it, rid = IS[base + size], IS[rb + size]
        i = 0
        while 2 * i + 1 < size:
            c = 2 * i + 1
            if c + 1 < size and _less(IS[base + c + 1], IS[rb + c + 1], IS[base + c], IS[rb + c]):
                c += 1
            if not _less(IS[base + c], IS[rb + c], it, rid):
                break
            _batch_move(IS, base, rb, i, c)
            i = c
        IS[base + i] = it
        IS[rb + i] = rid
    return r0


# ---------------------------------------------------------------- intrusive lists
# A queue's head is IS[hp] and its tail IS[hp + 1]; its next (and prev) links are field ``f``
# (and ``g``) of each request's record in R.


@sig("void(int64[::1], int32[::1], int64, int64, int64)")
def q_append(IS, R, hp, f, rid):
    R[rid * NR + f] = -1
    tail = IS[hp + 1]
    if tail == -1:
        IS[hp] = rid
    else:
        R[tail * NR + f] = rid
    IS[hp + 1] = rid


@sig("void(int64[::1], int32[::1], int64, int64, int64, int64, int64, int64)")
def job_enqueue(IS, R, d, rid, done, dep, shared, total):
    """Queue ``rid``'s decode-side prefill job on ``d`` (engine/recompute.py): tokens
    [done, total) to compute, waiting on job ``dep`` (-1: none) for its first ``shared``."""
    rr = rid * NR
    R[rr + R_RDONE] = done
    R[rr + R_RDEP] = dep
    R[rr + R_RSH] = shared
    R[rr + R_RTOT] = total
    R[rr + R_FLAGS] |= F_RC
    q_append(IS, R, DI0 + d * NDI + D_RQH, R_RQN, rid)


@sig("int64(int64[::1], int32[::1], int64, int64)")
def q_popleft(IS, R, hp, f):
    rid = IS[hp]
    nxt = R[rid * NR + f]
    IS[hp] = nxt
    if nxt == -1:
        IS[hp + 1] = -1
    return rid


@sig("void(int64[::1], int32[::1], int64, int64)")
def wq_append(IS, R, hp, rid):
    R[rid * NR + R_WQP] = IS[hp + 1]
    q_append(IS, R, hp, R_WQN, rid)


@sig("void(int64[::1], int32[::1], int64, int64)")
def wq_remove(IS, R, hp, rid):
    p, nx = R[rid * NR + R_WQP], R[rid * NR + R_WQN]
    if p == -1:
        IS[hp] = nx
    else:
        R[p * NR + R_WQN] = nx
    if nx == -1:
        IS[hp + 1] = p
    else:
        R[nx * NR + R_WQP] = p


@sig("int64(int32[::1], int64, int64, int64)")
def step_append(R, first, last, rid):
    """Append ``rid`` to a step's list of prompts (linked through R_PBN, ``last`` its tail);
    returns the list's head."""
    if first == -1:
        first = rid
    else:
        R[last * NR + R_PBN] = rid
    R[rid * NR + R_PBN] = -1
    return first


@sig("void(int32[::1], int64[::1], int64, int64, int64, int64, int64)")
def lru_unlink(B32, IS, hp, base, po, no, h):
    """Unlink block ``h`` (record at base + 4h, prev/next at field po/no) from the LRU list
    whose head is IS[hp] and tail IS[hp + 1]."""
    rec = base + 4 * h
    pv, nx = B32[rec + po], B32[rec + no]
    if pv == -1:
        IS[hp] = nx
    else:
        B32[base + 4 * pv + no] = nx
    if nx == -1:
        IS[hp + 1] = pv
    else:
        B32[base + 4 * nx + po] = pv


@sig("void(int32[::1], int64[::1], int64, int64, int64, int64, int64)")
def lru_append(B32, IS, hp, base, po, no, h):
    tail = IS[hp + 1]
    rec = base + 4 * h
    B32[rec + po] = tail
    B32[rec + no] = -1
    if tail == -1:
        IS[hp] = h
    else:
        B32[base + 4 * tail + no] = h
    IS[hp + 1] = h
