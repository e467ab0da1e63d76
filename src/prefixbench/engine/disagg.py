"""The disaggregated mode's event handlers: prefill → admission → KV link → decode.

* Arrival: the prefill router picks an instance; the request queues FIFO.
* Prefill step: whole prompts up to the token budget; each looks its blocks up in the
  instance's prefix cache, so a hit computes only the suffix (attending to the cached part).
* Hand-off: the decode router picks an instance, which must admit the request (reserve its
  prompt and output KV, less the resident replica blocks it uses; idle replicas are trimmed
  LRU for room) before any KV moves. With no room, on_full=reject rejects and on_full=wait
  queues FCFS until memory frees or the timeout passes. The policy decides which blocks
  cross the link and which the decode instance recomputes itself (the KV queues FCFS on
  the prefill instance's egress NICs and the decode instance's ingress NICs, or, with
  private paths, on the least busy channel between the two).
* Decode: continuous batching in closed form (batch.py); while prefix recomputes are
  queued, each iteration also carries their chunks (recompute.py).
* Layer-wise streaming (streaming.py): the hand-off happens when the prefill step starts,
  and the KV moves layer by layer as the step computes it.

Every request ends exactly once: completed or rejected with a reason.
"""

from __future__ import annotations

import math

import numpy as np

from . import ced
from . import conditional as cd
from . import costaware as ca
from . import costlocal as cl
from . import kvroute as kv
from . import layout as L
from . import paging as pg
from . import refresh as rf
from .batch import (
    account_segment,
    interrupt,
    record_gaps,
    run_to_next_finish,
    schedule,
)
from .blocks import (
    pc_evict,
    pc_insert,
    prefill_hit,
    rs_acquire,
    rs_add_pending,
    rs_idle_tokens,
    rs_match,
    rs_release_chain,
    trim_for,
)
from .generated import keep_answer, write_through_finished
from .hostpath import host_path_move
from .hosttier import ht_account, ht_match, ht_take, ht_write_run, promote_or_send
from .jit import jit, sig
from .l3store import (
    l3_match,
    l3_prefill_read,
    l3_prefill_tokens,
    l3_read,
    l3_write_run,
)
from .nics import free_at, hold
from .power import power_work, prefill_record
from .queues import (
    batch_pop,
    batch_push,
    push,
    q_append,
    q_popleft,
    step_append,
    wq_append,
    wq_remove,
)
from .recompute import mark_ready, mixed_step, queue_job, resolve_shared
from .series import (
    coeffs,
    prefill_step_time,
    series_time,
    weights_read,
)
from .streaming import stream_batch, stream_one
from .timeline import record
from .window import add_step_work, clipped, in_energy_window, in_window

# ---------------------------------------------------------------- accounting


@jit
def mem_changed(IS, F, TLF, TLI, d, t):
    """Integrate replica and total KV over time (steady window) and track peaks."""
    b = L.DI0 + d * L.NDI
    f = L.DF0 + d * L.NDF
    lo = F[f + L.DF_MEM_T]
    if F[L.FP_TWARM] > lo:
        lo = F[L.FP_TWARM]
    hi = t if t < F[L.FP_TSTEADY] else F[L.FP_TSTEADY]  # the steady window only
    if hi > lo:
        F[L.G_REP_AREA] += IS[b + L.D_LREP] * (hi - lo)
        F[L.G_USED_AREA] += IS[b + L.D_LUSED] * (hi - lo)
    ht_account(IS, F, d, lo, hi)
    F[f + L.DF_MEM_T] = t
    rep = IS[b + L.D_USED]
    used = rep + IS[b + L.D_PRIV]
    IS[b + L.D_LREP] = rep
    IS[b + L.D_LUSED] = used
    if rep > IS[L.GI_PEAK_REP]:
        IS[L.GI_PEAK_REP] = rep
    if used > IS[L.GI_PEAK_USED]:
        IS[L.GI_PEAK_USED] = used
    if IS[L.IP_REC]:
        record(TLF, TLI, IS, L.REC_KV, d, t, t, used, rep, 0)
    assert used <= IS[L.IP_BUDGET], "decode KV over budget"


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
def route_prefill(IS, F, R, B32, bid, bt, rid):
    """least_tokens (fewest queued and running prompt tokens; ties: lowest index),
    round_robin or kv_aware (kvroute.py)."""
    npf = IS[L.IP_NP]
    pi = IS[L.H_PI]
    if IS[L.IP_PROUTE] == 2:
        return kv.best_prefill(IS, F, R, B32, bid, bt, rid)
    if IS[L.IP_PROUTE] == 1:
        p = IS[L.GI_RR_P] % npf
        IS[L.GI_RR_P] += 1
        return p
    return least_loaded(IS, pi + L.P_LOAD, L.NPI, npf)


@jit
def arrive(IS, F, R, B32, B8, EHT, EHI, TLF, TLI, bid, bt, rid, t):
    n = IS[L.IP_N]
    if rid + 1 < n:
        push(EHT, EHI, IS, F[IS[L.H_FT] + L.T_ARR * n + rid + 1], L.EV_ARRIVAL, rid + 1, 0)
    IS[L.GI_INSYS] += 1
    if IS[L.IP_POLICY] == L.POL_COND:  # --- conditional: the decode instance decides first
        sync_paged(IS, F, R, B32, B8, TLF, TLI, t)
        d = route_decode(IS, F, R, B8, bid, bt, rid)
        IS[IS[L.H_O] + L.O_DI * n + rid] = d
        if cd.prefills_locally(IS, F, R, B8, bid, bt, rid, d):
            prefill_on_decode(IS, F, R, B32, B8, EHT, EHI, TLF, TLI, bid, bt, rid, d, t)
            return
    if IS[L.IP_POLICY] == L.POL_COST_AWARE and IS[L.IP_CALOC]:  # --- cost_aware: local?
        sync_paged(IS, F, R, B32, B8, TLF, TLI, t)
        d = cl.candidate(IS, B8, bid, bt, rid)
        if cl.prefills_locally(IS, F, R, B32, B8, bid, bt, rid, d, t):
            prefill_on_decode(IS, F, R, B32, B8, EHT, EHI, TLF, TLI, bid, bt, rid, d, t)
            return
    p = route_prefill(IS, F, R, B32, bid, bt, rid)
    IS[IS[L.H_O] + L.O_PI * n + rid] = p
    pb = IS[L.H_PI] + p * L.NPI
    q_append(IS, R, pb + L.P_QH, L.R_PQN, rid)
    IS[pb + L.P_QN] += 1
    IS[pb + L.P_LOAD] += R[rid * L.NR + L.R_PROMPT]
    if IS[pb + L.P_BH] == -1:
        start_prefill(IS, F, R, B32, B8, EHT, EHI, TLF, TLI, bid, bt, p, t)


