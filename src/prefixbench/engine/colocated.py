"""The colocated mode's event handlers: every instance runs both prefill and decode.

Two schedulers, on the same total instance count as the disaggregated system:

- ``prefill_priority`` (vLLM v0 style): at each iteration boundary, waiting prompts are
  prefilled first, whole, up to the step token budget; every running sequence stalls for
  the whole prefill step. The prefill step emits each prompt's first token.
- ``chunked`` (Sarathi-Serve style): each step carries one decode token per running sequence
  plus prefill chunks of waiting prompts filling the rest of a per-step token budget; a
  prompt emits its first token at the end of the step finishing its last chunk.

When no prompt is waiting, the batch advances in closed form exactly as a disaggregated
decode instance (batch.py). There is no hand-off, so the prefix policies do not apply:
each instance keeps its own prefix cache (prefill work skipped on hits) and every request
reserves its own KV, prompt plus output, at admission, before its prefill. Waiting prompts
are admitted in FIFO order; on_full=reject rejects the head that does not fit, on_full=wait
keeps it at the head until memory frees or its timeout (counted from arrival) passes.
"""

from __future__ import annotations

import math

from .batch import interrupt, record_gaps, run_to_next_finish, schedule, stall_gaps
from .blocks import pc_insert, pc_match
from .jit import jit, sig
from .layout import (
    C_ATT,
    C_BR,
    C_DOV,
    C_FRD,
    C_FRP,
    C_KV,
    C_LF,
    C_LMH,
    C_POV,
    D_B,
    D_CTX,
    D_HSZ,
    D_IT,
    D_LOAD,
    D_NK,
    D_PRIV,
    D_STALL,
    D_VER,
    D_WQH,
    DF0,
    DF_BUSY,
    DF_NEXT_T,
    DF_TSEG,
    DI0,
    EV_ARRIVAL,
    EV_TIMEOUT,
    FP_DC,
    FP_TWARM,
    FP_WAIT_TO,
    G_BATCH_AREA,
    GI_INSYS,
    GI_PEAK_USED,
    H_CAPB,
    H_DH,
    H_FT,
    H_O,
    H_PTR,
    IP_BUDGET,
    IP_MAXB,
    IP_MODE,
    IP_N,
    IP_ND,
    IP_REC,
    IP_TOKB,
    IP_WAIT,
    MODE_PRIORITY,
    NDF,
    NDI,
    NR,
    O_DI,
    O_OUT,
    O_PH,
    O_PI,
    O_REA,
    OUT_COMPLETED,
    OUT_PENDING,
    OUT_REJECTED,
    R_CHUNK,
    R_NHIT,
    R_NO_MEMORY,
    R_OUTPUT,
    R_PBN,
    R_PRIV,
    R_PROMPT,
    R_TIMEOUT,
    R_TOO_LARGE,
    R_WQN,
    REC_CO_MIXED,
    REC_CO_PREFILL,
    REC_DECODE,
    T_AD,
    T_ARR,
    T_DN,
    T_FT,
    T_LAST,
    T_PE,
    T_PS,
)
from .queues import batch_pop, batch_push, push, wq_append, wq_remove
from .series import roofline, weights_read
from .timeline import record

# R fields in colocated mode: R_PRIV = KV reserved, R_NHIT = prompt tokens prefilled so far,
# R_PBN = next request of the step being built, R_CHUNK = its chunk in that step.
R_DONE = R_NHIT


@jit
def arrive(IS, F, R, EHT, EHI, rid, t):
    """Queue the prompt on the least loaded instance (ties: lowest index)."""
    n = IS[IP_N]
    if rid + 1 < n:
        push(EHT, EHI, IS, F[IS[H_FT] + T_ARR * n + rid + 1], EV_ARRIVAL, rid + 1, 0)
    IS[GI_INSYS] += 1
    i = 0
    for j in range(1, IS[IP_ND]):
        if IS[DI0 + j * NDI + D_LOAD] < IS[DI0 + i * NDI + D_LOAD]:
            i = j
    io = IS[H_O]
    IS[io + O_PI * n + rid] = i
    IS[io + O_DI * n + rid] = i
    IS[DI0 + i * NDI + D_LOAD] += 1
    wq_append(IS, R, DI0 + i * NDI + D_WQH, rid)
    if IS[IP_WAIT]:
        push(EHT, EHI, IS, t + F[FP_WAIT_TO], EV_TIMEOUT, rid, 0)
    interrupt(IS, F, EHT, EHI, i, t)


