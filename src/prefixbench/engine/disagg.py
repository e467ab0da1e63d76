"""The disaggregated mode's event handlers: prefill → admission → KV link → decode.

* Arrival: the prefill router picks an instance; the request queues FIFO.
* Prefill step: whole prompts up to the token budget; each looks its blocks up in the
  instance's prefix cache, so a hit computes only the suffix (attending to the cached part).
* Hand-off: the decode router picks an instance, which must admit the request (reserve its
  prompt and output KV, less the resident replica blocks it uses; idle replicas are trimmed
  LRU for room) before any KV moves. With no room, on_full=reject rejects and on_full=wait
  queues FCFS until memory frees or the timeout passes. The policy decides which blocks
  cross the link (queued on the least busy channel between the two instances) and which
  the decode instance recomputes itself.
* Decode: continuous batching in closed form (batch.py); queued prefix recomputes run back
  to back at the next boundary while the batch stalls.

Every request ends exactly once: completed or rejected with a reason.
"""

from __future__ import annotations

import math

import numpy as np

from .batch import interrupt, record_gaps, run_to_next_finish, schedule
from .blocks import (
    pc_insert,
    pc_match,
    rs_acquire,
    rs_add_pending,
    rs_idle_tokens,
    rs_match,
    rs_release_one,
    rs_trim,
)
from .jit import jit, sig
from .layout import (
    C_ATT,
    C_BR,
    C_FRP,
    C_KV,
    C_LF,
    C_LMH,
    C_POV,
    D_B,
    D_CTX,
    D_HSZ,
    D_IDLE,
    D_IT,
    D_JQH,
    D_LOAD,
    D_LREP,
    D_LUSED,
    D_NK,
    D_PRIV,
    D_RQH,
    D_STALL,
    D_USED,
    D_VER,
    D_WQH,
    DF0,
    DF_BUSY,
    DF_MEM_T,
    DF_NEXT_T,
    DF_STALL_END,
    DF_TSEG,
    DI0,
    EV_ARRIVAL,
    EV_PREFILL,
    EV_TIMEOUT,
    EV_TRANSFER,
    F_PERS,
    F_RC,
    F_XD,
    FP_DC,
    FP_LINK_BPS,
    FP_LINK_LAT,
    FP_PC,
    FP_TWARM,
    FP_WAIT_TO,
    G_BATCH_AREA,
    G_LINK,
    G_REP_AREA,
    G_USED_AREA,
    GI_INSYS,
    GI_PEAK_REP,
    GI_PEAK_USED,
    GI_RR_D,
    GI_RR_P,
    H_CAPB,
    H_DH,
    H_FCH,
    H_FPB,
    H_FT,
    H_HOT,
    H_JN,
    H_O,
    H_PFLAG,
    H_PI,
    H_PTR,
    INF,
    IP_BUDGET,
    IP_DROUTE,
    IP_GAPS,
    IP_MAXB,
    IP_N,
    IP_NC,
    IP_ND,
    IP_NP,
    IP_POLICY,
    IP_PROUTE,
    IP_REC,
    IP_TOKB,
    IP_U,
    IP_WAIT,
    NDF,
    NDI,
    NPI,
    NR,
    O_DI,
    O_OUT,
    O_PH,
    O_PI,
    O_PT,
    O_RC,
    O_REA,
    O_RH,
    O_XT,
    OUT_COMPLETED,
    OUT_PENDING,
    OUT_REJECTED,
    P_BH,
    P_LOAD,
    P_QH,
    P_QN,
    POL_ALL_LRU,
    POL_HOTSET,
    POL_RECOMPUTE,
    POL_TRANSFER,
    R_FLAGS,
    R_JQN,
    R_NHIT,
    R_NO_MEMORY,
    R_OUTPUT,
    R_PBN,
    R_PQN,
    R_PRIV,
    R_PROMPT,
    R_RQN,
    R_TIMEOUT,
    R_TOO_LARGE,
    REC_DECODE,
    REC_KV,
    REC_LINK,
    REC_PREFILL,
    REC_QUEUE,
    REC_STALL,
    ST_IN,
    ST_READY,
    T_AD,
    T_ARR,
    T_DN,
    T_DS,
    T_FT,
    T_LAST,
    T_PE,
    T_PS,
    T_RE,
    T_RS,
    T_XE,
    T_XS,
)
from .queues import batch_pop, batch_push, push, q_append, q_popleft, wq_append, wq_remove
from .series import coeffs, roofline, series_time, weights_read
from .timeline import record