@jit
def prefill_on_decode(IS, F, R, B32, B8, EHT, EHI, TLF, TLI, bid, bt, rid, d, t):
    """conditional_disagg's local prefill: no prefill instance; admitted on ``d`` now, its
    uncached prompt runs as a chunked-prefill job there (conditional.py)."""
    n, io, ft = IS[L.IP_N], IS[L.H_O], IS[L.H_FT]
    IS[io + L.O_PI * n + rid] = -1
    F[ft + L.T_PS * n + rid] = t
    F[ft + L.T_PE * n + rid] = t
    R[rid * L.NR + L.R_FLAGS] |= L.F_LOCAL
    hand_off_one(IS, F, R, B32, B8, EHT, EHI, TLF, TLI, bid, bt, rid, d, t)


@jit
def _take_batch(IS, F, R, B32, bid, bt, p, t):
    """Pop whole queued prompts up to the token budget into a step; each computes what
    neither the prefix cache nor the L3 store (read now, l3store.py) holds. Returns the
    step's first request, count, new tokens, GEMM and attention FLOPs, KV bytes read,
    replayed tokens (ced) and when its L3 reads land (``t`` if none)."""
    n, io, ft, ptr = IS[L.IP_N], IS[L.H_O], IS[L.H_FT], IS[L.H_PTR]
    pb = IS[L.H_PI] + p * L.NPI
    budget = IS[L.IP_TOKB]
    c0 = L.FP_PC
    lf, lmh, att, kv = F[c0 + L.C_LF], F[c0 + L.C_LMH], F[c0 + L.C_ATT], F[c0 + L.C_KV]
    new_sum = 0
    gemm, attn, kv_io = 0.0, 0.0, 0.0
    replayed = 0.0  # --- ced
    first, last, count = -1, -1, 0
    ready = t
    while IS[pb + L.P_QH] != -1:
        rid = IS[pb + L.P_QH]
        prompt = R[rid * L.NR + L.R_PROMPT]
        hit = prefill_hit(IS, R, B32, p, bid, bt, rid)
        i0, i1 = IS[ptr + rid], IS[ptr + rid + 1]
        x3 = l3_prefill_tokens(IS, B32, bid, bt, i0, i1, hit, prompt)  # --- l3
        n_new = prompt - hit - x3
        if first != -1 and new_sum + n_new > budget:
            break
        if not hold_fits(IS, pb, first, prompt):  # --- admit: back-pressure
            break
        hold_prompt(IS, R, pb, rid, prompt)
        q_popleft(IS, R, pb + L.P_QH, L.R_PQN)
        IS[pb + L.P_QN] -= 1
        first = step_append(R, first, last, rid)
        last = rid
        count += 1
        new_sum += n_new
        IS[io + L.O_PH * n + rid] = hit
        F[ft + L.T_PS * n + rid] = t
        if x3 > 0:
            IS[io + L.O_L3P * n + rid] = x3
            land = l3_prefill_read(IS, F, B32, bid, bt, i0, i1, hit, x3, t)
            ready = land if land > ready else ready
        gemm += n_new * lf + lmh
        attn += att * (n_new * (hit + x3) + n_new * (n_new + 1) / 2.0)
        kv_io += kv * prompt
        gemm += ced.replay_flops(F, c0, prompt)  # --- ced: replay window (0 without)
        replayed += ced.replay_tokens(F, c0, prompt)
    return first, count, new_sum, gemm, attn, kv_io, replayed, ready


@jit
def start_prefill(IS, F, R, B32, B8, EHT, EHI, TLF, TLI, bid, bt, p, t):
    """Batch whole queued prompts up to the token budget and schedule the step's end; the
    step computes once its L3 reads have landed (``c``; ``t`` without a store)."""
    n, ft = IS[L.IP_N], IS[L.H_FT]
    pb = IS[L.H_PI] + p * L.NPI
    c0 = L.FP_PC
    first, count, new_sum, gemm, attn, kv_io, replayed, c = _take_batch(
        IS, F, R, B32, bid, bt, p, t
    )
    if first == -1:  # --- admit: held KV leaves no room; a pull's landing restarts it
        return
    if IS[L.IP_HOLD]:
        pc_evict(IS, B32, p)
    flops = gemm + attn
    dur = prefill_step_time(F, c0, gemm, attn, new_sum, kv_io) + F[c0 + L.C_CEDC] * replayed
    if in_window(F, t):
        F[IS[L.H_FPB] + p] += clipped(F, c, c + dur)
        pw = IS[L.H_FCH] + IS[L.IP_NP] * IS[L.IP_ND] * IS[L.IP_NC] + 2 * p
        add_step_work(F, pw, flops, weights_read(F, c0, new_sum) + kv_io, c, c + dur)
    if in_energy_window(F, t):
        power_work(  # --- power
            F, prefill_record(IS, F, p), c0, F[c0 + L.C_FRP], flops,
            weights_read(F, c0, new_sum) + kv_io, dur,
        )  # fmt: skip
    IS[pb + L.P_BH] = first
    push(EHT, EHI, IS, c + dur, L.EV_PREFILL, p, 0)
    if IS[L.IP_REC]:
        record(TLF, TLI, IS, L.REC_PREFILL, p, c, c + dur, count, new_sum, 0)
        record(TLF, TLI, IS, L.REC_QUEUE, p, t, t, IS[pb + L.P_QN], 0, 0)
    if IS[L.IP_STREAM]:  # layer-wise: hand off now, stream as the step computes
        rid = first
        while rid != -1:
            F[ft + L.T_PE * n + rid] = t + dur
            rid = R[rid * L.NR + L.R_PBN]
        IS[L.GI_DEFER] = 1
        hand_off_step(IS, F, R, B32, B8, EHT, EHI, TLF, TLI, bid, bt, first, t)
        IS[L.GI_DEFER] = 0
        stream_batch(IS, F, R, EHT, EHI, TLF, TLI, first, t)