@sig("void(int64[::1], float64[::1], int64, float64, int64)")
def reject(IS, F, rid, t, reason):
    n, io = IS[IP_N], IS[H_O]
    IS[io + O_OUT * n + rid] = OUT_REJECTED
    IS[io + O_REA * n + rid] = reason
    F[IS[H_FT] + T_DN * n + rid] = t
    IS[DI0 + IS[io + O_PI * n + rid] * NDI + D_LOAD] -= 1
    IS[GI_INSYS] -= 1


@jit
def timeout(IS, F, rid, t):
    """A prompt not admitted within the timeout gives up (it leaves the waiting queue when
    it reaches the head); returns False for a stale timeout."""
    n = IS[IP_N]
    if IS[IS[H_O] + O_OUT * n + rid] != OUT_PENDING or not math.isnan(F[IS[H_FT] + T_AD * n + rid]):
        return False
    reject(IS, F, rid, t, R_TIMEOUT)
    return True


@sig(
    "void(int64[::1], float64[::1], int32[::1], int32[::1], int64[::1], int64[::1], int64, int64, float64, int64)"
)
def reserve(IS, F, R, B32, bid, bt, rid, i, t, need):
    """Admit ``rid``: reserve its KV and look its prompt up in the prefix cache."""
    n = IS[IP_N]
    b = DI0 + i * NDI
    IS[b + D_PRIV] += need
    R[rid * NR + R_PRIV] = need
    F[IS[H_FT] + T_AD * n + rid] = t
    if IS[b + D_PRIV] > IS[GI_PEAK_USED]:
        IS[GI_PEAK_USED] = IS[b + D_PRIV]
    ptr = IS[H_PTR]
    i0, i1 = IS[ptr + rid], IS[ptr + rid + 1]
    hit = 0
    if i1 > i0:
        hit = pc_match(IS, B32, i, bid, bt, i0, i1)
        prompt = R[rid * NR + R_PROMPT]
        if prompt - 1 < hit:
            hit = prompt - 1
    IS[IS[H_O] + O_PH * n + rid] = hit
    R[rid * NR + R_DONE] = hit


@jit
def admit_head(IS, F, R, B32, bid, bt, i, t):
    """The waiting head if its KV fits (reserved now), skipping rejected ones; else -1."""
    n, io = IS[IP_N], IS[H_O]
    hp = DI0 + i * NDI + D_WQH
    budget = IS[IP_BUDGET]
    while IS[hp] != -1:
        rid = IS[hp]
        if IS[io + O_OUT * n + rid] == OUT_REJECTED:
            wq_remove(IS, R, hp, rid)
            continue
        if not math.isnan(F[IS[H_FT] + T_AD * n + rid]):
            return rid  # chunked: already admitted, prefill in progress
        need = R[rid * NR + R_PROMPT] + R[rid * NR + R_OUTPUT]
        if need > budget:
            wq_remove(IS, R, hp, rid)
            reject(IS, F, rid, t, R_TOO_LARGE)
            continue
        if IS[DI0 + i * NDI + D_PRIV] + need > budget:
            if IS[IP_WAIT] == 0:
                wq_remove(IS, R, hp, rid)
                reject(IS, F, rid, t, R_NO_MEMORY)
                continue
            return -1  # wait at the head until memory frees (or the timeout)
        reserve(IS, F, R, B32, bid, bt, rid, i, t, need)
        return rid
    return -1


@sig("void(int64[::1], float64[::1], int32[::1], int64, int64, float64, boolean)")
def finish(IS, F, R, rid, i, t, joined):
    n = IS[IP_N]
    b = DI0 + i * NDI
    F[IS[H_FT] + T_DN * n + rid] = t
    IS[IS[H_O] + O_OUT * n + rid] = OUT_COMPLETED
    if joined:
        IS[b + D_B] -= 1
        IS[b + D_CTX] -= R[rid * NR + R_PROMPT] + R[rid * NR + R_OUTPUT]
    IS[b + D_PRIV] -= R[rid * NR + R_PRIV]
    IS[b + D_LOAD] -= 1
    IS[GI_INSYS] -= 1


