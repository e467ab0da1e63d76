"""The event core compiled with numba: same semantics and outputs as ``core.Simulator``.

``core.py`` is the specification (readable, one method per event); this module is a
line-by-line port onto array state so numba can compile the whole event loop:

* the event queue is a binary heap over parallel arrays ``(time, kind<<56|seq, a, b)``,
  ordered by (time, kind, seq) exactly like ``heapq`` on the core's tuples;
* request state is one row per field of 2-D arrays indexed by request id; the core's deques
  (prefill queue, join, recompute and wait queues) are intrusive linked lists through
  per-request ``next`` fields (a request sits in at most one queue of each kind);
* block hashes become dense ids (the hashes themselves when they are small non-negative
  integers, else ``np.unique`` ranks), so ``BlockLRU`` and ``ReplicaStore`` are flat arrays
  per instance plus an intrusive doubly linked LRU list — no hashing in the hot loop;
* policies and routers are integer codes (``POLICY_CODES`` and the router maps below, next
  to the name registries they mirror); a name without a code (a newly registered policy)
  falls back to the Python core.

Every floating-point expression keeps the core's operand order, so results are bit for bit
equal (tests/test_fastcore.py). Compiled code is cached in ``__pycache__`` (``cache=True``):
the first run on a machine compiles (see docs/performance.md for the cost), later
processes load the cache.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from ..workload.requests import Requests
from . import policies as _policies
from . import routing as _routing
from .core import EngineConfig, SimResult, Simulator

# ---------------------------------------------------------------- name -> code maps

POLICY_CODES = {"transfer_per_request": 0, "recompute_on_decode": 1, "replicate_hotset": 2, "replicate_all_lru": 3}
_POLICY_CLASSES = {
    "transfer_per_request": _policies.TransferPerRequest,
    "recompute_on_decode": _policies.RecomputeOnDecode,
    "replicate_hotset": _policies.ReplicateHotset,
    "replicate_all_lru": _policies.ReplicateAllLRU,
}
PREFILL_ROUTER_CODES = {"least_tokens": 0, "round_robin": 1}
DECODE_ROUTER_CODES = {"least_load": 0, "prefix_affinity": 1, "round_robin": 2}
_PREFILL_FUNCS = {"least_tokens": _routing.prefill_least_tokens}
_DECODE_FUNCS = {"least_load": _routing.decode_least_load, "prefix_affinity": _routing.decode_prefix_affinity}

# Helpers run without numba's reference counting (``_nrt=False``): they only index arrays the
# kernel allocated and keeps alive, and per-call incref/decref of every state array would
# otherwise dominate the event loop. Only ``_kernel`` (which allocates) uses the runtime.
_jit = njit(cache=True, error_model="numpy", _nrt=False)
_jit_alloc = njit(cache=True, error_model="numpy")

# ---------------------------------------------------------------- layout constants

EV_DECODE, EV_TRANSFER, EV_PREFILL, EV_TIMEOUT, EV_ARRIVAL = 0, 1, 2, 3, 4
KIND_SHIFT = 56
SEQ_MASK = (1 << KIND_SHIFT) - 1
POL_TRANSFER, POL_RECOMPUTE, POL_HOTSET, POL_ALL_LRU = 0, 1, 2, 3

# per-request times T[row, rid] (the first 10 SimResult columns, in order)
T_PS, T_PE, T_AD, T_XS, T_XE, T_RS, T_RE, T_DS, T_FT, T_DN = range(10)
TIME_COLUMNS = (
    "t_prefill_start", "t_prefill_end", "t_admit", "t_transfer_start", "t_transfer_end",
    "t_recompute_start", "t_recompute_end", "t_decode_start", "t_first_token", "t_done",
)
# per-request integer outputs O[row, rid]
O_PI, O_DI, O_OUT, O_REA, O_PH, O_RH, O_RC, O_XT, O_PT = range(9)
INT_COLUMNS = (
    "prefill_instance", "decode_instance", "outcome", "reject_reason", "prefill_hit_tokens",
    "replica_hit_tokens", "recompute_tokens", "transfer_tokens", "persisted_tokens",
)
# per-request internals X[row, rid]: private tokens, held replica blocks, flags, queue links
X_PRIV, X_NHIT, X_FLAGS, X_PQN, X_PBN, X_JQN, X_RQN, X_WQN, X_WQP = range(9)
NX = 9
F_RC, F_XD, F_PERS = 1, 2, 4  # recompute pending, KV landed, has persisted blocks
OUT_PENDING, OUT_COMPLETED, OUT_REJECTED = 0, 1, 2
R_NONE, R_NO_MEMORY, R_TIMEOUT, R_TOO_LARGE = 0, 1, 2, 3

# decode instance ints dI[d, col] and floats dF[d, col]
(D_B, D_CTX, D_IT, D_STALL, D_NK, D_VER, D_PRIV, D_JQH, D_JQT, D_RQH, D_RQT, D_WQH, D_WQT,
 D_USED, D_IDLE, D_LRUH, D_LRUT, D_LOAD, D_HSZ, D_LREP, D_LUSED) = range(21)
NDI = 21
DF_TSEG, DF_STALL_END, DF_NEXT_T, DF_BUSY, DF_MEM_T = range(5)
NDF = 5
# prefill instance ints pI[p, col]
P_LOAD, P_QH, P_QT, P_BH, P_USED, P_LRUH, P_LRUT = range(7)
NPI = 7
# run-wide scalars
G_NOW, G_LINK, G_REP_AREA, G_USED_AREA, G_BATCH_AREA = range(5)
GI_PEAK_REP, GI_PEAK_USED, GI_RR_P, GI_RR_D, GI_SEQ, GI_HSZ, GI_INSYS = range(7)
# replica store per block RS[d, field, block] (int32) and state bits RST[d, block]
RS_TOK, RS_REF, RS_PREV, RS_NEXT = range(4)
ST_IN, ST_READY, ST_INACT = 1, 2, 4
# prefill prefix cache per block PC[p, field, block] (int32) and presence PCIN[p, block]
PC_TOK, PC_PREV, PC_NEXT = range(3)

# parameters
IP_NP, IP_ND, IP_NC, IP_MAXB, IP_TOKB, IP_PCAP, IP_BUDGET, IP_WAIT, IP_POLICY, IP_PROUTE, IP_DROUTE = range(11)
FP_LINK_BPS, FP_LINK_LAT, FP_WAIT_TO, FP_TWARM = range(4)
C_FRP, C_FRD, C_BR, C_POV, C_DOV, C_LF, C_LMH, C_ATT, C_KV, C_W, C_EW, C_EF = range(12)
_COST_FIELDS = (
    "flops_rate_prefill", "flops_rate_decode", "byte_rate", "prefill_overhead", "decode_overhead",
    "linear_flops", "lm_head_flops", "attn_coef", "kv_bpt", "weights", "expert_weights", "expert_frac",
)
FP_PC = 4  # prefill cost fields start here
FP_DC = FP_PC + len(_COST_FIELDS)  # decode cost fields

INF = math.inf


# ---------------------------------------------------------------- cost model (costmodel.py)


@_jit
def _weights_read(fp, c0, batch):
    """InstanceCost.weights_read as a float (same operations)."""
    ew = fp[c0 + C_EW]
    if ew == 0.0:
        return fp[c0 + C_W]
    touched = 1.0 - (1.0 - fp[c0 + C_EF]) ** np.float64(batch)
    return fp[c0 + C_W] + ew * touched


@_jit
def _lin_sum(a, s, j0, j1):
    n = j1 - j0
    if n <= 0:
        return 0.0
    return n * a + s * (j0 + j1 - 1.0) * n / 2.0


@_jit
def _series_time(a1, s1, a2, s2, o, k):
    if k <= 0:
        return 0.0
    last = k - 1
    kf = np.float64(k)
    first = a1 >= a2
    if first == (a1 + s1 * last >= a2 + s2 * last):
        if first:
            return kf * o + _lin_sum(a1, s1, 0.0, kf)
        return kf * o + _lin_sum(a2, s2, 0.0, kf)
    x = (a2 - a1) / (s1 - s2)
    c = np.ceil(x)
    if 1.0 > c:  # Python max(c, 1.0)
        c = 1.0
    if last < c:  # Python min(c, last)
        c = np.float64(last)
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
        guess = (-b + np.sqrt(b * b + 2.0 * s * elapsed)) / s
    elif a > 0.0:
        guess = elapsed / a
    else:
        guess = 0.0
    v = guess
    if np.float64(k_max - 1) < v:
        v = np.float64(k_max - 1)
    lo = np.int64(v) if v > 0.0 else np.int64(0)
    for _ in range(3):
        if _series_time(a1, s1, a2, s2, o, lo) > elapsed:
            lo -= 1
        elif _series_time(a1, s1, a2, s2, o, lo + 1) <= elapsed:
            lo += 1
        else:
            return lo
    lo, hi = np.int64(0), np.int64(k_max)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if _series_time(a1, s1, a2, s2, o, mid) <= elapsed:
            lo = mid
        else:
            hi = mid
    return lo


@_jit
def _coeffs(fp, batch, ctx):
    """decode_series_coeffs(decode_cost, batch, ctx) → (a1, s1, a2, s2, overhead)."""
    c0 = FP_DC
    fr, br = fp[c0 + C_FRD], fp[c0 + C_BR]
    att, kv = fp[c0 + C_ATT], fp[c0 + C_KV]
    a1 = (batch * (fp[c0 + C_LF] + fp[c0 + C_LMH]) + att * ctx) / fr
    s1 = att * batch / fr
    a2 = (_weights_read(fp, c0, batch) + kv * ctx) / br
    s2 = kv * batch / br
    return a1, s1, a2, s2, fp[c0 + C_DOV]


# ---------------------------------------------------------------- event heap


@_jit
def _push(H, GI, t, kind, a, b):
    ht, hk, ha, hb = H
    GI[GI_SEQ] += 1
    key = (np.int64(kind) << KIND_SHIFT) | GI[GI_SEQ]
    i = GI[GI_HSZ]
    GI[GI_HSZ] = i + 1
    while i > 0:
        p = (i - 1) >> 1
        tp = ht[p]
        if t < tp or (t == tp and key < hk[p]):
            ht[i] = tp
            hk[i] = hk[p]
            ha[i] = ha[p]
            hb[i] = hb[p]
            i = p
        else:
            break
    ht[i] = t
    hk[i] = key
    ha[i] = a
    hb[i] = b


@_jit
def _pop(H, GI):
    ht, hk, ha, hb = H
    t0, k0, a0, b0 = ht[0], hk[0], ha[0], hb[0]
    size = GI[GI_HSZ] - 1
    GI[GI_HSZ] = size
    if size > 0:
        t, key, a, b = ht[size], hk[size], ha[size], hb[size]
        i = 0
        while True:
            c = 2 * i + 1
            if c >= size:
                break
            c2 = c + 1
            if c2 < size and (ht[c2] < ht[c] or (ht[c2] == ht[c] and hk[c2] < hk[c])):
                c = c2
            if ht[c] < t or (ht[c] == t and hk[c] < key):
                ht[i] = ht[c]
                hk[i] = hk[c]
                ha[i] = ha[c]
                hb[i] = hb[c]
                i = c
            else:
                break
        ht[i] = t
        hk[i] = key
        ha[i] = a
        hb[i] = b
    return t0, k0 >> KIND_SHIFT, a0, b0


# ---------------------------------------------------------------- decode batch heap (it, rid)


@_jit
def _dh_push(DH, dI, d, it, rid):
    dit, drid = DH
    i = dI[d, D_HSZ]
    dI[d, D_HSZ] = i + 1
    while i > 0:
        p = (i - 1) >> 1
        if it < dit[d, p] or (it == dit[d, p] and rid < drid[d, p]):
            dit[d, i] = dit[d, p]
            drid[d, i] = drid[d, p]
            i = p
        else:
            break
    dit[d, i] = it
    drid[d, i] = rid


@_jit
def _dh_pop(DH, dI, d):
    dit, drid = DH
    r0 = drid[d, 0]
    size = dI[d, D_HSZ] - 1
    dI[d, D_HSZ] = size
    if size > 0:
        it, rid = dit[d, size], drid[d, size]
        i = 0
        while True:
            c = 2 * i + 1
            if c >= size:
                break
            c2 = c + 1
            if c2 < size and (dit[d, c2] < dit[d, c] or (dit[d, c2] == dit[d, c] and drid[d, c2] < drid[d, c])):
                c = c2
            if dit[d, c] < it or (dit[d, c] == it and drid[d, c] < rid):
                dit[d, i] = dit[d, c]
                drid[d, i] = drid[d, c]
                i = c
            else:
                break
        dit[d, i] = it
        drid[d, i] = rid
    return r0


# ---------------------------------------------------------------- queues (intrusive lists)


@_jit
def _q_append(X, heads, row, col_h, col_t, link, rid):
    """Append ``rid`` to the queue whose head/tail are heads[row, col_h/col_t]."""
    X[link, rid] = -1
    tail = heads[row, col_t]
    if tail == -1:
        heads[row, col_h] = rid
    else:
        X[link, tail] = rid
    heads[row, col_t] = rid


@_jit
def _q_popleft(X, heads, row, col_h, col_t, link):
    rid = heads[row, col_h]
    nxt = X[link, rid]
    heads[row, col_h] = nxt
    if nxt == -1:
        heads[row, col_t] = -1
    return rid


@_jit
def _wq_append(X, dI, d, rid):
    tail = dI[d, D_WQT]
    X[X_WQN, rid] = -1
    X[X_WQP, rid] = tail
    if tail == -1:
        dI[d, D_WQH] = rid
    else:
        X[X_WQN, tail] = rid
    dI[d, D_WQT] = rid


@_jit
def _wq_remove(X, dI, d, rid):
    p, nx = X[X_WQP, rid], X[X_WQN, rid]
    if p == -1:
        dI[d, D_WQH] = nx
    else:
        X[X_WQN, p] = nx
    if nx == -1:
        dI[d, D_WQT] = p
    else:
        X[X_WQP, nx] = p


# ---------------------------------------------------------------- prefill prefix cache (BlockLRU)


@_jit
def _pc_unlink(PC, pI, p, h):
    pv, nx = PC[p, PC_PREV, h], PC[p, PC_NEXT, h]
    if pv == -1:
        pI[p, P_LRUH] = nx
    else:
        PC[p, PC_NEXT, pv] = nx
    if nx == -1:
        pI[p, P_LRUT] = pv
    else:
        PC[p, PC_PREV, nx] = pv


@_jit
def _pc_append(PC, pI, p, h):
    tail = pI[p, P_LRUT]
    PC[p, PC_PREV, h] = tail
    PC[p, PC_NEXT, h] = -1
    if tail == -1:
        pI[p, P_LRUH] = h
    else:
        PC[p, PC_NEXT, tail] = h
    pI[p, P_LRUT] = h


@_jit
def _pc_match(PCIN, p, bid, bt, i0, i1):
    hit = 0
    for j in range(i0, i1):
        if PCIN[p, bid[j]] == 0:
            break
        hit += bt[j]
    return hit


@_jit
def _pc_insert(PC, PCIN, pI, p, bid, bt, i0, i1, cap):
    for j in range(i1 - 1, i0 - 1, -1):
        h = bid[j]
        if PCIN[p, h]:
            _pc_unlink(PC, pI, p, h)
            _pc_append(PC, pI, p, h)
        elif bt[j] <= cap:
            PCIN[p, h] = 1
            PC[p, PC_TOK, h] = bt[j]
            _pc_append(PC, pI, p, h)
            pI[p, P_USED] += bt[j]
    while pI[p, P_USED] > cap:
        h = pI[p, P_LRUH]
        _pc_unlink(PC, pI, p, h)
        PCIN[p, h] = 0
        pI[p, P_USED] -= PC[p, PC_TOK, h]


# ---------------------------------------------------------------- decode replicas (ReplicaStore)


@_jit
def _rs_unlink(RS, dI, d, h):
    pv, nx = RS[d, RS_PREV, h], RS[d, RS_NEXT, h]
    if pv == -1:
        dI[d, D_LRUH] = nx
    else:
        RS[d, RS_NEXT, pv] = nx
    if nx == -1:
        dI[d, D_LRUT] = pv
    else:
        RS[d, RS_PREV, nx] = pv


@_jit
def _rs_append(RS, dI, d, h):
    tail = dI[d, D_LRUT]
    RS[d, RS_PREV, h] = tail
    RS[d, RS_NEXT, h] = -1
    if tail == -1:
        dI[d, D_LRUH] = h
    else:
        RS[d, RS_NEXT, tail] = h
    dI[d, D_LRUT] = h


@_jit
def _rs_match(RST, d, bid, i0, i1):
    """Number of leading blocks that are resident and ready."""
    k = 0
    for j in range(i0, i1):
        if RST[d, bid[j]] & ST_READY == 0:
            break
        k += 1
    return k


@_jit
def _rs_drop(RS, RST, dI, d, h):
    dI[d, D_USED] -= RS[d, RS_TOK, h]
    RS[d, RS_TOK, h] = 0
    RS[d, RS_REF, h] = 0
    RST[d, h] = 0


@_jit
def _rs_release_one(RS, RST, dI, d, h):
    r = RS[d, RS_REF, h] - 1
    assert r >= 0, "replica refcount went negative"
    RS[d, RS_REF, h] = r
    if r == 0:
        if RST[d, h] & ST_READY:
            _rs_append(RS, dI, d, h)
            RST[d, h] |= ST_INACT
            dI[d, D_IDLE] += RS[d, RS_TOK, h]
        else:
            _rs_drop(RS, RST, dI, d, h)


@_jit
def _rs_trim(RS, RST, dI, d, need):
    freed = 0
    while freed < need and dI[d, D_LRUH] != -1:
        h = dI[d, D_LRUH]
        _rs_unlink(RS, dI, d, h)
        t = RS[d, RS_TOK, h]
        freed += t
        dI[d, D_IDLE] -= t
        _rs_drop(RS, RST, dI, d, h)
    return freed


# ---------------------------------------------------------------- the simulator


@_jit
def _mem_changed(S, d, t):
    T, O, X, dI, dF, pI, pF, G, GI, H, DH, RS, RST, PC, PCIN, CH, JN, PFLAG = S[:18]
    ip, fp = S[18], S[19]
    lo = dF[d, DF_MEM_T]
    tw = fp[FP_TWARM]
    if tw > lo:
        lo = tw
    if t > lo:
        G[G_REP_AREA] += dI[d, D_LREP] * (t - lo)
        G[G_USED_AREA] += dI[d, D_LUSED] * (t - lo)
    dF[d, DF_MEM_T] = t
    rep = dI[d, D_USED]
    used = rep + dI[d, D_PRIV]
    dI[d, D_LREP] = rep
    dI[d, D_LUSED] = used
    if rep > GI[GI_PEAK_REP]:
        GI[GI_PEAK_REP] = rep
    if used > GI[GI_PEAK_USED]:
        GI[GI_PEAK_USED] = used
    assert used <= ip[IP_BUDGET], "decode KV over budget"


@_jit
def _start_prefill(S, R, p, t):
    T, O, X, dI, dF, pI, pF, G, GI, H, DH, RS, RST, PC, PCIN, CH, JN, PFLAG = S[:18]
    ip, fp = S[18], S[19]
    arrival, prompt, output, ptr, bid, bt, is_hot = R
    budget = ip[IP_TOKB]
    c0 = FP_PC
    lf, lmh, att, kv = fp[c0 + C_LF], fp[c0 + C_LMH], fp[c0 + C_ATT], fp[c0 + C_KV]
    new_sum = 0
    flops = 0.0
    kv_io = 0.0
    first = -1
    last = -1
    while pI[p, P_QH] != -1:
        rid = pI[p, P_QH]
        i0, i1 = ptr[rid], ptr[rid + 1]
        pr = prompt[rid]
        hit = 0
        if i1 > i0:
            hit = _pc_match(PCIN, p, bid, bt, i0, i1)
            if pr - 1 < hit:
                hit = pr - 1
        n_new = pr - hit
        if first != -1 and new_sum + n_new > budget:
            break
        _q_popleft(X, pI, p, P_QH, P_QT, X_PQN)
        if first == -1:
            first = rid
        else:
            X[X_PBN, last] = rid
        X[X_PBN, rid] = -1
        last = rid
        new_sum += n_new
        O[O_PH, rid] = hit
        T[T_PS, rid] = t
        flops += n_new * lf + lmh + att * (n_new * hit + n_new * (n_new + 1) / 2.0)
        kv_io += kv * pr
    bytes_ = _weights_read(fp, c0, new_sum) + kv_io
    dur = flops / fp[c0 + C_FRP]
    mem = bytes_ / fp[c0 + C_BR]
    if mem > dur:
        dur = mem
    dur = dur + fp[c0 + C_POV]
    if t >= fp[FP_TWARM]:
        pF[p] += dur
    pI[p, P_BH] = first
    _push(H, GI, t + dur, EV_PREFILL, p, 0)


@_jit
def _decode_route(S, R, rid):
    dI, RST = S[3], S[12]
    ip = S[18]
    ptr, bid = R[3], R[4]
    nd = ip[IP_ND]
    code = ip[IP_DROUTE]
    if code == 2:  # round_robin
        GI = S[8]
        i = GI[GI_RR_D] % nd
        GI[GI_RR_D] += 1
        return i
    if code == 1:  # prefix_affinity
        i0, i1 = ptr[rid], ptr[rid + 1]
        if i1 != i0 and nd != 1:
            best, best_i = -1, 0
            for i in range(nd):
                k = _rs_match(RST, i, bid, i0, i1)
                if k > best or (k == best and dI[i, D_LOAD] < dI[best_i, D_LOAD]):
                    best, best_i = k, i
            return best_i
    best_i = 0
    for i in range(1, nd):
        if dI[i, D_LOAD] < dI[best_i, D_LOAD]:
            best_i = i
    return best_i


@_jit
def _reject(S, rid, d, t, reason):
    T, O, dI, GI = S[0], S[1], S[3], S[8]
    O[O_OUT, rid] = OUT_REJECTED
    O[O_REA, rid] = reason
    T[T_DN, rid] = t
    dI[d, D_LOAD] -= 1
    GI[GI_INSYS] -= 1


@_jit
def _wait(S, rid, d, t):
    X, dI, GI, H = S[2], S[3], S[8], S[9]
    fp = S[19]
    _wq_append(X, dI, d, rid)
    _push(H, GI, t + fp[FP_WAIT_TO], EV_TIMEOUT, rid, 0)


@_jit
def _interrupt(S, d, t):
    dI, dF, GI, H, DH = S[3], S[4], S[8], S[9], S[10]
    fp = S[19]
    if dI[d, D_STALL]:
        return
    if dI[d, D_B] == 0:
        if dF[d, DF_NEXT_T] > t:
            dI[d, D_VER] += 1
            dF[d, DF_NEXT_T] = t
            dI[d, D_NK] = 0
            dF[d, DF_TSEG] = t
            _push(H, GI, t, EV_DECODE, d, dI[d, D_VER])
        return
    a1, s1, a2, s2, o = _coeffs(fp, dI[d, D_B], dI[d, D_CTX])
    k_max = DH[0][d, 0] - dI[d, D_IT]
    tseg = dF[d, DF_TSEG]
    k = _iterations_within(a1, s1, a2, s2, o, t - tseg, k_max) + 1
    if k_max < k:
        k = k_max
    while k < k_max and tseg + _series_time(a1, s1, a2, s2, o, k) <= t:
        k += 1
    while k > 1 and tseg + _series_time(a1, s1, a2, s2, o, k - 1) > t:
        k -= 1
    tb = tseg + _series_time(a1, s1, a2, s2, o, k)
    if tb < dF[d, DF_NEXT_T]:
        dI[d, D_VER] += 1
        dF[d, DF_NEXT_T] = tb
        dI[d, D_NK] = k
        _push(H, GI, tb, EV_DECODE, d, dI[d, D_VER])


@_jit
def _admit(S, R, rid, d, t):
    """Reserve KV on decode instance ``d`` and start the hand-off; False if no room."""
    T, O, X, dI, dF, pI, pF, G, GI, H, DH, RS, RST, PC, PCIN, CH, JN, PFLAG = S[:18]
    ip, fp = S[18], S[19]
    arrival, prompt, output, ptr, bid, bt, is_hot = R
    policy = ip[IP_POLICY]
    uses_replicas = policy >= POL_HOTSET
    budget = ip[IP_BUDGET]
    i0, i1 = ptr[rid], ptr[rid + 1]
    nhit = 0
    if uses_replicas and i1 > i0:
        nhit = _rs_match(RST, d, bid, i0, i1)
    hit_tok = 0
    for j in range(i0, i0 + nhit):
        hit_tok += bt[j]
    need = prompt[rid] + output[rid] - hit_tok
    if need > budget:
        _reject(S, rid, d, t, R_TOO_LARGE)
        return True
    free = budget - dI[d, D_PRIV] - dI[d, D_USED]
    if free < need:
        idle_hit = 0
        for j in range(i0, i0 + nhit):
            h = bid[j]
            if RS[d, RS_REF, h] == 0:
                idle_hit += RS[d, RS_TOK, h]
        if free + dI[d, D_IDLE] - idle_hit < need:
            return False
    for j in range(i0, i0 + nhit):  # store.acquire(hit_blocks)
        h = bid[j]
        if RS[d, RS_REF, h] == 0:
            _rs_unlink(RS, dI, d, h)
            RST[d, h] &= ~ST_INACT
            dI[d, D_IDLE] -= RS[d, RS_TOK, h]
        RS[d, RS_REF, h] += 1
    if free < need:
        _rs_trim(RS, RST, dI, d, need - free)
    ptoks = 0
    if uses_replicas:
        persisted = False
        for j in range(i0 + nhit, i1):
            h = bid[j]
            if RST[d, h] & ST_IN == 0 and (policy == POL_ALL_LRU or is_hot[h] != 0):
                RS[d, RS_TOK, h] = bt[j]  # add_pending
                RS[d, RS_REF, h] = 1
                RST[d, h] = ST_IN
                dI[d, D_USED] += bt[j]
                PFLAG[j] = 1
                ptoks += bt[j]
                persisted = True
        if persisted:
            X[X_FLAGS, rid] |= F_PERS
    private = need - ptoks
    dI[d, D_PRIV] += private
    X[X_PRIV, rid] = private
    X[X_NHIT, rid] = nhit
    O[O_PT, rid] = ptoks
    O[O_RH, rid] = hit_tok
    T[T_AD, rid] = t
    _mem_changed(S, d, t)

    pr = prompt[rid]
    if policy == POL_TRANSFER:
        xfer, rc = pr, 0
    elif policy == POL_RECOMPUTE:
        ph = O[O_PH, rid]
        xfer, rc = pr - ph, ph
    else:
        xfer, rc = pr - hit_tok, 0
    O[O_XT, rid] = xfer
    O[O_RC, rid] = rc
    land = t
    nbytes = xfer * fp[FP_DC + C_KV]
    if nbytes > 0:
        p = O[O_PI, rid]
        nc = ip[IP_NC]
        c = 0
        for i in range(1, nc):
            if CH[p, d, i] < CH[p, d, c]:
                c = i
        start = t
        if CH[p, d, c] > start:
            start = CH[p, d, c]
        occupy = nbytes / fp[FP_LINK_BPS]
        CH[p, d, c] = start + occupy
        if start >= fp[FP_TWARM]:
            G[G_LINK] += occupy
        land = start + occupy + fp[FP_LINK_LAT]
        T[T_XS, rid] = start
    else:
        T[T_XS, rid] = t
    _push(H, GI, land, EV_TRANSFER, rid, 0)
    if rc > 0:
        X[X_FLAGS, rid] |= F_RC
        _q_append(X, dI, d, D_RQH, D_RQT, X_RQN, rid)
        _interrupt(S, d, t)
    return True


@_jit
def _drain_waiting(S, R, d, t):
    O, X, dI = S[1], S[2], S[3]
    while dI[d, D_WQH] != -1:
        rid = dI[d, D_WQH]
        if O[O_OUT, rid] == OUT_REJECTED:
            _wq_remove(X, dI, d, rid)
        elif _admit(S, R, rid, d, t):
            _wq_remove(X, dI, d, rid)
        else:
            break


@_jit
def _finish(S, R, rid, d, t):
    T, O, X, dI, GI, RS, RST = S[0], S[1], S[2], S[3], S[8], S[11], S[12]
    PFLAG = S[17]
    prompt, output, ptr, bid = R[1], R[2], R[3], R[4]
    T[T_DN, rid] = t
    O[O_OUT, rid] = OUT_COMPLETED
    dI[d, D_B] -= 1
    dI[d, D_CTX] -= prompt[rid] + output[rid]
    dI[d, D_PRIV] -= X[X_PRIV, rid]
    # release(held + persisted), tail first: persisted blocks come after the held prefix
    i0, i1 = ptr[rid], ptr[rid + 1]
    held_end = i0 + X[X_NHIT, rid]
    pers = X[X_FLAGS, rid] & F_PERS
    for j in range(i1 - 1, i0 - 1, -1):
        if j < held_end or (pers and PFLAG[j]):
            _rs_release_one(RS, RST, dI, d, bid[j])
    dI[d, D_LOAD] -= 1
    GI[GI_INSYS] -= 1


@_jit
def _run_recompute(S, d, t):
    T, O, X, dI, dF, GI, H = S[0], S[1], S[2], S[3], S[4], S[8], S[9]
    fp = S[19]
    c0 = FP_DC
    lf, att, kv = fp[c0 + C_LF], fp[c0 + C_ATT], fp[c0 + C_KV]
    end = t
    while dI[d, D_RQH] != -1:
        rid = _q_popleft(X, dI, d, D_RQH, D_RQT, X_RQN)
        n = O[O_RC, rid]
        flops = n * lf + att * n * (n + 1) / 2.0
        bytes_ = _weights_read(fp, c0, n) + kv * n
        T[T_RS, rid] = end
        step = flops / fp[c0 + C_FRP]
        mem = bytes_ / fp[c0 + C_BR]
        if mem > step:
            step = mem
        end += step + fp[c0 + C_POV]
        T[T_RE, rid] = end
        X[X_FLAGS, rid] &= ~F_RC
        if X[X_FLAGS, rid] & F_XD:
            _q_append(X, dI, d, D_JQH, D_JQT, X_JQN, rid)
    dI[d, D_STALL] = 1
    dF[d, DF_STALL_END] = end
    dI[d, D_VER] += 1
    dF[d, DF_NEXT_T] = end
    dI[d, D_NK] = 0
    _push(H, GI, end, EV_DECODE, d, dI[d, D_VER])


@_jit
def _decode_boundary(S, R, d, version, t):
    T, O, X, dI, dF, pI, pF, G, GI, H, DH, RS, RST, PC, PCIN, CH, JN, PFLAG = S[:18]
    ip, fp = S[18], S[19]
    prompt, output = R[1], R[2]
    if version != dI[d, D_VER]:
        return
    k = dI[d, D_NK]
    b = dI[d, D_B]
    if (b > 0 or dI[d, D_STALL]) and dF[d, DF_TSEG] >= fp[FP_TWARM]:
        dF[d, DF_BUSY] += t - dF[d, DF_TSEG]
        G[G_BATCH_AREA] += b * (t - dF[d, DF_TSEG])
    it = dI[d, D_IT] + k
    dI[d, D_IT] = it
    dI[d, D_CTX] += b * k
    dF[d, DF_TSEG] = t
    dI[d, D_STALL] = 0
    dF[d, DF_NEXT_T] = INF
    freed = False
    dit = DH[0]
    while dI[d, D_HSZ] > 0 and dit[d, 0] == it:
        rid = _dh_pop(DH, dI, d)
        _finish(S, R, rid, d, t)
        freed = True
    if freed:
        _mem_changed(S, d, t)
        _drain_waiting(S, R, d, t)
    if dI[d, D_RQH] != -1:
        _run_recompute(S, d, t)
        return
    nj = 0
    maxb = ip[IP_MAXB]
    while dI[d, D_JQH] != -1 and dI[d, D_B] < maxb:
        rid = _q_popleft(X, dI, d, D_JQH, D_JQT, X_JQN)
        dI[d, D_B] += 1
        dI[d, D_CTX] += prompt[rid]
        _dh_push(DH, dI, d, it + output[rid], rid)
        T[T_DS, rid] = t
        JN[nj] = rid
        nj += 1
    if dI[d, D_B] == 0:
        return
    a1, s1, a2, s2, o = _coeffs(fp, dI[d, D_B], dI[d, D_CTX])
    if nj:
        first = t + _series_time(a1, s1, a2, s2, o, 1)
        for i in range(nj):
            T[T_FT, JN[i]] = first
    k_next = dit[d, 0] - it
    dI[d, D_VER] += 1
    nt = t + _series_time(a1, s1, a2, s2, o, k_next)
    dF[d, DF_NEXT_T] = nt
    dI[d, D_NK] = k_next
    _push(H, GI, nt, EV_DECODE, d, dI[d, D_VER])


@_jit
def _prefill_done(S, R, p, t):
    T, O, X, dI, dF, pI, pF, G, GI, H, DH, RS, RST, PC, PCIN, CH, JN, PFLAG = S[:18]
    ip = S[18]
    prompt, ptr, bid, bt = R[1], R[3], R[4], R[5]
    first = pI[p, P_BH]
    pI[p, P_BH] = -1
    cap = ip[IP_PCAP]
    rid = first
    while rid != -1:
        T[T_PE, rid] = t
        pI[p, P_LOAD] -= prompt[rid]
        i0, i1 = ptr[rid], ptr[rid + 1]
        if i1 > i0:
            _pc_insert(PC, PCIN, pI, p, bid, bt, i0, i1, cap)
        rid = X[X_PBN, rid]
    wait = ip[IP_WAIT] != 0
    rid = first
    while rid != -1:
        nxt = X[X_PBN, rid]
        d = _decode_route(S, R, rid)
        O[O_DI, rid] = d
        dI[d, D_LOAD] += 1
        if dI[d, D_WQH] != -1 and wait:
            _wait(S, rid, d, t)
        elif not _admit(S, R, rid, d, t):
            if wait:
                _wait(S, rid, d, t)
            else:
                _reject(S, rid, d, t, R_NO_MEMORY)
        rid = nxt
    if pI[p, P_QH] != -1:
        _start_prefill(S, R, p, t)


@_jit
def _arrive(S, R, rid, t):
    O, X, pI, GI, H = S[1], S[2], S[5], S[8], S[9]
    ip = S[18]
    arrival, prompt = R[0], R[1]
    n = arrival.shape[0]
    if rid + 1 < n:
        _push(H, GI, arrival[rid + 1], EV_ARRIVAL, rid + 1, 0)
    GI[GI_INSYS] += 1
    np_ = ip[IP_NP]
    if ip[IP_PROUTE] == 1:  # round_robin
        p = GI[GI_RR_P] % np_
        GI[GI_RR_P] += 1
    else:  # least_tokens
        p = 0
        for i in range(1, np_):
            if pI[i, P_LOAD] < pI[p, P_LOAD]:
                p = i
    O[O_PI, rid] = p
    _q_append(X, pI, p, P_QH, P_QT, X_PQN, rid)
    pI[p, P_LOAD] += prompt[rid]
    if pI[p, P_BH] == -1:
        _start_prefill(S, R, p, t)


@_jit
def _landed(S, rid, t):
    T, O, X, dI, RST = S[0], S[1], S[2], S[3], S[12]
    PFLAG = S[17]
    R = S[20]
    ptr, bid = R[3], R[4]
    T[T_XE, rid] = t
    d = O[O_DI, rid]
    if X[X_FLAGS, rid] & F_PERS:
        for j in range(ptr[rid] + X[X_NHIT, rid], ptr[rid + 1]):
            if PFLAG[j]:
                RST[d, bid[j]] |= ST_READY
    X[X_FLAGS, rid] |= F_XD
    if not X[X_FLAGS, rid] & F_RC:
        _q_append(X, dI, d, D_JQH, D_JQT, X_JQN, rid)
        _interrupt(S, d, t)


@_jit
def _timeout(S, rid, t):
    T, O, X, dI = S[0], S[1], S[2], S[3]
    if O[O_OUT, rid] == OUT_PENDING and np.isnan(T[T_AD, rid]):
        d = O[O_DI, rid]
        _wq_remove(X, dI, d, rid)
        _reject(S, rid, d, t, R_TIMEOUT)


@_jit
def _run(S, R):
    """Run events until the queue is empty (returns 0) or the heap may overflow (returns the
    capacity it needs; the kernel grows it and calls again)."""
    G, GI, H = S[7], S[8], S[9]
    cap = H[0].shape[0]
    while GI[GI_HSZ] > 0:
        # one handler pushes at most 2 events per request in the system, plus 2
        need = GI[GI_HSZ] + 2 * GI[GI_INSYS] + 4
        if need > cap:
            return need
        t, kind, a, b = _pop(H, GI)
        G[G_NOW] = t
        if kind == EV_DECODE:
            _decode_boundary(S, R, a, b, t)
        elif kind == EV_TRANSFER:
            _landed(S, a, t)
        elif kind == EV_PREFILL:
            _prefill_done(S, R, a, t)
        elif kind == EV_TIMEOUT:
            _timeout(S, a, t)
        else:
            _arrive(S, R, a, t)
    return 0


@_jit_alloc
def _kernel(arrival, prompt, output, ptr, bid, bt, is_hot, hot_ids, hot_tok, n_ids, ip, fp):
    n = arrival.shape[0]
    nb = bid.shape[0]
    P, D, NC = ip[IP_NP], ip[IP_ND], ip[IP_NC]
    cap_b = min(ip[IP_MAXB], n) + 1
    T = np.full((10, n), np.nan)
    O = np.zeros((9, n), dtype=np.int64)
    X = np.zeros((NX, n), dtype=np.int64)
    dI = np.zeros((D, NDI), dtype=np.int64)
    for d in range(D):
        for c in (D_JQH, D_JQT, D_RQH, D_RQT, D_WQH, D_WQT, D_LRUH, D_LRUT):
            dI[d, c] = -1
    dF = np.zeros((D, NDF))
    for d in range(D):
        dF[d, DF_STALL_END] = -INF
        dF[d, DF_NEXT_T] = INF
    pI = np.zeros((P, NPI), dtype=np.int64)
    for p in range(P):
        for c in (P_QH, P_QT, P_BH, P_LRUH, P_LRUT):
            pI[p, c] = -1
    pF = np.zeros(P)
    G = np.zeros(5)
    GI = np.zeros(7, dtype=np.int64)
    cap_h = 64 + 2 * D + P
    H = (np.empty(cap_h), np.empty(cap_h, dtype=np.int64), np.empty(cap_h, dtype=np.int64),
         np.empty(cap_h, dtype=np.int64))
    DH = (np.empty((D, cap_b), dtype=np.int64), np.empty((D, cap_b), dtype=np.int64))
    RS = np.zeros((D, 4, n_ids), dtype=np.int32)
    RST = np.zeros((D, n_ids), dtype=np.uint8)
    PC = np.zeros((P, 3, n_ids), dtype=np.int32)
    PCIN = np.zeros((P, n_ids), dtype=np.uint8)
    CH = np.zeros((P, D, NC))
    JN = np.empty(cap_b, dtype=np.int64)
    PFLAG = np.zeros(nb, dtype=np.uint8)
    R = (arrival, prompt, output, ptr, bid, bt, is_hot)

    if ip[IP_POLICY] == POL_HOTSET and hot_ids.shape[0] > 0:
        for d in range(D):
            for k in range(hot_ids.shape[0] - 1, -1, -1):
                h = hot_ids[k]
                if RST[d, h] & ST_IN == 0:
                    RS[d, RS_TOK, h] = hot_tok[k]
                    RS[d, RS_REF, h] = 0
                    RST[d, h] = ST_IN | ST_READY | ST_INACT
                    _rs_append(RS, dI, d, h)
                    dI[d, D_USED] += hot_tok[k]
                    dI[d, D_IDLE] += hot_tok[k]
        GI[GI_PEAK_REP] = dI[0, D_USED]
        GI[GI_PEAK_USED] = dI[0, D_USED]
    for d in range(D):
        dI[d, D_LREP] = dI[d, D_USED]
        dI[d, D_LUSED] = dI[d, D_USED]

    if n:
        _push(H, GI, arrival[0], EV_ARRIVAL, 0, 0)
    while True:
        S = (T, O, X, dI, dF, pI, pF, G, GI, H, DH, RS, RST, PC, PCIN, CH, JN, PFLAG, ip, fp, R)
        need = _run(S, R)
        if need == 0:
            break
        cap = H[0].shape[0]
        while cap < need:
            cap *= 2
        size = GI[GI_HSZ]
        nt, nk = np.empty(cap), np.empty(cap, dtype=np.int64)
        na, nbb = np.empty(cap, dtype=np.int64), np.empty(cap, dtype=np.int64)
        nt[:size] = H[0][:size]
        nk[:size] = H[1][:size]
        na[:size] = H[2][:size]
        nbb[:size] = H[3][:size]
        H = (nt, nk, na, nbb)
    t_end = G[G_NOW]
    if fp[FP_TWARM] > t_end:
        t_end = fp[FP_TWARM]
    for d in range(D):
        _mem_changed(S, d, t_end)
    d_busy = dF[:, DF_BUSY].copy()
    return T, O, G, GI, pF, d_busy, t_end


# ---------------------------------------------------------------- Python entry point


def _codes(cfg: EngineConfig) -> tuple[int, int, int] | None:
    """Integer codes of the run's policy and routers, or None if the fast core lacks one
    (a policy or router registered after this module was written)."""
    from .policies import POLICIES
    from .routing import DECODE_ROUTERS, PREFILL_ROUTERS

    pol = POLICY_CODES.get(cfg.policy)
    if pol is None or POLICIES.get(cfg.policy) is not _POLICY_CLASSES[cfg.policy]:
        return None
    pr = PREFILL_ROUTER_CODES.get(cfg.prefill_router)
    dr = DECODE_ROUTER_CODES.get(cfg.decode_router)
    if pr is None or dr is None:
        return None
    # round_robin routers are closures, the others plain functions: check the registry still
    # holds what the codes mean
    fn = PREFILL_ROUTERS.get(cfg.prefill_router)
    if cfg.prefill_router in _PREFILL_FUNCS and fn is not _PREFILL_FUNCS[cfg.prefill_router]:
        return None
    fn = DECODE_ROUTERS.get(cfg.decode_router)
    if cfg.decode_router in _DECODE_FUNCS and fn is not _DECODE_FUNCS[cfg.decode_router]:
        return None
    if fn is None or PREFILL_ROUTERS.get(cfg.prefill_router) is None:
        return None
    return pol, pr, dr


_DIRECT_ID_LIMIT = 2**31 - 2


def dense_block_ids(blk_hash: np.ndarray, hot: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """Block hashes as dense ids 0..U-1 (request blocks, hot blocks, U).

    Hashes that are already small non-negative integers (synthetic prefix ids, Mooncake
    hash ids, tiled copies of them) are used as they are; anything else is ranked with
    ``np.unique``. Equal hash <=> equal id either way, which is all the caches need.
    """
    total = blk_hash.shape[0] + hot.shape[0]
    if total == 0:
        return blk_hash, hot, 0
    lo = min(int(blk_hash.min()) if blk_hash.size else 0, int(hot.min()) if hot.size else 0)
    hi = max(int(blk_hash.max()) if blk_hash.size else 0, int(hot.max()) if hot.size else 0)
    if lo >= 0 and hi < _DIRECT_ID_LIMIT and hi < 4 * total + 65536:
        return blk_hash, hot, hi + 1
    _, inv = np.unique(np.concatenate((blk_hash, hot)), return_inverse=True)
    inv = inv.astype(np.int64).reshape(-1)
    return inv[: blk_hash.shape[0]], inv[blk_hash.shape[0] :], int(inv.max()) + 1


def _as_int(v) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, bool)


def simulate_fast(req: Requests, cfg: EngineConfig) -> SimResult:
    """``core.simulate`` compiled: same columns and stats, bit for bit."""
    codes = _codes(cfg)
    int_fields = (cfg.n_prefill, cfg.n_decode, cfg.link_channels, cfg.max_batch,
                  cfg.prefill_token_budget, cfg.prefill_cache_tokens, cfg.budget_tokens)
    if codes is None or not all(_as_int(v) for v in int_fields) or abs(cfg.budget_tokens) >= 2**62:
        return Simulator(req, cfg).run()
    pol, pr, dr = codes
    n = len(req)
    ip = np.array(
        [cfg.n_prefill, cfg.n_decode, cfg.link_channels, cfg.max_batch, cfg.prefill_token_budget,
         min(cfg.prefill_cache_tokens, 2**62), cfg.budget_tokens, 1 if cfg.on_full == "wait" else 0,
         pol, pr, dr],
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
    bid, hot_ids, n_ids = dense_block_ids(np.ascontiguousarray(req.blk_hash, dtype=np.int64), hot_h)
    is_hot = np.zeros(n_ids, dtype=np.uint8)
    is_hot[hot_ids] = 1
    T, O, G, GI, p_busy, d_busy, t_end = _kernel(
        np.ascontiguousarray(req.arrival, dtype=np.float64),
        np.ascontiguousarray(req.prompt_len, dtype=np.int64),
        np.ascontiguousarray(req.output_len, dtype=np.int64),
        np.ascontiguousarray(req.blk_ptr, dtype=np.int64),
        np.ascontiguousarray(bid, dtype=np.int64),
        np.ascontiguousarray(req.blk_tokens, dtype=np.int64),
        is_hot, hot_ids, hot_t, n_ids, ip, fp,
    )
    cols = {name: T[i] for i, name in enumerate(TIME_COLUMNS)}
    cols.update({name: O[i] for i, name in enumerate(INT_COLUMNS)})
    t_end = float(t_end)
    window = max(t_end - t_warm, 1e-12)
    stats = {
        "t_warm": t_warm,
        "t_end": t_end,
        "budget_tokens": float(cfg.budget_tokens),
        "mean_replica_tokens": float(G[G_REP_AREA]) / window / cfg.n_decode,
        "peak_replica_tokens": float(GI[GI_PEAK_REP]),
        "mean_used_tokens": float(G[G_USED_AREA]) / window / cfg.n_decode,
        "peak_used_tokens": float(GI[GI_PEAK_USED]),
        "prefill_util": sum(p_busy.tolist()) / window / cfg.n_prefill,
        "decode_util": sum(d_busy.tolist()) / window / cfg.n_decode,
        "mean_decode_batch": float(G[G_BATCH_AREA]) / window / cfg.n_decode,
        "link_util": float(G[G_LINK]) / window / (cfg.n_prefill * cfg.n_decode * cfg.link_channels),
    }
    return SimResult(cols, stats)