@jit
def hold_fits(IS, pb, first, prompt):
    """--- admit: a prompt joins the step being formed only while the KV held on the
    prefill instance (pulls in flight and this step's) and its own fit the instance's KV
    pool; the first of a step always goes when nothing is held."""
    if not IS[L.IP_HOLD]:
        return True
    held = IS[pb + L.P_HELD]
    return (first == -1 and held == 0) or held + prompt <= IS[L.IP_PCAP]


@jit
def hold_prompt(IS, R, pb, rid, prompt):
    """--- admit: the prompt's KV is held from its step's start until it is pulled."""
    if IS[L.IP_HOLD]:
        IS[pb + L.P_HELD] += prompt
        R[rid * L.NR + L.R_FLAGS] |= L.F_HELD


@jit
def release_hold(IS, R, rid):
    """--- admit: the decode pull of ``rid`` completed (or it was rejected): its prefill
    instance frees the KV; a stalled instance is restarted after the event (kick_prefills)."""
    fl = rid * L.NR + L.R_FLAGS
    if R[fl] & L.F_HELD:
        R[fl] &= ~L.F_HELD
        p = IS[IS[L.H_O] + L.O_PI * IS[L.IP_N] + rid]
        pb = IS[L.H_PI] + p * L.NPI
        IS[pb + L.P_HELD] -= R[rid * L.NR + L.R_PROMPT]
        IS[pb + L.P_KICK] = 1


@jit
def kick_prefills(IS, F, R, B32, B8, EHT, EHI, TLF, TLI, bid, bt, t):
    """--- admit: after an event that freed held KV, an idle prefill instance with a
    queue starts its next step."""
    for p in range(IS[L.IP_NP]):
        pb = IS[L.H_PI] + p * L.NPI
        if IS[pb + L.P_KICK]:
            IS[pb + L.P_KICK] = 0
            if IS[pb + L.P_BH] == -1 and IS[pb + L.P_QH] != -1:
                start_prefill(IS, F, R, B32, B8, EHT, EHI, TLF, TLI, bid, bt, p, t)


@jit
def prefill_done(IS, F, R, B32, B8, EHT, EHI, TLF, TLI, bid, bt, p, t):
    """Cache the batch's blocks, hand each request to a decode instance (after_prefill; a
    layer-wise step handed them off at its start), start the next step."""
    n, ptr, ft = IS[L.IP_N], IS[L.H_PTR], IS[L.H_FT]
    pb = IS[L.H_PI] + p * L.NPI
    first = IS[pb + L.P_BH]
    IS[pb + L.P_BH] = -1
    rid = first
    while rid != -1:
        F[ft + L.T_PE * n + rid] = t
        IS[pb + L.P_LOAD] -= R[rid * L.NR + L.R_PROMPT]
        i0, i1 = IS[ptr + rid], IS[ptr + rid + 1]
        if i1 > i0:
            pc_insert(IS, B32, p, bid, bt, i0, i1)
        rid = R[rid * L.NR + L.R_PBN]
    if not IS[L.IP_STREAM]:
        hand_off_step(IS, F, R, B32, B8, EHT, EHI, TLF, TLI, bid, bt, first, t)
    if IS[pb + L.P_QH] != -1:
        start_prefill(IS, F, R, B32, B8, EHT, EHI, TLF, TLI, bid, bt, p, t)


@jit
def sync_paged(IS, F, R, B32, B8, TLF, TLI, t):
    """Paged: every decode instance's books up to ``t`` (lazy trims change what is
    resident) before a routing or admission reads them."""
    if IS[L.IP_PAGED]:
        for d in range(IS[L.IP_ND]):
            if pg.sync(IS, F, R, B32, B8, d, t):
                mem_changed(IS, F, TLF, TLI, d, t)


@jit
def hand_off_step(IS, F, R, B32, B8, EHT, EHI, TLF, TLI, bid, bt, first, t):
    """Route each request of a prefill step (linked from ``first``) to a decode instance
    and admit it there, in batch order."""
    n, io = IS[L.IP_N], IS[L.H_O]
    sync_paged(IS, F, R, B32, B8, TLF, TLI, t)
    rid = first
    while rid != -1:
        if IS[L.IP_POLICY] == L.POL_COND:  # --- conditional: chosen at arrival
            d = IS[io + L.O_DI * n + rid]
        else:
            d = route_decode(IS, F, R, B8, bid, bt, rid)
        hand_off_one(IS, F, R, B32, B8, EHT, EHI, TLF, TLI, bid, bt, rid, d, t)
        rid = R[rid * L.NR + L.R_PBN]