@jit
def prefilled(IS, F, R, B32, bid, bt, rid, i, end):
    """Prompt done at ``end``: its first token is emitted; it joins the batch for the rest."""
    n, ft = IS[IP_N], IS[H_FT]
    b = DI0 + i * NDI
    F[ft + T_PE * n + rid] = end
    F[ft + T_FT * n + rid] = end
    F[ft + T_LAST * n + rid] = end
    ptr = IS[H_PTR]
    i0, i1 = IS[ptr + rid], IS[ptr + rid + 1]
    if i1 > i0:
        pc_insert(IS, B32, i, bid, bt, i0, i1)
    out = R[rid * NR + R_OUTPUT]
    if out == 1:
        finish(IS, F, R, rid, i, end, False)
        return
    IS[b + D_B] += 1
    IS[b + D_CTX] += R[rid * NR + R_PROMPT] + 1
    # the boundary at ``end`` advances by 0 iterations, so ``it`` is already current
    batch_push(IS, i, IS[b + D_IT] + out - 1, rid)


@jit
def prefill_step(IS, F, R, B32, TLF, TLI, bid, bt, i, t):
    """vLLM v0: prefill waiting prompts (whole) before the next decode iteration; returns
    the step's duration, or -1 when no prompt can start."""
    n = IS[IP_N]
    b = DI0 + i * NDI
    hp = b + D_WQH
    c0 = FP_DC
    lf, lmh, att, kv = F[c0 + C_LF], F[c0 + C_LMH], F[c0 + C_ATT], F[c0 + C_KV]
    maxb, budget = IS[IP_MAXB], IS[IP_TOKB]
    first, last, count = -1, -1, 0
    new_sum = 0
    flops = 0.0
    kv_io = 0.0
    while IS[b + D_B] + count < maxb:
        rid = admit_head(IS, F, R, B32, bid, bt, i, t)
        if rid == -1:
            break
        hit = IS[IS[H_O] + O_PH * n + rid]
        prompt = R[rid * NR + R_PROMPT]
        n_new = prompt - hit
        if count and new_sum + n_new > budget:
            break
        wq_remove(IS, R, hp, rid)
        if first == -1:
            first = rid
        else:
            R[last * NR + R_PBN] = rid
        R[rid * NR + R_PBN] = -1
        last = rid
        count += 1
        new_sum += n_new
        flops += n_new * lf + lmh + att * (n_new * hit + n_new * (n_new + 1) / 2.0)
        kv_io += kv * prompt
    if count == 0:
        return -1.0
    dur = roofline(
        flops, weights_read(F, c0, new_sum) + kv_io, F[c0 + C_FRP], F[c0 + C_BR], F[c0 + C_POV]
    )
    end = t + dur
    stall_gaps(IS, F, i, end, False)  # running sequences stall for the whole prefill step
    ft = IS[H_FT]
    rid = first
    while rid != -1:
        F[ft + T_PS * n + rid] = t
        nxt = R[rid * NR + R_PBN]
        prefilled(IS, F, R, B32, bid, bt, rid, i, end)
        rid = nxt
    if IS[IP_REC]:
        record(TLF, TLI, IS, REC_CO_PREFILL, i, t, end, count, new_sum, 0)
    return dur