# ---------------------------------------------------------------- accounting


@jit
def mem_changed(IS, F, TLF, TLI, d, t):
    """Integrate replica and total KV over time (steady window) and track peaks."""
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
    if IS[IP_REC]:
        record(TLF, TLI, IS, REC_KV, d, t, t, used, rep, 0)
    assert used <= IS[IP_BUDGET], "decode KV over budget"


# ---------------------------------------------------------------- prefill


@sig("int64(int64[::1], int64, int64, int64)")
def least_loaded(IS, first, stride, count):
    """The instance whose load field (``IS[first + i·stride]``) is smallest; ties: lowest
    index."""
    best = 0
    for i in range(1, count):
        if IS[first + i * stride] < IS[first + best * stride]:
            best = i
    return best


@jit
def route_prefill(IS):
    """least_tokens (fewest queued and running prompt tokens; ties: lowest index) or
    round_robin."""
    npf = IS[IP_NP]
    pi = IS[H_PI]
    if IS[IP_PROUTE] == 1:
        p = IS[GI_RR_P] % npf
        IS[GI_RR_P] += 1
        return p
    return least_loaded(IS, pi + P_LOAD, NPI, npf)


@jit
def arrive(IS, F, R, B32, EHT, EHI, TLF, TLI, bid, bt, rid, t):
    n = IS[IP_N]
    if rid + 1 < n:
        push(EHT, EHI, IS, F[IS[H_FT] + T_ARR * n + rid + 1], EV_ARRIVAL, rid + 1, 0)
    IS[GI_INSYS] += 1
    p = route_prefill(IS)
    IS[IS[H_O] + O_PI * n + rid] = p
    pb = IS[H_PI] + p * NPI
    q_append(IS, R, pb + P_QH, R_PQN, rid)
    IS[pb + P_QN] += 1
    IS[pb + P_LOAD] += R[rid * NR + R_PROMPT]
    if IS[pb + P_BH] == -1:
        start_prefill(IS, F, R, B32, EHT, EHI, TLF, TLI, bid, bt, p, t)


@jit
def start_prefill(IS, F, R, B32, EHT, EHI, TLF, TLI, bid, bt, p, t):
    """Batch whole queued prompts up to the token budget and schedule the step's end."""
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
    count = 0
    while IS[pb + P_QH] != -1:
        rid = IS[pb + P_QH]
        i0, i1 = IS[ptr + rid], IS[ptr + rid + 1]
        prompt = R[rid * NR + R_PROMPT]
        hit = 0
        if i1 > i0:
            hit = pc_match(IS, B32, p, bid, bt, i0, i1)
            if prompt - 1 < hit:
                hit = prompt - 1  # the last prompt token is always computed
        n_new = prompt - hit
        if first != -1 and new_sum + n_new > budget:
            break
        q_popleft(IS, R, pb + P_QH, R_PQN)
        IS[pb + P_QN] -= 1
        if first == -1:
            first = rid
        else:
            R[last * NR + R_PBN] = rid
        R[rid * NR + R_PBN] = -1
        last = rid
        count += 1
        new_sum += n_new
        IS[io + O_PH * n + rid] = hit
        F[ft + T_PS * n + rid] = t
        flops += n_new * lf + lmh + att * (n_new * hit + n_new * (n_new + 1) / 2.0)
        kv_io += kv * prompt
    dur = roofline(
        flops, weights_read(F, c0, new_sum) + kv_io, F[c0 + C_FRP], F[c0 + C_BR], F[c0 + C_POV]
    )
    if t >= F[FP_TWARM]:
        F[IS[H_FPB] + p] += dur
    IS[pb + P_BH] = first
    push(EHT, EHI, IS, t + dur, EV_PREFILL, p, 0)
    if IS[IP_REC]:
        record(TLF, TLI, IS, REC_PREFILL, p, t, t + dur, count, new_sum, 0)
        record(TLF, TLI, IS, REC_QUEUE, p, t, t, IS[pb + P_QN], 0, 0)