@jit
def hand_off_one(IS, F, R, B32, B8, EHT, EHI, TLF, TLI, bid, bt, rid, d, t):
    """Hand ``rid`` to decode instance ``d``: admit it, queue it for room, or reject it."""
    n, io = IS[L.IP_N], IS[L.H_O]
    wait = IS[L.IP_WAIT] != 0
    IS[io + L.O_DI * n + rid] = d
    IS[L.DI0 + d * L.NDI + L.D_LOAD] += 1
    queued = IS[L.DI0 + d * L.NDI + L.D_WQH] != -1 or IS[L.DI0 + d * L.NDI + L.D_PQH] != -1
    if queued and wait:
        wait_for_room(IS, F, R, EHT, EHI, rid, d, t)  # first come, first admitted
    elif not admit(IS, F, R, B32, B8, EHT, EHI, TLF, TLI, bid, bt, rid, d, t):
        if wait:
            wait_for_room(IS, F, R, EHT, EHI, rid, d, t)
        else:
            reject(IS, F, R, rid, d, t, L.R_NO_MEMORY)


# ---------------------------------------------------------------- admission


@jit
def route_decode(IS, F, R, B8, bid, bt, rid):
    """least_load (fewest admitted-and-unfinished requests; ties: lowest index),
    prefix_affinity (longest resident leading run of the request's blocks; ties: least
    load), round_robin or kv_aware (kvroute.py)."""
    nd = IS[L.IP_ND]
    code = IS[L.IP_DROUTE]
    if code == 3:
        return kv.best_decode(IS, F, R, B8, bid, bt, rid)
    if code == 2:
        i = IS[L.GI_RR_D] % nd
        IS[L.GI_RR_D] += 1
        return i
    if code == 1:
        ptr = IS[L.H_PTR]
        i0, i1 = IS[ptr + rid], IS[ptr + rid + 1]
        if i1 != i0 and nd != 1:
            U = IS[L.IP_U]
            best, best_i = -1, 0
            for i in range(nd):
                k = rs_match(B8, U, i, bid, i0, i1)
                load, best_load = (
                    IS[L.DI0 + i * L.NDI + L.D_LOAD],
                    IS[L.DI0 + best_i * L.NDI + L.D_LOAD],
                )
                if k > best or (k == best and load < best_load):
                    best, best_i = k, i
            return best_i
    return least_loaded(IS, L.DI0 + L.D_LOAD, L.NDI, nd)


@sig("void(int64[::1], float64[::1], int32[::1], int64, int64, float64, int64)")
def reject(IS, F, R, rid, d, t, reason):
    n, io = IS[L.IP_N], IS[L.H_O]
    release_hold(IS, R, rid)  # --- admit
    IS[io + L.O_OUT * n + rid] = L.OUT_REJECTED
    IS[io + L.O_REA * n + rid] = reason
    F[IS[L.H_FT] + L.T_DN * n + rid] = t
    IS[L.DI0 + d * L.NDI + L.D_LOAD] -= 1
    IS[L.GI_INSYS] -= 1


@jit
def wait_for_room(IS, F, R, EHT, EHI, rid, d, t):
    wq_append(IS, R, L.DI0 + d * L.NDI + L.D_WQH, rid)
    if F[L.FP_WAIT_TO] < L.INF:  # paged with no queue timeout: wait for ever
        push(EHT, EHI, IS, t + F[L.FP_WAIT_TO], L.EV_TIMEOUT, rid, 0)


@jit
def persist_new_blocks(IS, F, R, B32, B8, bid, bt, rid, d, i0, i1):
    """Blocks the policy keeps as replicas once they land (marked in the request's
    "persisted" flags); returns their tokens."""
    U = IS[L.IP_U]
    st = d * U
    pflag, hot = IS[L.H_PFLAG], IS[L.H_HOT]
    all_lru = IS[L.IP_POLICY] != L.POL_HOTSET  # cost_aware too (costaware.py, residency)
    ptoks = 0
    for j in range(i0, i1):
        h = bid[j]
        keep = all_lru or B8[hot + h] != 0
        if B8[st + h] & L.ST_IN == 0 and keep:
            rs_add_pending(IS, B32, B8, d, h, bt[j])
            B8[pflag + j] = 1
            ptoks += bt[j]
            R[rid * L.NR + L.R_FLAGS] |= L.F_PERS
    return ptoks


@sig("UniTuple(int64, 2)(int64[::1], int32[::1], int64, int64, int64)")
def handoff(IS, R, rid, prompt, hit_tok):
    """The policy's hand-off: (tokens whose KV crosses the link, prefix tokens the decode
    instance recomputes; conditional_disagg's local prefill: the whole uncached prompt)."""
    policy = IS[L.IP_POLICY]
    if policy == L.POL_COND and R[rid * L.NR + L.R_FLAGS] & L.F_LOCAL:
        return np.int64(0), prompt - hit_tok
    if policy == L.POL_TRANSFER:
        return prompt, np.int64(0)
    if policy == L.POL_RECOMPUTE:
        ph = IS[IS[L.H_O] + L.O_PH * IS[L.IP_N] + rid]
        return prompt - ph, ph
    return prompt - hit_tok, np.int64(0)


@jit
def send_kv(IS, F, TLF, TLI, rid, d, t, nbytes):
    """Queue ``nbytes`` from the request's prefill instance to ``d``; returns when the KV
    lands. Shared NICs: FCFS holding both the prefill instance's egress group and ``d``'s
    ingress group (an RDMA write occupies both ends); it starts when both are free and
    moves at the sharded group rate ``FP_LINK_BPS``. Private paths: the least busy channel
    (ties: lowest index) of the (prefill, decode) pair."""
    n, io = IS[L.IP_N], IS[L.H_O]
    nc = IS[L.IP_NC]
    p = IS[io + L.O_PI * n + rid]
    occupy = nbytes / F[L.FP_LINK_BPS]
    start, c = hold(IS, F, p, d, t, occupy)
    F[IS[L.H_FT] + L.T_XS * n + rid] = start
    if IS[L.IP_REC]:
        track = (p * IS[L.IP_ND] + d) * nc + c
        record(TLF, TLI, IS, L.REC_LINK, track, start, start + occupy, rid, np.int64(nbytes), 0)
    return start + occupy + F[L.FP_LINK_LAT]