@jit
def chunked_step(IS, F, R, B32, TLF, TLI, bid, bt, i, t):
    """Sarathi-Serve: one decode token per running sequence plus prefill chunks of waiting
    prompts (FIFO) in the step's token budget; returns its duration, or -1 when no prompt
    is waiting (plain decode: the closed form handles it)."""
    n, ft = IS[IP_N], IS[H_FT]
    b = DI0 + i * NDI
    c0 = FP_DC
    lf, lmh, att, kv = F[c0 + C_LF], F[c0 + C_LMH], F[c0 + C_ATT], F[c0 + C_KV]
    maxb, budget = IS[IP_MAXB], IS[IP_BUDGET]
    nb, ctx = IS[b + D_B], IS[b + D_CTX]
    room = IS[IP_TOKB] - nb
    flops = nb * (lf + lmh) + att * ctx
    kv_io = kv * ctx
    first, last, count = -1, -1, 0
    chunk_sum = 0
    cur = -1  # the waiting entry before the next candidate (-1: the head)
    while room > 0 and nb + count < maxb:
        if cur == -1:
            rid = admit_head(IS, F, R, B32, bid, bt, i, t)
            if rid == -1:
                break
        else:
            rid = R[cur * NR + R_WQN]
            if rid == -1:
                break
            if IS[IS[H_O] + O_OUT * n + rid] == OUT_REJECTED:
                cur = rid
                continue
            if math.isnan(F[ft + T_AD * n + rid]):
                # admit further prompts in FIFO order, stopping at the first that does not fit
                need = R[rid * NR + R_PROMPT] + R[rid * NR + R_OUTPUT]
                if need > budget or IS[b + D_PRIV] + need > budget:
                    break
                reserve(IS, F, R, B32, bid, bt, rid, i, t, need)
        done = R[rid * NR + R_DONE]
        m = R[rid * NR + R_PROMPT] - done
        if room < m:
            m = room
        if first == -1:
            first = rid
        else:
            R[last * NR + R_PBN] = rid
        R[rid * NR + R_PBN] = -1
        R[rid * NR + R_CHUNK] = m
        last = rid
        count += 1
        chunk_sum += m
        if math.isnan(F[ft + T_PS * n + rid]):
            F[ft + T_PS * n + rid] = t
        flops += m * lf + att * (m * done + m * (m + 1) / 2.0)
        kv_io += kv * (done + m)
        room -= m
        cur = rid
    if count == 0:
        return -1.0
    finishing = 0
    rid = first
    while rid != -1:
        if R[rid * NR + R_DONE] + R[rid * NR + R_CHUNK] == R[rid * NR + R_PROMPT]:
            finishing += 1
        rid = R[rid * NR + R_PBN]
    flops += finishing * lmh
    dur = roofline(
        flops,
        weights_read(F, c0, nb + chunk_sum) + kv_io,
        F[c0 + C_FRD],
        F[c0 + C_BR],
        F[c0 + C_DOV],
    )
    end = t + dur
    stall_gaps(IS, F, i, end, True)  # running sequences emit one token in this step
    IS[b + D_IT] += 1  # the step is one decode iteration for the running batch
    IS[b + D_CTX] += nb
    rid = first
    while rid != -1:
        R[rid * NR + R_DONE] += R[rid * NR + R_CHUNK]
        rid = R[rid * NR + R_PBN]
    rid = first
    while rid != -1:
        nxt = R[rid * NR + R_PBN]
        if R[rid * NR + R_DONE] == R[rid * NR + R_PROMPT]:
            wq_remove(IS, R, b + D_WQH, rid)
            prefilled(IS, F, R, B32, bid, bt, rid, i, end)
        rid = nxt
    if IS[IP_REC]:
        record(TLF, TLI, IS, REC_CO_MIXED, i, t, end, nb, chunk_sum, 0)
    return dur


@jit
def boundary(IS, F, R, B32, EHT, EHI, TLF, TLI, bid, bt, i, version, t):
    """Instance ``i`` reaches a boundary it scheduled: finish sequences, then run a prefill
    (or mixed) step if a prompt can start, else decode on to the next finish."""
    b = DI0 + i * NDI
    if version != IS[b + D_VER]:
        return
    f = DF0 + i * NDF
    k = IS[b + D_NK]
    nb = IS[b + D_B]
    if (nb > 0 or IS[b + D_STALL]) and F[f + DF_TSEG] >= F[FP_TWARM]:
        F[f + DF_BUSY] += t - F[f + DF_TSEG]
        F[G_BATCH_AREA] += nb * (t - F[f + DF_TSEG])
    if k > 0:
        record_gaps(IS, F, i, k, False)
        if IS[IP_REC]:
            record(TLF, TLI, IS, REC_DECODE, i, F[f + DF_TSEG], t, nb, k, IS[b + D_CTX])
    IS[b + D_IT] += k
    IS[b + D_CTX] += nb * k
    F[f + DF_TSEG] = t
    IS[b + D_STALL] = 0
    F[f + DF_NEXT_T] = math.inf
    it = IS[b + D_IT]
    top = IS[H_DH] + 2 * IS[H_CAPB] * i
    while IS[b + D_HSZ] > 0 and IS[top] == it:
        rid = batch_pop(IS, i)
        finish(IS, F, R, rid, i, t, True)
    if IS[IP_MODE] == MODE_PRIORITY:
        dur = prefill_step(IS, F, R, B32, TLF, TLI, bid, bt, i, t)
    else:
        dur = chunked_step(IS, F, R, B32, TLF, TLI, bid, bt, i, t)
    if dur >= 0.0:
        IS[b + D_STALL] = 1
        schedule(IS, F, EHT, EHI, i, t + dur, 0)
        return
    if IS[b + D_B] > 0:
        run_to_next_finish(IS, F, EHT, EHI, i, t)