@jit
def prefill_done(IS, F, R, B32, B8, EHT, EHI, TLF, TLI, bid, bt, p, t):
    """Cache the batch's blocks, hand each request to a decode instance, start the next step."""
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
            pc_insert(IS, B32, p, bid, bt, i0, i1)
        rid = R[rid * NR + R_PBN]
    wait = IS[IP_WAIT] != 0
    rid = first
    while rid != -1:
        d = route_decode(IS, B8, bid, rid)
        IS[io + O_DI * n + rid] = d
        IS[DI0 + d * NDI + D_LOAD] += 1
        if IS[DI0 + d * NDI + D_WQH] != -1 and wait:
            wait_for_room(IS, F, R, EHT, EHI, rid, d, t)  # first come, first admitted
        elif not admit(IS, F, R, B32, B8, EHT, EHI, TLF, TLI, bid, bt, rid, d, t):
            if wait:
                wait_for_room(IS, F, R, EHT, EHI, rid, d, t)
            else:
                reject(IS, F, rid, d, t, R_NO_MEMORY)
        rid = R[rid * NR + R_PBN]
    if IS[pb + P_QH] != -1:
        start_prefill(IS, F, R, B32, EHT, EHI, TLF, TLI, bid, bt, p, t)


# ---------------------------------------------------------------- admission


@jit
def route_decode(IS, B8, bid, rid):
    """least_load (fewest admitted-and-unfinished requests; ties: lowest index),
    prefix_affinity (longest resident leading run of the request's blocks; ties: least
    load) or round_robin."""
    nd = IS[IP_ND]
    code = IS[IP_DROUTE]
    if code == 2:
        i = IS[GI_RR_D] % nd
        IS[GI_RR_D] += 1
        return i
    if code == 1:
        ptr = IS[H_PTR]
        i0, i1 = IS[ptr + rid], IS[ptr + rid + 1]
        if i1 != i0 and nd != 1:
            U = IS[IP_U]
            best, best_i = -1, 0
            for i in range(nd):
                k = rs_match(B8, U, i, bid, i0, i1)
                load, best_load = IS[DI0 + i * NDI + D_LOAD], IS[DI0 + best_i * NDI + D_LOAD]
                if k > best or (k == best and load < best_load):
                    best, best_i = k, i
            return best_i
    return least_loaded(IS, DI0 + D_LOAD, NDI, nd)


@sig("void(int64[::1], float64[::1], int64, int64, float64, int64)")
def reject(IS, F, rid, d, t, reason):
    n, io = IS[IP_N], IS[H_O]
    IS[io + O_OUT * n + rid] = OUT_REJECTED
    IS[io + O_REA * n + rid] = reason
    F[IS[H_FT] + T_DN * n + rid] = t
    IS[DI0 + d * NDI + D_LOAD] -= 1
    IS[GI_INSYS] -= 1


@jit
def wait_for_room(IS, F, R, EHT, EHI, rid, d, t):
    wq_append(IS, R, DI0 + d * NDI + D_WQH, rid)
    push(EHT, EHI, IS, t + F[FP_WAIT_TO], EV_TIMEOUT, rid, 0)


@jit
def persist_new_blocks(IS, R, B32, B8, bid, bt, rid, d, i0, i1):
    """Blocks the policy keeps as replicas once they land (marked in the request's
    "persisted" flags); returns their tokens."""
    U = IS[IP_U]
    st = d * U
    pflag, hot = IS[H_PFLAG], IS[H_HOT]
    all_lru = IS[IP_POLICY] == POL_ALL_LRU
    ptoks = 0
    for j in range(i0, i1):
        h = bid[j]
        if B8[st + h] & ST_IN == 0 and (all_lru or B8[hot + h] != 0):
            rs_add_pending(IS, B32, B8, d, h, bt[j])
            B8[pflag + j] = 1
            ptoks += bt[j]
            R[rid * NR + R_FLAGS] |= F_PERS
    return ptoks


@sig("UniTuple(int64, 2)(int64[::1], int64, int64, int64)")
def handoff(IS, rid, prompt, hit_tok):
    """The policy's hand-off: (tokens whose KV crosses the link, prefix tokens the decode
    instance recomputes)."""
    policy = IS[IP_POLICY]
    if policy == POL_TRANSFER:
        return prompt, np.int64(0)
    if policy == POL_RECOMPUTE:
        ph = IS[IS[H_O] + O_PH * IS[IP_N] + rid]
        return prompt - ph, ph
    return prompt - hit_tok, np.int64(0)