@jit
def link_start(IS, F, rid, d, t):
    """When a transfer issued now for ``rid`` to ``d`` would start (send_kv's rule, nothing
    reserved)."""
    n, io = IS[L.IP_N], IS[L.H_O]
    return free_at(IS, F, IS[io + L.O_PI * n + rid], d, t)


@jit
def link_blocks(IS, R, bt, rid, i0, i1, nhit):
    """Chain blocks whose KV crosses the link when ``nhit`` leading ones are served on the
    decode node (recompute_on_decode: those inside the prefill hit are rebuilt there;
    conditional_disagg's local prefill: none)."""
    if R[rid * L.NR + L.R_FLAGS] & L.F_LOCAL:
        return 0
    if IS[L.IP_POLICY] == L.POL_TRANSFER:
        return i1 - i0
    if IS[L.IP_POLICY] == L.POL_RECOMPUTE:
        ph = IS[IS[L.H_O] + L.O_PH * IS[L.IP_N] + rid]
        k, cum = 0, 0
        for j in range(i0, i1):
            cum += bt[j]
            if cum > ph:
                break
            k += 1
        return i1 - i0 - k
    return i1 - i0 - nhit


@jit
def _need(IS, R, rr, prompt, hit_tok):
    """KV tokens the request reserves now (paged: its own prompt blocks); over the budget
    when it is too large to ever finish here."""
    budget = IS[L.IP_BUDGET]
    need = prompt + R[rr + L.R_OUTPUT] - hit_tok
    if IS[L.IP_PAGED]:  # own prompt blocks now; too large if alone it could not finish
        bs = IS[L.IP_BS]
        own = prompt - hit_tok
        whole = (prompt + R[rr + L.R_OUTPUT] - 1 + bs - 1) // bs * bs  # if its hit is lost
        if hit_tok + (need - 1 + bs - 1) // bs * bs > budget or whole > budget:
            need = budget + 1
        else:
            need = (own + bs - 1) // bs * bs
    return need


@jit
def reserved_room(IS, R, rr, d, need, own):
    """The room paged admission asks for with SGLang's reserved decode tokens N
    (``num_reserved_decode_tokens``, docs/model.md §1.5.2): its ``own`` prompt tokens plus
    min(N, output − 1), in whole blocks (so that alone it always fits), plus N for every
    admitted, unfinished request on ``d``; ``need`` when off."""
    n_res = IS[L.IP_RDT]
    if n_res == 0:
        return need
    grow = np.int64(R[rr + L.R_OUTPUT]) - 1
    if grow > n_res:
        grow = n_res
    bs = IS[L.IP_BS]
    return (own + grow + bs - 1) // bs * bs + n_res * IS[L.DI0 + d * L.NDI + L.D_ADM]


@jit
def _make_room(IS, F, B32, B8, bid, d, t, i0, i1, nhit, nhost, need, room, tier):
    """Free ``need`` tokens on ``d`` (trimming idle replicas LRU), take the hit run and the
    host run; returns the host run's tokens, or -1 (nothing changed) if there is no
    ``room`` (``need`` plus any reserved decode tokens), and the time the trim's queued
    demotion copies complete (-inf if none, host tier)."""
    b = L.DI0 + d * L.NDI
    free = IS[L.IP_BUDGET] - IS[b + L.D_PRIV] - IS[b + L.D_USED]
    if free < room:
        idle_hit = rs_idle_tokens(IS, B32, bid, d, i0, i0 + nhit)
        if free + IS[b + L.D_IDLE] - idle_hit < room:
            return -1, -L.INF
    host_tok = 0
    if tier:  # out of the pool first: the trim demotes into it
        host_tok = ht_take(IS, B32, d, bid, i0 + nhit, i0 + nhit + nhost, i1)
    rs_acquire(IS, B32, B8, bid, d, i0, i0 + nhit)
    gate = -L.INF  # tiered: its KV is in no earlier than the copies its trim queued
    if tier and IS[L.IP_HWP] == 2:  # write_through_selective: a block's first reuse
        ht_write_run(IS, F, B32, B8, bid, d, i0, i0 + nhit, t)
    if free < need:
        gate = trim_for(IS, F, B32, B8, d, need - free, t)
        if tier:  # a chain block past a gap, trimmed and
            ht_take(IS, B32, d, bid, i0 + nhit, i0 + nhit, i1)  # demoted: back to HBM now
    return host_tok, gate


@jit
def _book(IS, F, R, B32, B8, EHT, EHI, TLF, TLI, bid, bt, rid, d, t, nhit, hit_tok, need):
    """The admission's books: use counts, the blocks kept as replicas, private KV, the
    admission's columns and memory; returns the persisted tokens."""
    n, ptr, io = IS[L.IP_N], IS[L.H_PTR], IS[L.H_O]
    b = L.DI0 + d * L.NDI
    rr = rid * L.NR
    i0, i1 = IS[ptr + rid], IS[ptr + rid + 1]
    prompt = np.int64(R[rr + L.R_PROMPT])
    ptoks = 0
    if IS[L.IP_POLICY] == L.POL_HOTSET:
        rf.count(IS, F, bid, bt, i0, i1)
    if IS[L.IP_POLICY] >= L.POL_HOTSET:
        ptoks = persist_new_blocks(IS, F, R, B32, B8, bid, bt, rid, d, i0 + nhit, i1)
    private = need - ptoks
    IS[b + L.D_ACT] += prompt + R[rr + L.R_OUTPUT]  # --- kv routing
    IS[b + L.D_ADM] += 1  # --- admit
    IS[b + L.D_PRIV] += private
    R[rr + L.R_PRIV] = private
    R[rr + L.R_NHIT] = nhit
    IS[io + L.O_PT * n + rid] = ptoks
    IS[io + L.O_RH * n + rid] = hit_tok
    F[IS[L.H_FT] + L.T_AD * n + rid] = t
    mem_changed(IS, F, TLF, TLI, d, t)
    if IS[L.IP_PAGED]:
        R[rr + L.R_OWN0] = prompt - hit_tok
        R[rr + L.R_PTH] = ptoks
        IS[L.GI_ASEQ] += 1
        R[rr + L.R_ASEQ] = IS[L.GI_ASEQ]
        pg.guard(IS, F, R, EHT, EHI, d, t)
    return ptoks


