"""The event core compiled with numba: same semantics and outputs as ``core.Simulator``.

``core.py`` is the specification (readable, one method per event); this module ports it
method by method onto flat array state so numba can compile the whole event loop:

* state lives in a few flat arrays — int64 ``IS``, float64 ``F``, int32 per-request records
  ``R``, int32 per-block records ``B32`` and uint8 flags ``B8`` — at offsets ``_layout`` fixes
  (see "layout" below). Helpers take these few arrays rather than dozens: numba's compile
  time grows with the number of array arguments. The result columns are views into ``IS``
  and ``F``, so nothing is copied at the end;
* the event queue is a binary heap over ``EHT`` (time) and ``EHI`` (kind<<56|seq, a, b),
  ordered by (time, kind, seq) exactly like ``heapq`` on the core's tuples;
* the core's deques (prefill queue, join, recompute and wait queues) are intrusive linked
  lists through per-request link fields (a request sits in at most one queue of a kind);
* block hashes become dense ids (the hashes themselves when they are small non-negative
  integers, else ``np.unique`` ranks), so ``BlockLRU`` and ``ReplicaStore`` are records per
  block id plus an intrusive doubly linked LRU list: no hashing in the loop;
* policies and routers are integer codes (the ``*_CODES`` maps below mirror the name
  registries); a name without a code (a newly registered policy), a config field this port
  does not know, or a timeline recorder runs on the Python core instead.

The decode batch advances in closed form between events, exactly as in the core, so the
cost is per event, never per token. Every floating-point expression keeps the core's
operand order, so results are bit for bit equal (tests/test_fastcore.py).

The compiled helpers run without numba's reference counting (``_nrt=False``): they only
index arrays allocated in Python and kept alive by the caller, and an atomic incref/decref
of every array on every call would otherwise cost more than the simulation itself. Compiled
code is cached next to this file (``cache=True``); docs/performance.md gives the cold
compile and warm load times.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
from numba import njit

from ..workload.requests import Requests
from . import policies as _policies
from . import routing as _routing
from .core import TIME_COLUMNS, EngineConfig, SimResult, Simulator

POLICY_CODES = {
    "transfer_per_request": 0,
    "recompute_on_decode": 1,
    "replicate_hotset": 2,
    "replicate_all_lru": 3,
}
_POLICY_CLASSES = {
    "transfer_per_request": _policies.TransferPerRequest,
    "recompute_on_decode": _policies.RecomputeOnDecode,
    "replicate_hotset": _policies.ReplicateHotset,
    "replicate_all_lru": _policies.ReplicateAllLRU,
}
PREFILL_ROUTER_CODES = {"least_tokens": 0, "round_robin": 1}
DECODE_ROUTER_CODES = {"least_load": 0, "prefix_affinity": 1, "round_robin": 2}
_ROUTER_FUNCS = {  # registry entries the codes stand for (round_robin ones are closures)
    ("prefill", "least_tokens"): _routing.prefill_least_tokens,
    ("decode", "least_load"): _routing.decode_least_load,
    ("decode", "prefix_affinity"): _routing.decode_prefix_affinity,
}

_jit = njit(cache=True, error_model="numpy", _nrt=False)


def _sig(signature: str):
    """``_jit`` with a fixed signature, for helpers called with literal arguments (numba
    would otherwise compile one copy per literal value)."""
    return njit(signature, cache=True, error_model="numpy", _nrt=False)


INF = math.inf
EV_DECODE, EV_TRANSFER, EV_PREFILL, EV_TIMEOUT, EV_ARRIVAL = 0, 1, 2, 3, 4
KIND_SHIFT = 56
POL_TRANSFER, POL_RECOMPUTE, POL_HOTSET, POL_ALL_LRU = 0, 1, 2, 3
OUT_PENDING, OUT_COMPLETED, OUT_REJECTED = 0, 1, 2
R_NONE, R_NO_MEMORY, R_TIMEOUT, R_TOO_LARGE = 0, 1, 2, 3

# ---------------------------------------------------------------- layout
# IS (int64): [params | run scalars | layout offsets] [decode instances D×NDI]
#            [prefill instances P×NPI] [decode batch heaps D×2×capb] [join scratch capb]
#            [blk_ptr n+1] [integer result columns 9×n]
(
    IP_NP,
    IP_ND,
    IP_NC,
    IP_MAXB,
    IP_TOKB,
    IP_PCAP,
    IP_BUDGET,
    IP_WAIT,
    IP_POLICY,
    IP_PROUTE,
    IP_DROUTE,
    IP_GAPS,
) = range(12)
NIP = 12  # params given by the caller
IP_N, IP_U = 12, 13  # requests, block ids
GI_PEAK_REP, GI_PEAK_USED, GI_RR_P, GI_RR_D, GI_SEQ, GI_HSZ, GI_INSYS = range(14, 21)
H_PI, H_DH, H_CAPB, H_JN, H_PTR, H_O, H_FPB, H_FCH, H_FT, H_PC, H_PFLAG, H_HOT = range(21, 33)
DI0 = 33
# decode instance columns (head/tail pairs adjacent)
(
    D_B,
    D_CTX,
    D_IT,
    D_STALL,
    D_NK,
    D_VER,
    D_PRIV,
    D_JQH,
    D_JQT,
    D_RQH,
    D_RQT,
    D_WQH,
    D_WQT,
    D_USED,
    D_IDLE,
    D_LRUH,
    D_LRUT,
    D_LOAD,
    D_HSZ,
    D_LREP,
    D_LUSED,
) = range(21)
NDI = 21
P_LOAD, P_QH, P_QT, P_BH, P_USED, P_LRUH, P_LRUT = range(7)
NPI = 7
# integer result columns: row r of request rid at IS[IS[H_O] + r·n + rid]
O_PI, O_DI, O_OUT, O_REA, O_PH, O_RH, O_RC, O_XT, O_PT = range(9)
INT_COLUMNS = (
    "prefill_instance",
    "decode_instance",
    "outcome",
    "reject_reason",
    "prefill_hit_tokens",
    "replica_hit_tokens",
    "recompute_tokens",
    "transfer_tokens",
    "persisted_tokens",
)
# R (int32): per-request internals, one record of NR fields per request (R[rid·NR + field]):
# private KV tokens, held replica blocks, flags, queue links, prompt and output lengths
R_PRIV, R_NHIT, R_FLAGS, R_PQN, R_PBN, R_JQN, R_RQN, R_WQN, R_WQP, R_PROMPT, R_OUTPUT = range(11)
NR = 11
F_RC, F_XD, F_PERS = 1, 2, 4  # recompute pending, KV landed, has persisted blocks

# F (float64): [params | run scalars] [decode instances D×NDF] [prefill busy P]
#              [link channels P×D×C] [per-request rows: 10 result times, arrival,
#              and with track_gaps the largest token gap and the last token's time]
FP_LINK_BPS, FP_LINK_LAT, FP_WAIT_TO, FP_TWARM = range(4)
C_FRP, C_FRD, C_BR, C_POV, C_DOV, C_LF, C_LMH, C_ATT, C_KV, C_W, C_EW, C_EF = range(12)
_COST_FIELDS = (
    "flops_rate_prefill",
    "flops_rate_decode",
    "byte_rate",
    "prefill_overhead",
    "decode_overhead",
    "linear_flops",
    "lm_head_flops",
    "attn_coef",
    "kv_bpt",
    "weights",
    "expert_weights",
    "expert_frac",
)
FP_PC = 4  # prefill InstanceCost fields
FP_DC = FP_PC + 12  # decode InstanceCost fields
NFP = FP_DC + 12
G_NOW, G_LINK, G_REP_AREA, G_USED_AREA, G_BATCH_AREA = range(NFP, NFP + 5)
DF0 = NFP + 5
DF_TSEG, DF_STALL_END, DF_NEXT_T, DF_BUSY, DF_MEM_T = range(5)
NDF = 5
T_PS, T_PE, T_AD, T_XS, T_XE, T_RS, T_RE, T_DS, T_FT, T_DN, T_ARR, T_GAP, T_LAST = range(13)

# B32 (int32): one 4-field record per block id h and instance (fields of a block share a
# cache line). Replica store of decode d at 4·U·d + 4·h: tokens, refs, LRU prev, LRU next.
# Prefix cache of prefill p at IS[H_PC] + 4·U·p + 4·h: tokens, LRU prev, LRU next, present.
RS_TOK, RS_REF, RS_PREV, RS_NEXT = range(4)
PC_TOK, PC_PREV, PC_NEXT, PC_IN = range(4)
# B8 (uint8): replica state bits of decode d at U·d + h; per block reference (index into
# blk_hash) "persisted" flag at IS[H_PFLAG]; hot-set membership at IS[H_HOT] + h.
ST_IN, ST_READY, ST_INACT = 1, 2, 4


# ---------------------------------------------------------------- cost model (costmodel.py)


@_sig("float64(float64[::1], int64, int64)")
def _weights_read(F, c0, batch):
    """InstanceCost.weights_read as a float, same operations."""
    ew = F[c0 + C_EW]
    if ew == 0.0:
        return F[c0 + C_W]
    touched = 1.0 - (1.0 - F[c0 + C_EF]) ** float(batch)
    return F[c0 + C_W] + ew * touched


@_jit
def _lin_sum(a, s, j0, j1):
    n = j1 - j0
    if n <= 0:
        return 0.0
    return n * a + s * (j0 + j1 - 1.0) * n / 2.0


@_sig("float64(float64, float64, float64, float64, float64, int64)")
def _series_time(a1, s1, a2, s2, o, k):
    if k <= 0:
        return 0.0
    last = k - 1
    kf = float(k)
    first = a1 >= a2
    if first == (a1 + s1 * last >= a2 + s2 * last):
        if first:
            return kf * o + _lin_sum(a1, s1, 0.0, kf)
        return kf * o + _lin_sum(a2, s2, 0.0, kf)
    x = (a2 - a1) / (s1 - s2)
    c = np.ceil(x)
    if 1.0 > c:  # Python's max(c, 1.0)
        c = 1.0
    if last < c:  # Python's min(c, last)
        c = float(last)
    if first:
        return kf * o + _lin_sum(a1, s1, 0.0, c) + _lin_sum(a2, s2, c, kf)
    return kf * o + _lin_sum(a2, s2, 0.0, c) + _lin_sum(a1, s1, c, kf)


@_jit
def _iterations_within(a1, s1, a2, s2, o, elapsed, k_max):
    if elapsed < 0.0:
        return 0
    if _series_time(a1, s1, a2, s2, o, k_max) <= elapsed:
        return k_max
    if a1 >= a2:
        a, s = a1, s1
    else:
        a, s = a2, s2
    a += o
    if s > 0.0:
        b = a - s / 2.0
        guess = (-b + math.sqrt(b * b + 2.0 * s * elapsed)) / s
    elif a > 0.0:
        guess = elapsed / a
    else:
        guess = 0.0
    v = guess
    if float(k_max - 1) < v:  # Python's int(max(0.0, min(guess, k_max - 1)))
        v = float(k_max - 1)
    lo = int(v) if v > 0.0 else 0
    for _ in range(3):
        if _series_time(a1, s1, a2, s2, o, lo) > elapsed:
            lo -= 1
        elif _series_time(a1, s1, a2, s2, o, lo + 1) <= elapsed:
            lo += 1
        else:
            return lo
    lo, hi = 0, k_max
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if _series_time(a1, s1, a2, s2, o, mid) <= elapsed:
            lo = mid
        else:
            hi = mid
    return lo


@_jit
def _coeffs(F, batch, ctx):
    """decode_series_coeffs(decode_cost, batch, ctx): (a1, s1, a2, s2, overhead)."""
    c0 = FP_DC
    fr, br = F[c0 + C_FRD], F[c0 + C_BR]
    att, kv = F[c0 + C_ATT], F[c0 + C_KV]
    a1 = (batch * (F[c0 + C_LF] + F[c0 + C_LMH]) + att * ctx) / fr
    s1 = att * batch / fr
    a2 = (_weights_read(F, c0, batch) + kv * ctx) / br
    s2 = kv * batch / br
    return a1, s1, a2, s2, F[c0 + C_DOV]


# ---------------------------------------------------------------- event heap


@_sig("void(float64[::1], int64[::1], int64[::1], float64, int64, int64, int64)")
def _push(EHT, EHI, IS, t, kind, a, b):
    IS[GI_SEQ] += 1
    key = (kind << KIND_SHIFT) | IS[GI_SEQ]
    i = IS[GI_HSZ]
    IS[GI_HSZ] = i + 1
    while i > 0:
        p = (i - 1) >> 1
        tp = EHT[p]
        if t < tp or (t == tp and key < EHI[3 * p]):
            EHT[i] = tp
            EHI[3 * i] = EHI[3 * p]
            EHI[3 * i + 1] = EHI[3 * p + 1]
            EHI[3 * i + 2] = EHI[3 * p + 2]
            i = p
        else:
            break
    EHT[i] = t
    EHI[3 * i] = key
    EHI[3 * i + 1] = a
    EHI[3 * i + 2] = b


@_jit
def _pop(EHT, EHI, IS):
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
                EHT[i] = EHT[c]
                EHI[3 * i] = EHI[3 * c]
                EHI[3 * i + 1] = EHI[3 * c + 1]
                EHI[3 * i + 2] = EHI[3 * c + 2]
                i = c
            else:
                break
        EHT[i] = t
        EHI[3 * i] = key
        EHI[3 * i + 1] = a
        EHI[3 * i + 2] = b
    return t0, k0 >> KIND_SHIFT, a0, b0


# ---------------------------------------------------------------- decode batch heap (it, rid)


@_jit
def _dh_push(IS, d, it, rid):
    capb = IS[H_CAPB]
    base = IS[H_DH] + 2 * capb * d
    rb = base + capb
    sz = DI0 + d * NDI + D_HSZ
    i = IS[sz]
    IS[sz] = i + 1
    while i > 0:
        p = (i - 1) >> 1
        if it < IS[base + p] or (it == IS[base + p] and rid < IS[rb + p]):
            IS[base + i] = IS[base + p]
            IS[rb + i] = IS[rb + p]
            i = p
        else:
            break
    IS[base + i] = it
    IS[rb + i] = rid


@_jit
def _dh_pop(IS, d):
    capb = IS[H_CAPB]
    base = IS[H_DH] + 2 * capb * d
    rb = base + capb
    r0 = IS[rb]
    sz = DI0 + d * NDI + D_HSZ
    size = IS[sz] - 1
    IS[sz] = size
    if size > 0:
        it, rid = IS[base + size], IS[rb + size]
        i = 0
        while True:
            c = 2 * i + 1
            if c >= size:
                break
            c2 = c + 1
            if c2 < size:
                it2, it1 = IS[base + c2], IS[base + c]
                if it2 < it1 or (it2 == it1 and IS[rb + c2] < IS[rb + c]):
                    c = c2
            if IS[base + c] < it or (IS[base + c] == it and IS[rb + c] < rid):
                IS[base + i] = IS[base + c]
                IS[rb + i] = IS[rb + c]
                i = c
            else:
                break
        IS[base + i] = it
        IS[rb + i] = rid
    return r0


# ---------------------------------------------------------------- intrusive lists
# A queue's head is IS[hp] and its tail IS[hp + 1]; its next (and prev) links are field ``f``
# (and ``g``) of each request's record in R.


@_jit
def _q_append(IS, R, hp, f, rid):
    R[rid * NR + f] = -1
    tail = IS[hp + 1]
    if tail == -1:
        IS[hp] = rid
    else:
        R[tail * NR + f] = rid
    IS[hp + 1] = rid


@_jit
def _q_popleft(IS, R, hp, f):
    rid = IS[hp]
    nxt = R[rid * NR + f]
    IS[hp] = nxt
    if nxt == -1:
        IS[hp + 1] = -1
    return rid


@_jit
def _wq_append(IS, R, hp, rid):
    tail = IS[hp + 1]
    R[rid * NR + R_WQN] = -1
    R[rid * NR + R_WQP] = tail
    if tail == -1:
        IS[hp] = rid
    else:
        R[tail * NR + R_WQN] = rid
    IS[hp + 1] = rid


@_jit
def _wq_remove(IS, R, hp, rid):
    p, nx = R[rid * NR + R_WQP], R[rid * NR + R_WQN]
    if p == -1:
        IS[hp] = nx
    else:
        R[p * NR + R_WQN] = nx
    if nx == -1:
        IS[hp + 1] = p
    else:
        R[nx * NR + R_WQP] = p


@_jit
def _lru_unlink(B32, IS, hp, base, po, no, h):
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


@_jit
def _lru_append(B32, IS, hp, base, po, no, h):
    tail = IS[hp + 1]
    rec = base + 4 * h
    B32[rec + po] = tail
    B32[rec + no] = -1
    if tail == -1:
        IS[hp] = h
    else:
        B32[base + 4 * tail + no] = h
    IS[hp + 1] = h


# ---------------------------------------------------------------- prefill prefix cache (BlockLRU)


@_jit
def _pc_match(IS, B32, p, bid, bt, i0, i1):
    base = IS[H_PC] + 4 * IS[IP_U] * p
    hit = 0
    for j in range(i0, i1):
        if B32[base + 4 * bid[j] + PC_IN] == 0:
            break
        hit += bt[j]
    return hit


@_jit
def _pc_insert(IS, B32, p, bid, bt, i0, i1):
    cap = IS[IP_PCAP]
    base = IS[H_PC] + 4 * IS[IP_U] * p
    pb = IS[H_PI] + p * NPI
    hp = pb + P_LRUH
    for j in range(i1 - 1, i0 - 1, -1):
        h = bid[j]
        rec = base + 4 * h
        if B32[rec + PC_IN]:
            _lru_unlink(B32, IS, hp, base, PC_PREV, PC_NEXT, h)
            _lru_append(B32, IS, hp, base, PC_PREV, PC_NEXT, h)
        elif bt[j] <= cap:
            B32[rec + PC_IN] = 1
            B32[rec + PC_TOK] = bt[j]
            _lru_append(B32, IS, hp, base, PC_PREV, PC_NEXT, h)
            IS[pb + P_USED] += bt[j]
    while IS[pb + P_USED] > cap:
        h = IS[hp]
        _lru_unlink(B32, IS, hp, base, PC_PREV, PC_NEXT, h)
        B32[base + 4 * h + PC_IN] = 0
        IS[pb + P_USED] -= B32[base + 4 * h + PC_TOK]


# ---------------------------------------------------------------- decode replicas (ReplicaStore)


@_jit
def _rs_match(B8, U, d, bid, i0, i1):
    """Number of leading blocks resident and ready on decode instance ``d``."""
    o = d * U
    k = 0
    for j in range(i0, i1):
        if B8[o + bid[j]] & ST_READY == 0:
            break
        k += 1
    return k


@_jit
def _rs_drop(IS, B32, B8, d, h):
    U = IS[IP_U]
    rec = 4 * U * d + 4 * h
    IS[DI0 + d * NDI + D_USED] -= B32[rec + RS_TOK]
    B32[rec + RS_TOK] = 0
    B32[rec + RS_REF] = 0
    B8[d * U + h] = 0


@_jit
def _rs_release_one(IS, B32, B8, d, h):
    U = IS[IP_U]
    base = 4 * U * d
    rec = base + 4 * h
    r = B32[rec + RS_REF] - 1
    assert r >= 0, "replica refcount went negative"
    B32[rec + RS_REF] = r
    if r == 0:
        if B8[d * U + h] & ST_READY:
            b = DI0 + d * NDI
            _lru_append(B32, IS, b + D_LRUH, base, RS_PREV, RS_NEXT, h)
            B8[d * U + h] |= ST_INACT
            IS[b + D_IDLE] += B32[rec + RS_TOK]
        else:  # its transfer never landed: nothing to keep
            _rs_drop(IS, B32, B8, d, h)


@_jit
def _rs_trim(IS, B32, B8, d, need):
    base = 4 * IS[IP_U] * d
    b = DI0 + d * NDI
    freed = 0
    while freed < need and IS[b + D_LRUH] != -1:
        h = IS[b + D_LRUH]
        _lru_unlink(B32, IS, b + D_LRUH, base, RS_PREV, RS_NEXT, h)
        t = B32[base + 4 * h + RS_TOK]
        freed += t
        IS[b + D_IDLE] -= t
        _rs_drop(IS, B32, B8, d, h)
    return freed


# ---------------------------------------------------------------- the simulator (core.Simulator)


@_jit
def _mem_changed(IS, F, d, t):
    b = DI0 + d * NDI
    f = DF0 + d * NDF
    lo = F[f + DF_MEM_T]
    if F[FP_TWARM] > lo:
        lo = F[FP_TWARM]
    if t > lo:
        F[G_REP_AREA] += IS[b + D_LREP] * (t - lo)
        F[G_USED_AREA] += IS[b + D_LUSED] * (t - lo)
    F[f + DF_MEM_T] = t
    rep = IS[b + D_USED]
    used = rep + IS[b + D_PRIV]
    IS[b + D_LREP] = rep
    IS[b + D_LUSED] = used
    if rep > IS[GI_PEAK_REP]:
        IS[GI_PEAK_REP] = rep
    if used > IS[GI_PEAK_USED]:
        IS[GI_PEAK_USED] = used
    assert used <= IS[IP_BUDGET], "decode KV over budget"


@_jit
def _start_prefill(IS, F, R, B32, EHT, EHI, bid, bt, p, t):
    n, ptr, io, ft = IS[IP_N], IS[H_PTR], IS[H_O], IS[H_FT]
    pb = IS[H_PI] + p * NPI
    budget = IS[IP_TOKB]
    c0 = FP_PC
    lf, lmh, att, kv = F[c0 + C_LF], F[c0 + C_LMH], F[c0 + C_ATT], F[c0 + C_KV]
    new_sum = 0
    flops = 0.0
    kv_io = 0.0
    first = -1
    last = -1
    while IS[pb + P_QH] != -1:
        rid = IS[pb + P_QH]
        i0, i1 = IS[ptr + rid], IS[ptr + rid + 1]
        prompt = R[rid * NR + R_PROMPT]
        hit = 0
        if i1 > i0:
            hit = _pc_match(IS, B32, p, bid, bt, i0, i1)
            if prompt - 1 < hit:
                hit = prompt - 1
        n_new = prompt - hit
        if first != -1 and new_sum + n_new > budget:
            break
        _q_popleft(IS, R, pb + P_QH, R_PQN)
        if first == -1:
            first = rid
        else:
            R[last * NR + R_PBN] = rid
        R[rid * NR + R_PBN] = -1
        last = rid
        new_sum += n_new
        IS[io + O_PH * n + rid] = hit
        F[ft + T_PS * n + rid] = t
        flops += n_new * lf + lmh + att * (n_new * hit + n_new * (n_new + 1) / 2.0)
        kv_io += kv * prompt
    bytes_ = _weights_read(F, c0, new_sum) + kv_io
    dur = flops / F[c0 + C_FRP]
    mem = bytes_ / F[c0 + C_BR]
    if mem > dur:  # Python's max(compute, memory)
        dur = mem
    dur = dur + F[c0 + C_POV]
    if t >= F[FP_TWARM]:
        F[IS[H_FPB] + p] += dur
    IS[pb + P_BH] = first
    _push(EHT, EHI, IS, t + dur, EV_PREFILL, p, 0)


@_jit
def _decode_route(IS, B8, bid, rid):
    nd = IS[IP_ND]
    code = IS[IP_DROUTE]
    if code == 2:  # round_robin
        i = IS[GI_RR_D] % nd
        IS[GI_RR_D] += 1
        return i
    if code == 1:  # prefix_affinity
        ptr = IS[H_PTR]
        i0, i1 = IS[ptr + rid], IS[ptr + rid + 1]
        if i1 != i0 and nd != 1:
            U = IS[IP_U]
            best, best_i = -1, 0
            for i in range(nd):
                k = _rs_match(B8, U, i, bid, i0, i1)
                load, best_load = IS[DI0 + i * NDI + D_LOAD], IS[DI0 + best_i * NDI + D_LOAD]
                if k > best or (k == best and load < best_load):
                    best, best_i = k, i
            return best_i
    best_i = 0  # least_load
    for i in range(1, nd):
        if IS[DI0 + i * NDI + D_LOAD] < IS[DI0 + best_i * NDI + D_LOAD]:
            best_i = i
    return best_i


@_sig("void(int64[::1], float64[::1], int64, int64, float64, int64)")
def _reject(IS, F, rid, d, t, reason):
    n, io = IS[IP_N], IS[H_O]
    IS[io + O_OUT * n + rid] = OUT_REJECTED
    IS[io + O_REA * n + rid] = reason
    F[IS[H_FT] + T_DN * n + rid] = t
    IS[DI0 + d * NDI + D_LOAD] -= 1
    IS[GI_INSYS] -= 1


@_jit
def _wait(IS, F, R, EHT, EHI, rid, d, t):
    _wq_append(IS, R, DI0 + d * NDI + D_WQH, rid)
    _push(EHT, EHI, IS, t + F[FP_WAIT_TO], EV_TIMEOUT, rid, 0)


@_jit
def _interrupt(IS, F, EHT, EHI, d, t):
    """Work arrived for decode instance ``d``: make it stop at the next iteration boundary."""
    b = DI0 + d * NDI
    f = DF0 + d * NDF
    if IS[b + D_STALL]:
        return
    if IS[b + D_B] == 0:
        if F[f + DF_NEXT_T] > t:
            IS[b + D_VER] += 1
            F[f + DF_NEXT_T] = t
            IS[b + D_NK] = 0
            F[f + DF_TSEG] = t
            _push(EHT, EHI, IS, t, EV_DECODE, d, IS[b + D_VER])
        return
    a1, s1, a2, s2, o = _coeffs(F, IS[b + D_B], IS[b + D_CTX])
    k_max = IS[IS[H_DH] + 2 * IS[H_CAPB] * d] - IS[b + D_IT]
    tseg = F[f + DF_TSEG]
    k = _iterations_within(a1, s1, a2, s2, o, t - tseg, k_max) + 1
    if k_max < k:
        k = k_max
    # decide in absolute time, the way boundary times are computed (see core._interrupt)
    while k < k_max and tseg + _series_time(a1, s1, a2, s2, o, k) <= t:
        k += 1
    while k > 1 and tseg + _series_time(a1, s1, a2, s2, o, k - 1) > t:
        k -= 1
    tb = tseg + _series_time(a1, s1, a2, s2, o, k)
    if tb < F[f + DF_NEXT_T]:
        IS[b + D_VER] += 1
        F[f + DF_NEXT_T] = tb
        IS[b + D_NK] = k
        _push(EHT, EHI, IS, tb, EV_DECODE, d, IS[b + D_VER])


@_jit
def _admit(IS, F, R, B32, B8, EHT, EHI, bid, bt, rid, d, t):
    """Reserve KV on decode instance ``d`` and start the hand-off; False if no room."""
    n, ptr, io, U = IS[IP_N], IS[H_PTR], IS[H_O], IS[IP_U]
    b = DI0 + d * NDI
    rs = 4 * U * d  # this instance's replica records in B32
    st = d * U  # and state bits in B8
    rr = rid * NR
    policy = IS[IP_POLICY]
    uses_replicas = policy >= POL_HOTSET
    budget = IS[IP_BUDGET]
    i0, i1 = IS[ptr + rid], IS[ptr + rid + 1]
    nhit = 0
    if uses_replicas and i1 > i0:
        nhit = _rs_match(B8, U, d, bid, i0, i1)
    hit_tok = 0
    for j in range(i0, i0 + nhit):
        hit_tok += bt[j]
    prompt = np.int64(R[rr + R_PROMPT])
    need = prompt + R[rr + R_OUTPUT] - hit_tok
    if need > budget:
        _reject(IS, F, rid, d, t, R_TOO_LARGE)
        return True
    free = budget - IS[b + D_PRIV] - IS[b + D_USED]
    if free < need:
        idle_hit = 0
        for j in range(i0, i0 + nhit):
            rec = rs + 4 * bid[j]
            if B32[rec + RS_REF] == 0:
                idle_hit += B32[rec + RS_TOK]
        if free + IS[b + D_IDLE] - idle_hit < need:
            return False
    for j in range(i0, i0 + nhit):  # store.acquire(hit blocks)
        h = bid[j]
        rec = rs + 4 * h
        if B32[rec + RS_REF] == 0:
            _lru_unlink(B32, IS, b + D_LRUH, rs, RS_PREV, RS_NEXT, h)
            B8[st + h] &= ~ST_INACT
            IS[b + D_IDLE] -= B32[rec + RS_TOK]
        B32[rec + RS_REF] += 1
    if free < need:
        _rs_trim(IS, B32, B8, d, need - free)
    ptoks = 0
    if uses_replicas:
        pflag = IS[H_PFLAG]
        hot = IS[H_HOT]
        persisted = False
        for j in range(i0 + nhit, i1):
            h = bid[j]
            if B8[st + h] & ST_IN == 0 and (policy == POL_ALL_LRU or B8[hot + h] != 0):
                rec = rs + 4 * h  # store.add_pending
                B32[rec + RS_TOK] = bt[j]
                B32[rec + RS_REF] = 1
                B8[st + h] = ST_IN
                IS[b + D_USED] += bt[j]
                B8[pflag + j] = 1
                ptoks += bt[j]
                persisted = True
        if persisted:
            R[rr + R_FLAGS] |= F_PERS
    private = need - ptoks
    IS[b + D_PRIV] += private
    R[rr + R_PRIV] = private
    R[rr + R_NHIT] = nhit
    IS[io + O_PT * n + rid] = ptoks
    IS[io + O_RH * n + rid] = hit_tok
    ft = IS[H_FT]
    F[ft + T_AD * n + rid] = t
    _mem_changed(IS, F, d, t)

    if policy == POL_TRANSFER:
        xfer, rc = prompt, np.int64(0)
    elif policy == POL_RECOMPUTE:
        ph = IS[io + O_PH * n + rid]
        xfer, rc = prompt - ph, ph
    else:
        xfer, rc = prompt - hit_tok, np.int64(0)
    IS[io + O_XT * n + rid] = xfer
    IS[io + O_RC * n + rid] = rc
    land = t
    nbytes = xfer * F[FP_DC + C_KV]
    if nbytes > 0:
        nc = IS[IP_NC]
        ch = IS[H_FCH] + (IS[io + O_PI * n + rid] * IS[IP_ND] + d) * nc
        c = 0
        for i in range(1, nc):  # the channel free first (ties: lowest index)
            if F[ch + i] < F[ch + c]:
                c = i
        start = t
        if F[ch + c] > start:
            start = F[ch + c]
        occupy = nbytes / F[FP_LINK_BPS]
        F[ch + c] = start + occupy
        if start >= F[FP_TWARM]:
            F[G_LINK] += occupy
        land = start + occupy + F[FP_LINK_LAT]
        F[ft + T_XS * n + rid] = start
    else:
        F[ft + T_XS * n + rid] = t
    _push(EHT, EHI, IS, land, EV_TRANSFER, rid, 0)
    if rc > 0:
        R[rr + R_FLAGS] |= F_RC
        _q_append(IS, R, b + D_RQH, R_RQN, rid)
        _interrupt(IS, F, EHT, EHI, d, t)
    return True


@_jit
def _drain_waiting(IS, F, R, B32, B8, EHT, EHI, bid, bt, d, t):
    n, io = IS[IP_N], IS[H_O]
    hp = DI0 + d * NDI + D_WQH
    while IS[hp] != -1:
        rid = IS[hp]
        if IS[io + O_OUT * n + rid] == OUT_REJECTED:
            _wq_remove(IS, R, hp, rid)
        elif _admit(IS, F, R, B32, B8, EHT, EHI, bid, bt, rid, d, t):
            _wq_remove(IS, R, hp, rid)
        else:
            break


@_jit
def _finish(IS, F, R, B32, B8, bid, rid, d, t):
    n, ptr, io = IS[IP_N], IS[H_PTR], IS[H_O]
    b = DI0 + d * NDI
    rr = rid * NR
    F[IS[H_FT] + T_DN * n + rid] = t
    IS[io + O_OUT * n + rid] = OUT_COMPLETED
    IS[b + D_B] -= 1
    IS[b + D_CTX] -= np.int64(R[rr + R_PROMPT]) + R[rr + R_OUTPUT]
    IS[b + D_PRIV] -= R[rr + R_PRIV]
    # release(held + persisted) goes tail first; persisted blocks follow the held prefix
    i0, i1 = IS[ptr + rid], IS[ptr + rid + 1]
    held_end = i0 + R[rr + R_NHIT]
    pers = R[rr + R_FLAGS] & F_PERS
    pflag = IS[H_PFLAG]
    for j in range(i1 - 1, i0 - 1, -1):
        if j < held_end or (pers and B8[pflag + j]):
            _rs_release_one(IS, B32, B8, d, bid[j])
    IS[b + D_LOAD] -= 1
    IS[GI_INSYS] -= 1


@_jit
def _run_recompute(IS, F, R, EHT, EHI, d, t):
    """Run every queued prefix recompute back to back; the batch stalls meanwhile."""
    n, io, ft = IS[IP_N], IS[H_O], IS[H_FT]
    b = DI0 + d * NDI
    f = DF0 + d * NDF
    c0 = FP_DC
    lf, att, kv = F[c0 + C_LF], F[c0 + C_ATT], F[c0 + C_KV]
    end = t
    while IS[b + D_RQH] != -1:
        rid = _q_popleft(IS, R, b + D_RQH, R_RQN)
        m = IS[io + O_RC * n + rid]
        flops = m * lf + att * m * (m + 1) / 2.0
        bytes_ = _weights_read(F, c0, m) + kv * m
        F[ft + T_RS * n + rid] = end
        step = flops / F[c0 + C_FRP]
        mem = bytes_ / F[c0 + C_BR]
        if mem > step:
            step = mem
        end += step + F[c0 + C_POV]
        F[ft + T_RE * n + rid] = end
        R[rid * NR + R_FLAGS] &= ~F_RC
        if R[rid * NR + R_FLAGS] & F_XD:
            _q_append(IS, R, b + D_JQH, R_JQN, rid)
    IS[b + D_STALL] = 1
    F[f + DF_STALL_END] = end
    IS[b + D_VER] += 1
    F[f + DF_NEXT_T] = end
    IS[b + D_NK] = 0
    _push(EHT, EHI, IS, end, EV_DECODE, d, IS[b + D_VER])


@_jit
def _record_gaps(IS, F, d, k):
    """Largest token gap per sequence over ``k`` closed-form iterations (core._record_gaps)."""
    b = DI0 + d * NDI
    n, ft = IS[IP_N], IS[H_FT]
    a1, s1, a2, s2, o = _coeffs(F, IS[b + D_B], IS[b + D_CTX])
    worst = 0.0
    if k > 1:  # Python's max(a1 + s1·(k-1), a2 + s2·(k-1), a1, a2) + o
        worst = a1 + s1 * (k - 1)
        if a2 + s2 * (k - 1) > worst:
            worst = a2 + s2 * (k - 1)
        if a1 > worst:
            worst = a1
        if a2 > worst:
            worst = a2
        worst = worst + o
    tseg = F[DF0 + d * NDF + DF_TSEG]
    t1 = tseg + _series_time(a1, s1, a2, s2, o, 1)
    tk = tseg + _series_time(a1, s1, a2, s2, o, k)
    rb = IS[H_DH] + 2 * IS[H_CAPB] * d + IS[H_CAPB]
    for i in range(IS[b + D_HSZ]):
        rid = IS[rb + i]
        g = t1 - F[ft + T_LAST * n + rid]
        if F[ft + T_FT * n + rid] == t1:
            g = 0.0  # this iteration emits its first token: no gap yet
        m = g if g > worst else worst
        if m > F[ft + T_GAP * n + rid]:
            F[ft + T_GAP * n + rid] = m
        F[ft + T_LAST * n + rid] = tk


@_jit
def _decode_boundary(IS, F, R, B32, B8, EHT, EHI, bid, bt, d, version, t):
    b = DI0 + d * NDI
    if version != IS[b + D_VER]:
        return  # superseded by an earlier boundary
    n, ft = IS[IP_N], IS[H_FT]
    f = DF0 + d * NDF
    k = IS[b + D_NK]
    nb = IS[b + D_B]
    if (nb > 0 or IS[b + D_STALL]) and F[f + DF_TSEG] >= F[FP_TWARM]:
        F[f + DF_BUSY] += t - F[f + DF_TSEG]
        F[G_BATCH_AREA] += nb * (t - F[f + DF_TSEG])
    if k > 0 and IS[IP_GAPS]:
        _record_gaps(IS, F, d, k)
    it = IS[b + D_IT] + k
    IS[b + D_IT] = it
    IS[b + D_CTX] += nb * k
    F[f + DF_TSEG] = t
    IS[b + D_STALL] = 0
    F[f + DF_NEXT_T] = INF
    freed = False
    top = IS[H_DH] + 2 * IS[H_CAPB] * d  # heap[0][0]
    while IS[b + D_HSZ] > 0 and IS[top] == it:
        rid = _dh_pop(IS, d)
        _finish(IS, F, R, B32, B8, bid, rid, d, t)
        freed = True
    if freed:
        _mem_changed(IS, F, d, t)
        _drain_waiting(IS, F, R, B32, B8, EHT, EHI, bid, bt, d, t)
    if IS[b + D_RQH] != -1:
        _run_recompute(IS, F, R, EHT, EHI, d, t)
        return
    jn = IS[H_JN]
    nj = 0
    maxb = IS[IP_MAXB]
    while IS[b + D_JQH] != -1 and IS[b + D_B] < maxb:
        rid = _q_popleft(IS, R, b + D_JQH, R_JQN)
        IS[b + D_B] += 1
        IS[b + D_CTX] += R[rid * NR + R_PROMPT]
        _dh_push(IS, d, it + R[rid * NR + R_OUTPUT], rid)
        F[ft + T_DS * n + rid] = t
        IS[jn + nj] = rid
        nj += 1
    if IS[b + D_B] == 0:
        return
    a1, s1, a2, s2, o = _coeffs(F, IS[b + D_B], IS[b + D_CTX])
    if nj:
        first = t + _series_time(a1, s1, a2, s2, o, 1)
        gaps = IS[IP_GAPS]
        for i in range(nj):
            F[ft + T_FT * n + IS[jn + i]] = first
            if gaps:  # the first iteration's gap runs from its start
                F[ft + T_LAST * n + IS[jn + i]] = t
    k_next = IS[top] - it
    IS[b + D_VER] += 1
    nt = t + _series_time(a1, s1, a2, s2, o, k_next)
    F[f + DF_NEXT_T] = nt
    IS[b + D_NK] = k_next
    _push(EHT, EHI, IS, nt, EV_DECODE, d, IS[b + D_VER])


@_jit
def _prefill_done(IS, F, R, B32, B8, EHT, EHI, bid, bt, p, t):
    n, ptr, io, ft = IS[IP_N], IS[H_PTR], IS[H_O], IS[H_FT]
    pb = IS[H_PI] + p * NPI
    first = IS[pb + P_BH]
    IS[pb + P_BH] = -1
    rid = first
    while rid != -1:
        F[ft + T_PE * n + rid] = t
        IS[pb + P_LOAD] -= R[rid * NR + R_PROMPT]
        i0, i1 = IS[ptr + rid], IS[ptr + rid + 1]
        if i1 > i0:
            _pc_insert(IS, B32, p, bid, bt, i0, i1)
        rid = R[rid * NR + R_PBN]
    wait = IS[IP_WAIT] != 0
    rid = first
    while rid != -1:
        d = _decode_route(IS, B8, bid, rid)
        IS[io + O_DI * n + rid] = d
        IS[DI0 + d * NDI + D_LOAD] += 1
        if IS[DI0 + d * NDI + D_WQH] != -1 and wait:
            _wait(IS, F, R, EHT, EHI, rid, d, t)  # first come, first admitted
        elif not _admit(IS, F, R, B32, B8, EHT, EHI, bid, bt, rid, d, t):
            if wait:
                _wait(IS, F, R, EHT, EHI, rid, d, t)
            else:
                _reject(IS, F, rid, d, t, R_NO_MEMORY)
        rid = R[rid * NR + R_PBN]
    if IS[pb + P_QH] != -1:
        _start_prefill(IS, F, R, B32, EHT, EHI, bid, bt, p, t)


@_jit
def _arrive(IS, F, R, B32, EHT, EHI, bid, bt, rid, t):
    n = IS[IP_N]
    if rid + 1 < n:
        _push(EHT, EHI, IS, F[IS[H_FT] + T_ARR * n + rid + 1], EV_ARRIVAL, rid + 1, 0)
    IS[GI_INSYS] += 1
    npf = IS[IP_NP]
    pi = IS[H_PI]
    if IS[IP_PROUTE] == 1:  # round_robin
        p = IS[GI_RR_P] % npf
        IS[GI_RR_P] += 1
    else:  # least_tokens
        p = 0
        for i in range(1, npf):
            if IS[pi + i * NPI + P_LOAD] < IS[pi + p * NPI + P_LOAD]:
                p = i
    IS[IS[H_O] + O_PI * n + rid] = p
    pb = pi + p * NPI
    _q_append(IS, R, pb + P_QH, R_PQN, rid)
    IS[pb + P_LOAD] += R[rid * NR + R_PROMPT]
    if IS[pb + P_BH] == -1:
        _start_prefill(IS, F, R, B32, EHT, EHI, bid, bt, p, t)


@_jit
def _landed(IS, F, R, B8, EHT, EHI, bid, rid, t):
    n, ptr = IS[IP_N], IS[H_PTR]
    F[IS[H_FT] + T_XE * n + rid] = t
    d = IS[IS[H_O] + O_DI * n + rid]
    fl = rid * NR + R_FLAGS
    if R[fl] & F_PERS:  # store.mark_ready(persisted)
        pflag = IS[H_PFLAG]
        st = d * IS[IP_U]
        for j in range(IS[ptr + rid] + R[rid * NR + R_NHIT], IS[ptr + rid + 1]):
            if B8[pflag + j]:
                B8[st + bid[j]] |= ST_READY
    R[fl] |= F_XD
    if not R[fl] & F_RC:
        _q_append(IS, R, DI0 + d * NDI + D_JQH, R_JQN, rid)
        _interrupt(IS, F, EHT, EHI, d, t)


@_jit
def _timeout(IS, F, R, rid, t):
    n, io = IS[IP_N], IS[H_O]
    if IS[io + O_OUT * n + rid] == OUT_PENDING and math.isnan(F[IS[H_FT] + T_AD * n + rid]):
        # leave the wait queue now (see core._timeout), then give up
        d = IS[io + O_DI * n + rid]
        _wq_remove(IS, R, DI0 + d * NDI + D_WQH, rid)
        _reject(IS, F, rid, d, t, R_TIMEOUT)


@_jit
def _run(IS, F, R, B32, B8, EHT, EHI, bid, bt):
    """Handle events until none is left (returns 0) or the heap might overflow (returns the
    capacity it needs: the caller grows it and calls again)."""
    cap = EHT.shape[0]
    while IS[GI_HSZ] > 0:
        # one handler pushes at most two events per request in the system, plus two
        need = IS[GI_HSZ] + 2 * IS[GI_INSYS] + 4
        if need > cap:
            return need
        t, kind, a, b = _pop(EHT, EHI, IS)
        F[G_NOW] = t
        if kind == EV_DECODE:
            _decode_boundary(IS, F, R, B32, B8, EHT, EHI, bid, bt, a, b, t)
        elif kind == EV_TRANSFER:
            _landed(IS, F, R, B8, EHT, EHI, bid, a, t)
        elif kind == EV_PREFILL:
            _prefill_done(IS, F, R, B32, B8, EHT, EHI, bid, bt, a, t)
        elif kind == EV_TIMEOUT:
            _timeout(IS, F, R, a, t)
        else:
            _arrive(IS, F, R, B32, EHT, EHI, bid, bt, a, t)
    return 0


@_jit
def _prewarm(IS, B32, B8, hot_ids, hot_tok):
    """ReplicaStore.prewarm on every decode instance: ready, idle, least hot trimmed first."""
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
                _lru_append(B32, IS, b + D_LRUH, rs, RS_PREV, RS_NEXT, h)
                IS[b + D_USED] += hot_tok[k]
                IS[b + D_IDLE] += hot_tok[k]


@_jit
def _close(IS, F):
    """The end of the run: integrate memory up to t_end (left in F[G_NOW])."""
    t_end = F[G_NOW]
    if F[FP_TWARM] > t_end:
        t_end = F[FP_TWARM]
    for d in range(IS[IP_ND]):
        _mem_changed(IS, F, d, t_end)
    F[G_NOW] = t_end


def _layout(
    req: Requests,
    bid: np.ndarray,
    n_ids: int,
    ip: np.ndarray,
    fp: np.ndarray,
    hot_ids: np.ndarray,
    hot_t: np.ndarray,
):
    """Allocate and initialise the flat state (layout at the top of the module)."""
    n, nb = len(req), bid.shape[0]
    P, D, C = int(ip[IP_NP]), int(ip[IP_ND]), int(ip[IP_NC])
    U = n_ids
    capb = min(int(ip[IP_MAXB]), n) + 1
    o_pi = DI0 + D * NDI
    o_dh = o_pi + P * NPI
    o_jn = o_dh + 2 * capb * D
    o_ptr = o_jn + capb
    o_out = o_ptr + n + 1
    IS = np.zeros(o_out + 9 * n, dtype=np.int64)
    IS[:NIP] = ip
    IS[IP_N], IS[IP_U] = n, U
    IS[H_PI], IS[H_DH], IS[H_CAPB] = o_pi, o_dh, capb
    IS[H_JN], IS[H_PTR], IS[H_O] = o_jn, o_ptr, o_out
    dI = IS[DI0:o_pi].reshape(D, NDI)
    dI[:, [D_JQH, D_JQT, D_RQH, D_RQT, D_WQH, D_WQT, D_LRUH, D_LRUT]] = -1
    IS[o_pi:o_dh].reshape(P, NPI)[:, [P_QH, P_QT, P_BH, P_LRUH, P_LRUT]] = -1
    IS[o_ptr:o_out] = req.blk_ptr

    R = np.zeros(n * NR, dtype=np.int32)
    R[R_PROMPT::NR] = req.prompt_len
    R[R_OUTPUT::NR] = req.output_len

    f_pb = DF0 + D * NDF
    f_ch = f_pb + P
    f_t = f_ch + P * D * C
    rows = T_LAST + 1 if ip[IP_GAPS] else T_ARR + 1
    F = np.zeros(f_t + rows * n)
    F[:NFP] = fp
    dF = F[DF0:f_pb].reshape(D, NDF)
    dF[:, DF_STALL_END] = -INF
    dF[:, DF_NEXT_T] = INF
    F[f_t : f_t + T_ARR * n] = np.nan
    F[f_t + T_ARR * n : f_t + (T_ARR + 1) * n] = req.arrival
    if ip[IP_GAPS]:
        F[f_t + T_LAST * n :] = np.nan
    IS[H_FPB], IS[H_FCH], IS[H_FT] = f_pb, f_ch, f_t

    B32 = np.zeros(4 * (D + P) * U, dtype=np.int32)
    B8 = np.zeros(D * U + nb + U, dtype=np.uint8)
    IS[H_PC], IS[H_PFLAG], IS[H_HOT] = 4 * D * U, D * U, D * U + nb
    B8[D * U + nb + hot_ids] = 1
    if ip[IP_POLICY] == POL_HOTSET and hot_ids.shape[0] > 0:
        _prewarm(IS, B32, B8, hot_ids, hot_t)
        IS[GI_PEAK_REP] = IS[GI_PEAK_USED] = IS[DI0 + D_USED]
    dI[:, D_LREP] = dI[:, D_USED]
    dI[:, D_LUSED] = dI[:, D_USED]
    return IS, F, R, B32, B8


def _simulate_arrays(IS, F, R, B32, B8, bid, bt, first_arrival):
    """Run the compiled event loop to the end, growing the event heap when it asks."""
    cap = 1024
    EHT, EHI = np.empty(cap), np.empty(3 * cap, dtype=np.int64)
    if IS[IP_N]:
        _push(EHT, EHI, IS, first_arrival, EV_ARRIVAL, 0, 0)
    while (need := _run(IS, F, R, B32, B8, EHT, EHI, bid, bt)) != 0:
        while cap < need:
            cap *= 2
        size = int(IS[GI_HSZ])
        t2, i2 = np.empty(cap), np.empty(3 * cap, dtype=np.int64)
        t2[:size], i2[: 3 * size] = EHT[:size], EHI[: 3 * size]
        EHT, EHI = t2, i2
    _close(IS, F)


# ---------------------------------------------------------------- Python entry point


def _codes(cfg: EngineConfig) -> tuple[int, int, int] | None:
    """Integer codes of the run's policy and routers, or None when the registries hold
    something the codes do not describe (a newly registered or replaced entry)."""
    from .policies import POLICIES
    from .routing import DECODE_ROUTERS, PREFILL_ROUTERS

    pol = POLICY_CODES.get(cfg.policy)
    pr = PREFILL_ROUTER_CODES.get(cfg.prefill_router)
    dr = DECODE_ROUTER_CODES.get(cfg.decode_router)
    if pol is None or pr is None or dr is None:
        return None
    if POLICIES.get(cfg.policy) is not _POLICY_CLASSES[cfg.policy]:
        return None
    routers = (
        ("prefill", cfg.prefill_router, PREFILL_ROUTERS),
        ("decode", cfg.decode_router, DECODE_ROUTERS),
    )
    for kind, name, reg in routers:
        fn = reg.get(name)
        if fn is None or ((kind, name) in _ROUTER_FUNCS and fn is not _ROUTER_FUNCS[kind, name]):
            return None
    return pol, pr, dr


def dense_block_ids(blk_hash: np.ndarray, hot: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """Block hashes as dense ids in [0, U): (request blocks, hot blocks, U).

    Hashes that are already small non-negative integers (synthetic prefix ids, Mooncake
    hash ids and tiled copies of them) are used as they are; others are ranked with
    ``np.unique``. Equal hash <=> equal id either way, which is all the caches need.
    """
    total = blk_hash.shape[0] + hot.shape[0]
    if total == 0:
        return blk_hash, hot, 0
    both = [a for a in (blk_hash, hot) if a.size]
    lo = min(int(a.min()) for a in both)
    hi = max(int(a.max()) for a in both)
    if lo >= 0 and hi < min(2**31 - 1, 4 * total + 65536):
        return blk_hash, hot, hi + 1
    _, inv = np.unique(np.concatenate((blk_hash, hot)), return_inverse=True)
    inv = inv.astype(np.int64).reshape(-1)
    return inv[: blk_hash.shape[0]], inv[blk_hash.shape[0] :], int(inv.max()) + 1


_KNOWN_FIELDS = frozenset(
    {
        "policy",
        "prefill_cost",
        "decode_cost",
        "n_prefill",
        "n_decode",
        "link_bytes_per_s",
        "link_latency_s",
        "link_channels",
        "max_batch",
        "prefill_token_budget",
        "prefill_cache_tokens",
        "budget_tokens",
        "hot_blocks",
        "on_full",
        "wait_timeout_s",
        "prefill_router",
        "decode_router",
        "warmup_requests",
        "track_gaps",
    }
)


def _unknown_setting(cfg: EngineConfig) -> bool:
    """True if ``cfg`` sets a field this port does not implement (added to the Python core
    later) to anything but its default: such a run must use the Python core."""
    for f in dataclasses.fields(cfg):
        if f.name in _KNOWN_FIELDS:
            continue
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        if getattr(cfg, f.name) != default:
            return True
    return False


def _plain_int(v) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, bool) and abs(int(v)) < 2**62


def simulate_fast(req: Requests, cfg: EngineConfig, recorder=None) -> SimResult:
    """``core.simulate`` compiled: the same columns and stats, bit for bit. Runs the Python
    core instead when a timeline ``recorder`` is given or the policy or a router has no code."""
    if recorder is not None:
        return Simulator(req, cfg, recorder).run()
    codes = _codes(cfg)
    if codes is None or _unknown_setting(cfg):
        return Simulator(req, cfg).run()
    ints = (
        cfg.n_prefill,
        cfg.n_decode,
        cfg.link_channels,
        cfg.max_batch,
        cfg.prefill_token_budget,
        cfg.budget_tokens,
    )
    if not all(_plain_int(v) for v in ints) or not _plain_int(min(cfg.prefill_cache_tokens, 2**61)):
        return Simulator(req, cfg).run()
    n = len(req)
    ip = np.array(
        [
            cfg.n_prefill,
            cfg.n_decode,
            cfg.link_channels,
            cfg.max_batch,
            cfg.prefill_token_budget,
            min(cfg.prefill_cache_tokens, 2**61),
            cfg.budget_tokens,
            cfg.on_full == "wait",
            *codes,
            bool(getattr(cfg, "track_gaps", False)),
        ],
        dtype=np.int64,
    )
    warm = min(cfg.warmup_requests, n - 1) if n else 0
    t_warm = float(req.arrival[warm]) if n else 0.0
    fp = np.array(
        [cfg.link_bytes_per_s, cfg.link_latency_s, cfg.wait_timeout_s, t_warm]
        + [getattr(cfg.prefill_cost, f) for f in _COST_FIELDS]
        + [getattr(cfg.decode_cost, f) for f in _COST_FIELDS],
        dtype=np.float64,
    )
    hot_h = np.array([h for h, _ in cfg.hot_blocks], dtype=np.int64)
    hot_t = np.array([t for _, t in cfg.hot_blocks], dtype=np.int64)
    c64 = lambda a: np.ascontiguousarray(a, dtype=np.int64)  # noqa: E731
    bid, hot_ids, n_ids = dense_block_ids(c64(req.blk_hash), hot_h)
    bid, bt = c64(bid), c64(req.blk_tokens)
    longest = int(req.prompt_len.max(initial=0)) + int(req.output_len.max(initial=0))
    if max(n, n_ids, longest) >= 2**31 - 1:
        return Simulator(req, cfg).run()  # beyond the int32 records
    IS, F, R, B32, B8 = _layout(req, bid, n_ids, ip, fp, hot_ids, hot_t)
    _simulate_arrays(IS, F, R, B32, B8, bid, bt, float(req.arrival[0]) if n else 0.0)
    io, ft = int(IS[H_O]), int(IS[H_FT])
    # the columns are views into IS and F: no copy
    cols = {name: F[ft + i * n : ft + (i + 1) * n] for i, name in enumerate(TIME_COLUMNS)}
    cols.update({name: IS[io + i * n : io + (i + 1) * n] for i, name in enumerate(INT_COLUMNS)})
    if ip[IP_GAPS]:
        cols["max_token_gap"] = F[ft + T_GAP * n : ft + (T_GAP + 1) * n]
    t_end = float(F[G_NOW])
    window = max(t_end - t_warm, 1e-12)
    n_dec = cfg.n_decode
    p_busy = F[int(IS[H_FPB]) : int(IS[H_FPB]) + cfg.n_prefill].tolist()
    d_busy = [float(F[DF0 + d * NDF + DF_BUSY]) for d in range(n_dec)]
    stats = {
        "t_warm": t_warm,
        "t_end": t_end,
        "budget_tokens": float(cfg.budget_tokens),
        "mean_replica_tokens": float(F[G_REP_AREA]) / window / n_dec,
        "peak_replica_tokens": float(IS[GI_PEAK_REP]),
        "mean_used_tokens": float(F[G_USED_AREA]) / window / n_dec,
        "peak_used_tokens": float(IS[GI_PEAK_USED]),
        "prefill_util": sum(p_busy) / window / cfg.n_prefill,
        "decode_util": sum(d_busy) / window / n_dec,
        "mean_decode_batch": float(F[G_BATCH_AREA]) / window / n_dec,
        "link_util": float(F[G_LINK]) / window / (cfg.n_prefill * n_dec * cfg.link_channels),
    }
    return SimResult(cols, stats)