@jit
def send_kv(IS, F, TLF, TLI, rid, d, t, nbytes):
    """Queue ``nbytes`` on the least busy channel (ties: lowest index) from the request's
    prefill instance to ``d``; returns when the KV lands."""
    n, io = IS[IP_N], IS[H_O]
    nc = IS[IP_NC]
    p = IS[io + O_PI * n + rid]
    ch = IS[H_FCH] + (p * IS[IP_ND] + d) * nc
    c = 0
    for i in range(1, nc):
        if F[ch + i] < F[ch + c]:
            c = i
    start = t
    if F[ch + c] > start:
        start = F[ch + c]
    occupy = nbytes / F[FP_LINK_BPS]
    F[ch + c] = start + occupy
    if start >= F[FP_TWARM]:
        F[G_LINK] += occupy
    F[IS[H_FT] + T_XS * n + rid] = start
    if IS[IP_REC]:
        track = (p * IS[IP_ND] + d) * nc + c
        record(TLF, TLI, IS, REC_LINK, track, start, start + occupy, rid, np.int64(nbytes), 0)
    return start + occupy + F[FP_LINK_LAT]


@jit
def admit(IS, F, R, B32, B8, EHT, EHI, TLF, TLI, bid, bt, rid, d, t):
    """Reserve KV on decode instance ``d`` and start the hand-off; False if no room."""
    n, ptr, io, U = IS[IP_N], IS[H_PTR], IS[H_O], IS[IP_U]
    b = DI0 + d * NDI
    rr = rid * NR
    uses_replicas = IS[IP_POLICY] >= POL_HOTSET
    budget = IS[IP_BUDGET]
    i0, i1 = IS[ptr + rid], IS[ptr + rid + 1]
    nhit = 0
    if uses_replicas and i1 > i0:
        nhit = rs_match(B8, U, d, bid, i0, i1)
    hit_tok = 0
    for j in range(i0, i0 + nhit):
        hit_tok += bt[j]
    prompt = np.int64(R[rr + R_PROMPT])
    need = prompt + R[rr + R_OUTPUT] - hit_tok
    if need > budget:
        reject(IS, F, rid, d, t, R_TOO_LARGE)
        return True
    free = budget - IS[b + D_PRIV] - IS[b + D_USED]
    if free < need:
        idle_hit = rs_idle_tokens(IS, B32, bid, d, i0, i0 + nhit)
        if free + IS[b + D_IDLE] - idle_hit < need:
            return False
    rs_acquire(IS, B32, B8, bid, d, i0, i0 + nhit)
    if free < need:
        rs_trim(IS, B32, B8, d, need - free)
    ptoks = 0
    if uses_replicas:
        ptoks = persist_new_blocks(IS, R, B32, B8, bid, bt, rid, d, i0 + nhit, i1)
    private = need - ptoks
    IS[b + D_PRIV] += private
    R[rr + R_PRIV] = private
    R[rr + R_NHIT] = nhit
    IS[io + O_PT * n + rid] = ptoks
    IS[io + O_RH * n + rid] = hit_tok
    ft = IS[H_FT]
    F[ft + T_AD * n + rid] = t
    mem_changed(IS, F, TLF, TLI, d, t)

    xfer, rc = handoff(IS, rid, prompt, hit_tok)
    IS[io + O_XT * n + rid] = xfer
    IS[io + O_RC * n + rid] = rc
    land = t
    nbytes = xfer * F[FP_DC + C_KV]
    if nbytes > 0:
        land = send_kv(IS, F, TLF, TLI, rid, d, t, nbytes)
    else:
        F[ft + T_XS * n + rid] = t
    push(EHT, EHI, IS, land, EV_TRANSFER, rid, 0)
    if rc > 0:
        R[rr + R_FLAGS] |= F_RC
        q_append(IS, R, b + D_RQH, R_RQN, rid)
        interrupt(IS, F, EHT, EHI, d, t)
    return True