@jit
def _split(IS, F, R, rid, d, t, prompt, hit_tok, nhost, host_tok, l3_tok):
    """The policy's hand-off: (tokens over the link, tokens recomputed on decode, the host
    run promoted or not); the L3 run's ``l3_tok`` never cross the link."""
    if IS[L.IP_POLICY] == L.POL_COST_AWARE and R[rid * L.NR + L.R_FLAGS] & L.F_LOCAL:
        return np.int64(0), prompt - hit_tok, False  # --- cost_aware's local prefill
    if IS[L.IP_POLICY] == L.POL_COST_AWARE:  # transfer, promote or recompute (costaware.py)
        return ca.choose(IS, F, R, rid, d, t, prompt, hit_tok, host_tok)
    xfer, rc = handoff(IS, R, rid, prompt, hit_tok)
    xfer -= l3_tok
    promote = nhost > 0 and promote_or_send(
        IS, F, d, t, link_start(IS, F, rid, d, t), xfer - host_tok, host_tok
    )
    if promote:
        xfer -= host_tok
    return xfer, rc, promote


@jit
def _l3_run(IS, B32, bid, bt, j0, i1):
    """The L3 run (blocks, tokens): the store's leading blocks of ``bid[j0:i1]``, past the
    HBM and host runs, matched after the admission's trim (its writes included)."""
    if IS[L.IP_L3CAP] <= 0 or j0 >= i1:
        return 0, np.int64(0)
    k = l3_match(IS, B32, bid, j0, i1)
    tok = np.int64(0)
    for j in range(j0, j0 + k):
        tok += bt[j]
    return k, tok


@jit
def _send(IS, F, R, EHT, EHI, TLF, TLI, rid, d, t, xfer, promo_land):
    """The request's KV leaves for ``d`` (layer-wise, or whole; its landing event)."""
    n, ft = IS[L.IP_N], IS[L.H_FT]
    nbytes = xfer * F[L.FP_DC + L.C_KV]
    if nbytes > 0 and IS[L.IP_STREAM]:
        if IS[L.GI_DEFER]:
            R[rid * L.NR + L.R_FLAGS] |= L.F_STREAM  # sent by the step's joint pass
        else:
            stream_one(IS, F, R, EHT, EHI, TLF, TLI, rid, d, t)
        return
    land = t
    if nbytes > 0:
        land = send_kv(IS, F, TLF, TLI, rid, d, t, nbytes)
    else:
        F[ft + L.T_XS * n + rid] = t
    if promo_land > land:
        land = promo_land
    push(EHT, EHI, IS, land, L.EV_TRANSFER, rid, 0)


@jit
def _hand_over(IS, F, R, B32, B8, EHT, EHI, TLF, TLI, bid, bt, rid, d, t, nhit, hit_tok,
               nhost, host_tok, gate):  # fmt: skip
    """Move the KV the decode instance lacks (link, host path) and queue its recompute."""
    n, ptr, io, ft = IS[L.IP_N], IS[L.H_PTR], IS[L.H_O], IS[L.H_FT]
    i0, i1 = IS[ptr + rid], IS[ptr + rid + 1]
    prompt = np.int64(R[rid * L.NR + L.R_PROMPT])
    n3, l3_tok = _l3_run(IS, B32, bid, bt, i0 + nhit + nhost, i1)
    xfer, rc, promote = _split(IS, F, R, rid, d, t, prompt, hit_tok, nhost, host_tok, l3_tok)
    promo_land = -1.0
    if n3 > 0:  # --- l3: the L3 run is read from the store
        promo_land = l3_read(IS, F, B32, bid, i0 + nhit + nhost, i0 + nhit + nhost + n3, t)
        F[ft + L.T_PROMO * n + rid] = promo_land
        IS[io + L.O_L3B * n + rid] = n3
    if promote:
        promo_land = max(promo_land, host_path_move(IS, F, d, t, host_tok * F[L.FP_DC + L.C_KV]))
        F[ft + L.T_PROMO * n + rid] = promo_land
        IS[io + L.O_HOSTB * n + rid] = nhost
        IS[io + L.O_HOSTT * n + rid] = host_tok
    else:
        nhost = 0
    if gate > promo_land:  # the HBM it lands in is free once its demotions are copied
        promo_land = gate
        F[ft + L.T_PROMO * n + rid] = gate
    if IS[L.IP_POLICY] >= L.POL_HOTSET:
        IS[io + L.O_HBMB * n + rid] = nhit
    IS[io + L.O_LINKB * n + rid] = link_blocks(IS, R, bt, rid, i0, i1, nhit) - nhost - n3
    IS[io + L.O_XT * n + rid] = xfer
    IS[io + L.O_RC * n + rid] = rc
    _send(IS, F, R, EHT, EHI, TLF, TLI, rid, d, t, xfer, promo_land)
    if rc > 0:  # deduplicated: recompute_tokens counts the tokens its own job computes
        after = IS[L.IP_POLICY] == L.POL_COST_AWARE or IS[L.IP_POLICY] == L.POL_COND
        IS[io + L.O_RC * n + rid] = queue_job(IS, R, bid, bt, rid, d, rc, hit_tok if after else 0)
        interrupt(IS, F, EHT, EHI, d, t)


@jit
def admit(IS, F, R, B32, B8, EHT, EHI, TLF, TLI, bid, bt, rid, d, t):
    """Reserve KV on decode instance ``d`` and start the hand-off; False if no room."""
    ptr, U = IS[L.H_PTR], IS[L.IP_U]
    rr = rid * L.NR
    i0, i1 = IS[ptr + rid], IS[ptr + rid + 1]
    nhit = 0
    if IS[L.IP_POLICY] >= L.POL_HOTSET and i1 > i0:
        nhit = rs_match(B8, U, d, bid, i0, i1)
    hit_tok = 0
    for j in range(i0, i0 + nhit):
        hit_tok += bt[j]
    tier = IS[L.IP_POLICY] == L.POL_TIERED or IS[L.IP_POLICY] == L.POL_COST_AWARE
    nhost = 0  # replicate_tiered, cost_aware: the host tier continues the HBM run
    if tier and i1 > i0 + nhit:
        nhost = ht_match(IS, B32, d, bid, i0 + nhit, i1)
    prompt = np.int64(R[rr + L.R_PROMPT])
    need = _need(IS, R, rr, prompt, hit_tok)
    if need > IS[L.IP_BUDGET]:
        reject(IS, F, R, rid, d, t, L.R_TOO_LARGE)
        return True
    room = reserved_room(IS, R, rr, d, need, prompt - hit_tok)  # --- admit: SGLang's gate
    host_tok, gate = _make_room(IS, F, B32, B8, bid, d, t, i0, i1, nhit, nhost, need, room, tier)
    if host_tok < 0:
        return False
    _book(IS, F, R, B32, B8, EHT, EHI, TLF, TLI, bid, bt, rid, d, t, nhit, hit_tok, need)
    _hand_over(IS, F, R, B32, B8, EHT, EHI, TLF, TLI, bid, bt, rid, d, t, nhit, hit_tok,
               nhost, host_tok, gate)  # fmt: skip
    return True


@jit
def drain_waiting(IS, F, R, B32, B8, EHT, EHI, TLF, TLI, bid, bt, d, t):
    """Memory freed on ``d``: admit waiting requests in order until one does not fit."""
    n, io = IS[L.IP_N], IS[L.H_O]
    hp = L.DI0 + d * L.NDI + L.D_WQH
    if IS[L.DI0 + d * L.NDI + L.D_PQH] != -1:  # paged: preempted sequences resume first
        done = pg.resume_waiting(IS, F, R, B32, B8, EHT, EHI, bid, bt, d, t)
        mem_changed(IS, F, TLF, TLI, d, t)
        if not done:
            return
    while IS[hp] != -1:
        rid = IS[hp]
        if IS[io + L.O_OUT * n + rid] == L.OUT_REJECTED:
            wq_remove(IS, R, hp, rid)
        elif admit(IS, F, R, B32, B8, EHT, EHI, TLF, TLI, bid, bt, rid, d, t):
            wq_remove(IS, R, hp, rid)
        else:
            break


@jit
def timeout(IS, F, R, rid, t):
    """A waiting request gives up; returns False if the timeout is stale (the request was
    admitted or rejected meanwhile), so that it does not count as activity."""
    n, io = IS[L.IP_N], IS[L.H_O]
    if IS[io + L.O_OUT * n + rid] != L.OUT_PENDING or not math.isnan(
        F[IS[L.H_FT] + L.T_AD * n + rid]
    ):
        return False
    # leave the wait queue now: a stale entry would make later requests queue behind it
    d = IS[io + L.O_DI * n + rid]
    wq_remove(IS, R, L.DI0 + d * L.NDI + L.D_WQH, rid)
    reject(IS, F, R, rid, d, t, L.R_TIMEOUT)
    return True


# ---------------------------------------------------------------- link and recompute


@jit
def landed(IS, F, R, B8, EHT, EHI, bid, rid, t):
    """The request's KV is on its decode instance: persisted blocks become ready replicas;
    the request joins the batch unless its prefix recompute is still pending."""
    n = IS[L.IP_N]
    F[IS[L.H_FT] + L.T_XE * n + rid] = t
    release_hold(IS, R, rid)  # --- admit: the pull is complete
    d = IS[IS[L.H_O] + L.O_DI * n + rid]
    fl = rid * L.NR + L.R_FLAGS
    if R[fl] & L.F_PERS and not R[fl] & L.F_RC:  # recomputed blocks: when rebuilt
        mark_ready(IS, R, B8, bid, rid, d)
    R[fl] |= L.F_XD
    if not R[fl] & L.F_RC:
        if ced.ready(IS, F, R, rid, d):  # --- ced: or its replay job first
            q_append(IS, R, L.DI0 + d * L.NDI + L.D_JQH, L.R_JQN, rid)
        interrupt(IS, F, EHT, EHI, d, t)


# ---------------------------------------------------------------- decode


@jit
def finish(IS, F, R, B32, B8, bid, bt, rid, d, t):
    """A sequence emitted its last token: free its KV and release its replica blocks."""
    n, io = IS[L.IP_N], IS[L.H_O]
    b = L.DI0 + d * L.NDI
    rr = rid * L.NR
    F[IS[L.H_FT] + L.T_DN * n + rid] = t
    IS[io + L.O_OUT * n + rid] = L.OUT_COMPLETED
    IS[b + L.D_B] -= 1
    IS[b + L.D_CTX] -= np.int64(R[rr + L.R_PROMPT]) + R[rr + L.R_OUTPUT]
    IS[b + L.D_PRIV] -= R[rr + L.R_PRIV]
    IS[b + L.D_ACT] -= np.int64(R[rr + L.R_PROMPT]) + R[rr + L.R_OUTPUT]  # --- kv routing
    IS[b + L.D_ADM] -= 1  # --- admit
    keep_answer(IS, F, B32, B8, bid, bt, rid, d)  # generated.py: before the chain's release
    ptr = IS[L.H_PTR]  # --- l3: its chain, then its answer, are written to the store
    l3_write_run(IS, F, B32, bid, bt, IS[ptr + rid], IS[ptr + rid + 1], t)
    l3_write_run(IS, F, B32, bid, bt, IS[ptr + n + 1 + rid], IS[ptr + n + 2 + rid], t)
    write_through_finished(IS, F, R, B32, B8, bid, rid, d, t)
    rs_release_chain(IS, R, B32, B8, bid, d, rid)
    IS[b + L.D_LOAD] -= 1
    IS[L.GI_INSYS] -= 1