@jit
def drain_waiting(IS, F, R, B32, B8, EHT, EHI, TLF, TLI, bid, bt, d, t):
    """Memory freed on ``d``: admit waiting requests in order until one does not fit."""
    n, io = IS[IP_N], IS[H_O]
    hp = DI0 + d * NDI + D_WQH
    while IS[hp] != -1:
        rid = IS[hp]
        if IS[io + O_OUT * n + rid] == OUT_REJECTED:
            wq_remove(IS, R, hp, rid)
        elif admit(IS, F, R, B32, B8, EHT, EHI, TLF, TLI, bid, bt, rid, d, t):
            wq_remove(IS, R, hp, rid)
        else:
            break


@jit
def timeout(IS, F, R, rid, t):
    """A waiting request gives up; returns False if the timeout is stale (the request was
    admitted or rejected meanwhile), so that it does not count as activity."""
    n, io = IS[IP_N], IS[H_O]
    if IS[io + O_OUT * n + rid] != OUT_PENDING or not math.isnan(F[IS[H_FT] + T_AD * n + rid]):
        return False
    # leave the wait queue now: a stale entry would make later requests queue behind it
    d = IS[io + O_DI * n + rid]
    wq_remove(IS, R, DI0 + d * NDI + D_WQH, rid)
    reject(IS, F, rid, d, t, R_TIMEOUT)
    return True


# ---------------------------------------------------------------- link and recompute


@jit
def landed(IS, F, R, B8, EHT, EHI, bid, rid, t):
    """The request's KV is on its decode instance: persisted blocks become ready replicas;
    the request joins the batch unless its prefix recompute is still pending."""
    n, ptr = IS[IP_N], IS[H_PTR]
    F[IS[H_FT] + T_XE * n + rid] = t
    d = IS[IS[H_O] + O_DI * n + rid]
    fl = rid * NR + R_FLAGS
    if R[fl] & F_PERS:
        pflag = IS[H_PFLAG]
        st = d * IS[IP_U]
        for j in range(IS[ptr + rid] + R[rid * NR + R_NHIT], IS[ptr + rid + 1]):
            if B8[pflag + j]:
                B8[st + bid[j]] |= ST_READY
    R[fl] |= F_XD
    if not R[fl] & F_RC:
        q_append(IS, R, DI0 + d * NDI + D_JQH, R_JQN, rid)
        interrupt(IS, F, EHT, EHI, d, t)


@jit
def run_recompute(IS, F, R, EHT, EHI, TLF, TLI, d, t):
    """Run every queued prefix recompute back to back; the batch stalls meanwhile."""
    n, io, ft = IS[IP_N], IS[H_O], IS[H_FT]
    b = DI0 + d * NDI
    f = DF0 + d * NDF
    c0 = FP_DC
    lf, att, kv = F[c0 + C_LF], F[c0 + C_ATT], F[c0 + C_KV]
    end = t
    while IS[b + D_RQH] != -1:
        rid = q_popleft(IS, R, b + D_RQH, R_RQN)
        m = IS[io + O_RC * n + rid]
        flops = m * lf + att * m * (m + 1) / 2.0
        bytes_ = weights_read(F, c0, m) + kv * m
        F[ft + T_RS * n + rid] = end
        end += roofline(flops, bytes_, F[c0 + C_FRP], F[c0 + C_BR], F[c0 + C_POV])
        F[ft + T_RE * n + rid] = end
        R[rid * NR + R_FLAGS] &= ~F_RC
        if R[rid * NR + R_FLAGS] & F_XD:
            q_append(IS, R, b + D_JQH, R_JQN, rid)
    IS[b + D_STALL] = 1
    F[f + DF_STALL_END] = end
    if IS[IP_REC]:
        record(TLF, TLI, IS, REC_STALL, d, t, end, 0, 0, 0)
    schedule(IS, F, EHT, EHI, d, end, 0)


# ---------------------------------------------------------------- decode