@jit
def advance(IS, F, TLF, TLI, d, t, first_token_in_batch):
    """Bring instance ``d`` to the boundary at ``t`` (the k iterations it scheduled):
    busy time, batch area, token gaps, the timeline segment; returns the iteration count."""
    b = L.DI0 + d * L.NDI
    f = L.DF0 + d * L.NDF
    k = account_segment(IS, F, d, t)
    nb = IS[b + L.D_B]
    if k > 0 and IS[L.IP_GAPS]:
        record_gaps(IS, F, d, k, first_token_in_batch)
    if k > 0 and IS[L.IP_REC]:
        record(TLF, TLI, IS, L.REC_DECODE, d, F[f + L.DF_TSEG], t, nb, k, IS[b + L.D_CTX])
    it = IS[b + L.D_IT] + k
    IS[b + L.D_IT] = it
    IS[b + L.D_CTX] += nb * k
    F[f + L.DF_TSEG] = t
    IS[b + L.D_STALL] = 0
    F[f + L.DF_NEXT_T] = L.INF
    return it


@jit
def join_batch(IS, F, R, d, t):
    """Ready requests take free batch slots (FCFS); their first token ends the next
    iteration."""
    n, ft = IS[L.IP_N], IS[L.H_FT]
    b = L.DI0 + d * L.NDI
    jn = IS[L.H_JN]
    nj = 0
    maxb = IS[L.IP_MAXB]
    it = IS[b + L.D_IT]
    while IS[b + L.D_JQH] != -1 and IS[b + L.D_B] < maxb:
        rid = q_popleft(IS, R, b + L.D_JQH, L.R_JQN)
        IS[b + L.D_B] += 1
        if IS[L.IP_PAGED] and pg.rejoin(IS, F, R, d, it, rid, t):
            continue  # a resumed sequence: it keeps its decode start and first token
        IS[b + L.D_CTX] += R[rid * L.NR + L.R_PROMPT]
        batch_push(IS, d, it + R[rid * L.NR + L.R_OUTPUT], rid)
        F[ft + L.T_DS * n + rid] = t
        IS[jn + nj] = rid
        nj += 1
    if nj and IS[b + L.D_B] > 0:
        a1, s1, a2, s2, o = coeffs(F, IS[b + L.D_B], IS[b + L.D_CTX])
        first = t + series_time(a1, s1, a2, s2, o, 1)
        gaps = IS[L.IP_GAPS]
        for i in range(nj):
            F[ft + L.T_FT * n + IS[jn + i]] = first
            if gaps:  # the first iteration's gap runs from its start
                F[ft + L.T_LAST * n + IS[jn + i]] = t
    return nj


@jit
def decode_boundary(IS, F, R, B32, B8, EHT, EHI, TLF, TLI, bid, bt, d, version, t):
    b = L.DI0 + d * L.NDI
    if version != IS[b + L.D_VER]:
        return False  # superseded by an earlier boundary
    paged = IS[L.IP_PAGED] != 0
    if paged:  # the segment's last blocks (before advance: trims time its iterations)
        g = IS[b + L.D_IT] + IS[b + L.D_NK] - 1
        if pg.alloc_through(IS, F, R, B32, B8, d, g, t):
            mem_changed(IS, F, TLF, TLI, d, t)
    it = advance(IS, F, TLF, TLI, d, t, True)
    freed = False
    top = IS[L.H_DH] + 2 * IS[L.H_CAPB] * d
    while IS[b + L.D_HSZ] > 0 and IS[top] == it:
        rid = batch_pop(IS, d)
        finish(IS, F, R, B32, B8, bid, bt, rid, d, t)
        freed = True
    if freed:
        mem_changed(IS, F, TLF, TLI, d, t)
        drain_waiting(IS, F, R, B32, B8, EHT, EHI, TLF, TLI, bid, bt, d, t)
    if paged and IS[b + L.D_FQH] != -1:  # resumed sequences re-prefill first, as a stall
        pg.run_reprefills(IS, F, R, EHT, EHI, TLF, TLI, d, t)
        return True
    if IS[b + L.D_RQH] != -1:
        resolve_shared(IS, F, R, B8, bid, d, t)
    nj = join_batch(IS, F, R, d, t)
    if paged and IS[b + L.D_B] > 0:
        pg.prepare_iteration(IS, F, R, B32, B8, bid, d, t)
        mem_changed(IS, F, TLF, TLI, d, t)
        nj = pg.still_joining(IS, R, nj)
        if IS[b + L.D_B] == 0 and IS[b + L.D_PQH] != -1 and pg.nothing_held(IS, d):
            # it preempted every sequence and no admitted request holds KV or a replica
            # here: no completion will free memory, so the preempted retry now (as vLLM's
            # scheduler retries its waiting queue every step)
            drain_waiting(IS, F, R, B32, B8, EHT, EHI, TLF, TLI, bid, bt, d, t)
        if IS[b + L.D_B] == 0 and (IS[b + L.D_JQH] != -1 or IS[b + L.D_FQH] != -1):
            schedule(IS, F, EHT, EHI, d, t, 0)  # it preempted every sequence: the join
            return True  # queue (or the resumed sequences' re-prefills) goes next
    if IS[b + L.D_RQH] != -1:
        mixed_step(IS, F, R, B8, bid, EHT, EHI, TLF, TLI, d, t, nj)
        return True
    if paged and IS[b + L.D_B] > 0:
        pg.schedule_segment(IS, F, R, EHT, EHI, d, t)
    elif IS[b + L.D_B] > 0:
        run_to_next_finish(IS, F, EHT, EHI, d, t)
    return True