@jit
def finish(IS, F, R, B32, B8, bid, rid, d, t):
    """A sequence emitted its last token: free its KV and release its replica blocks."""
    n, ptr, io = IS[IP_N], IS[H_PTR], IS[H_O]
    b = DI0 + d * NDI
    rr = rid * NR
    F[IS[H_FT] + T_DN * n + rid] = t
    IS[io + O_OUT * n + rid] = OUT_COMPLETED
    IS[b + D_B] -= 1
    IS[b + D_CTX] -= np.int64(R[rr + R_PROMPT]) + R[rr + R_OUTPUT]
    IS[b + D_PRIV] -= R[rr + R_PRIV]
    # one release over the chain (held hit, then persisted blocks), tail first, so the
    # chain's root stays the freshest idle block
    i0, i1 = IS[ptr + rid], IS[ptr + rid + 1]
    held_end = i0 + R[rr + R_NHIT]
    pers = R[rr + R_FLAGS] & F_PERS
    pflag = IS[H_PFLAG]
    for j in range(i1 - 1, i0 - 1, -1):
        if j < held_end or (pers and B8[pflag + j]):
            rs_release_one(IS, B32, B8, d, bid[j])
    IS[b + D_LOAD] -= 1
    IS[GI_INSYS] -= 1


@jit
def advance(IS, F, TLF, TLI, d, t, first_token_in_batch):
    """Bring instance ``d`` to the boundary at ``t`` (the k iterations it scheduled):
    busy time, batch area, token gaps, the timeline segment; returns the iteration count."""
    b = DI0 + d * NDI
    f = DF0 + d * NDF
    k = IS[b + D_NK]
    nb = IS[b + D_B]
    if (nb > 0 or IS[b + D_STALL]) and F[f + DF_TSEG] >= F[FP_TWARM]:
        F[f + DF_BUSY] += t - F[f + DF_TSEG]
        F[G_BATCH_AREA] += nb * (t - F[f + DF_TSEG])
    if k > 0 and IS[IP_GAPS]:
        record_gaps(IS, F, d, k, first_token_in_batch)
    if k > 0 and IS[IP_REC]:
        record(TLF, TLI, IS, REC_DECODE, d, F[f + DF_TSEG], t, nb, k, IS[b + D_CTX])
    it = IS[b + D_IT] + k
    IS[b + D_IT] = it
    IS[b + D_CTX] += nb * k
    F[f + DF_TSEG] = t
    IS[b + D_STALL] = 0
    F[f + DF_NEXT_T] = INF
    return it


@jit
def join_batch(IS, F, R, d, t):
    """Ready requests take free batch slots (FCFS); their first token ends the next
    iteration."""
    n, ft = IS[IP_N], IS[H_FT]
    b = DI0 + d * NDI
    jn = IS[H_JN]
    nj = 0
    maxb = IS[IP_MAXB]
    it = IS[b + D_IT]
    while IS[b + D_JQH] != -1 and IS[b + D_B] < maxb:
        rid = q_popleft(IS, R, b + D_JQH, R_JQN)
        IS[b + D_B] += 1
        IS[b + D_CTX] += R[rid * NR + R_PROMPT]
        batch_push(IS, d, it + R[rid * NR + R_OUTPUT], rid)
        F[ft + T_DS * n + rid] = t
        IS[jn + nj] = rid
        nj += 1
    if nj and IS[b + D_B] > 0:
        a1, s1, a2, s2, o = coeffs(F, IS[b + D_B], IS[b + D_CTX])
        first = t + series_time(a1, s1, a2, s2, o, 1)
        gaps = IS[IP_GAPS]
        for i in range(nj):
            F[ft + T_FT * n + IS[jn + i]] = first
            if gaps:  # the first iteration's gap runs from its start
                F[ft + T_LAST * n + IS[jn + i]] = t


@jit
def decode_boundary(IS, F, R, B32, B8, EHT, EHI, TLF, TLI, bid, bt, d, version, t):
    b = DI0 + d * NDI
    if version != IS[b + D_VER]:
        return False  # superseded by an earlier boundary
    it = advance(IS, F, TLF, TLI, d, t, True)
    freed = False
    top = IS[H_DH] + 2 * IS[H_CAPB] * d
    while IS[b + D_HSZ] > 0 and IS[top] == it:
        rid = batch_pop(IS, d)
        finish(IS, F, R, B32, B8, bid, rid, d, t)
        freed = True
    if freed:
        mem_changed(IS, F, TLF, TLI, d, t)
        drain_waiting(IS, F, R, B32, B8, EHT, EHI, TLF, TLI, bid, bt, d, t)
    if IS[b + D_RQH] != -1:
        run_recompute(IS, F, R, EHT, EHI, TLF, TLI, d, t)
        return True
    join_batch(IS, F, R, d, t)
    if IS[b + D_B] > 0:
        run_to_next_finish(IS, F, EHT, EHI, d, t)
    return True
