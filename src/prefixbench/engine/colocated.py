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

from . import layout as L
from .batch import (
    account_segment,
    interrupt,
    record_gaps,
    run_to_next_finish,
    schedule,
    stall_gaps,
)
from .blocks import pc_insert, prefill_hit
from .disagg import least_loaded, mem_changed
from .jit import jit, sig
from .power import decode_record, power_work
from .queues import batch_pop, batch_push, push, step_append, wq_append, wq_remove
from .series import comm, op_time, prefill_step_time, weights_read
from .timeline import record
from .window import add_step_work, in_energy_window

# R fields in colocated mode: R_PRIV = KV reserved, R_NHIT = prompt tokens prefilled so far,
# R_PBN = next request of the step being built, R_CHUNK = its chunk in that step.
R_DONE = L.R_NHIT


@jit
def arrive(IS, F, R, EHT, EHI, rid, t):
    """Queue the prompt on the least loaded instance (ties: lowest index)."""
    n = IS[L.IP_N]
    if rid + 1 < n:
        push(EHT, EHI, IS, F[IS[L.H_FT] + L.T_ARR * n + rid + 1], L.EV_ARRIVAL, rid + 1, 0)
    IS[L.GI_INSYS] += 1
    i = least_loaded(IS, L.DI0 + L.D_LOAD, L.NDI, IS[L.IP_ND])
    io = IS[L.H_O]
    IS[io + L.O_PI * n + rid] = i
    IS[io + L.O_DI * n + rid] = i
    IS[L.DI0 + i * L.NDI + L.D_LOAD] += 1
    wq_append(IS, R, L.DI0 + i * L.NDI + L.D_WQH, rid)
    if IS[L.IP_WAIT]:
        push(EHT, EHI, IS, t + F[L.FP_WAIT_TO], L.EV_TIMEOUT, rid, 0)
    interrupt(IS, F, EHT, EHI, i, t)


@sig("void(int64[::1], float64[::1], int64, float64, int64)")
def reject(IS, F, rid, t, reason):
    n, io = IS[L.IP_N], IS[L.H_O]
    IS[io + L.O_OUT * n + rid] = L.OUT_REJECTED
    IS[io + L.O_REA * n + rid] = reason
    F[IS[L.H_FT] + L.T_DN * n + rid] = t
    IS[L.DI0 + IS[io + L.O_PI * n + rid] * L.NDI + L.D_LOAD] -= 1
    IS[L.GI_INSYS] -= 1


@jit
def timeout(IS, F, rid, t):
    """A prompt not admitted within the timeout gives up (it leaves the waiting queue when
    it reaches the head); returns False for a stale timeout."""
    n = IS[L.IP_N]
    if IS[IS[L.H_O] + L.O_OUT * n + rid] != L.OUT_PENDING or not math.isnan(
        F[IS[L.H_FT] + L.T_AD * n + rid]
    ):
        return False
    reject(IS, F, rid, t, L.R_TIMEOUT)
    return True


@sig(
    "void(int64[::1], float64[::1], int32[::1], int32[::1], float64[::1], int64[::1], "
    "int64[::1], int64[::1], int64, int64, float64, int64)"
)
def reserve(IS, F, R, B32, TLF, TLI, bid, bt, rid, i, t, need):
    """Admit ``rid``: reserve its KV and look its prompt up in the prefix cache."""
    n = IS[L.IP_N]
    b = L.DI0 + i * L.NDI
    IS[b + L.D_PRIV] += need
    R[rid * L.NR + L.R_PRIV] = need
    F[IS[L.H_FT] + L.T_AD * n + rid] = t
    mem_changed(IS, F, TLF, TLI, i, t)
    hit = prefill_hit(IS, R, B32, i, bid, bt, rid)
    IS[IS[L.H_O] + L.O_PH * n + rid] = hit
    R[rid * L.NR + R_DONE] = hit


@jit
def admit_head(IS, F, R, B32, TLF, TLI, bid, bt, i, t):
    """The waiting head if its KV fits (reserved now), skipping rejected ones; else -1."""
    n, io = IS[L.IP_N], IS[L.H_O]
    hp = L.DI0 + i * L.NDI + L.D_WQH
    budget = IS[L.IP_BUDGET]
    while IS[hp] != -1:
        rid = IS[hp]
        if IS[io + L.O_OUT * n + rid] == L.OUT_REJECTED:
            wq_remove(IS, R, hp, rid)
            continue
        if not math.isnan(F[IS[L.H_FT] + L.T_AD * n + rid]):
            return rid  # chunked: already admitted, prefill in progress
        need = R[rid * L.NR + L.R_PROMPT] + R[rid * L.NR + L.R_OUTPUT]
        if need > budget:
            wq_remove(IS, R, hp, rid)
            reject(IS, F, rid, t, L.R_TOO_LARGE)
            continue
        if IS[L.DI0 + i * L.NDI + L.D_PRIV] + need > budget:
            if IS[L.IP_WAIT] == 0:
                wq_remove(IS, R, hp, rid)
                reject(IS, F, rid, t, L.R_NO_MEMORY)
                continue
            return -1  # wait at the head until memory frees (or the timeout)
        reserve(IS, F, R, B32, TLF, TLI, bid, bt, rid, i, t, need)
        return rid
    return -1


@sig(
    "void(int64[::1], float64[::1], int32[::1], float64[::1], int64[::1], int64, int64, float64, "
    "boolean)"
)
def finish(IS, F, R, TLF, TLI, rid, i, t, joined):
    n = IS[L.IP_N]
    b = L.DI0 + i * L.NDI
    F[IS[L.H_FT] + L.T_DN * n + rid] = t
    IS[IS[L.H_O] + L.O_OUT * n + rid] = L.OUT_COMPLETED
    if joined:
        IS[b + L.D_B] -= 1
        IS[b + L.D_CTX] -= R[rid * L.NR + L.R_PROMPT] + R[rid * L.NR + L.R_OUTPUT]
    IS[b + L.D_PRIV] -= R[rid * L.NR + L.R_PRIV]
    mem_changed(IS, F, TLF, TLI, i, t)
    IS[b + L.D_LOAD] -= 1
    IS[L.GI_INSYS] -= 1


@jit
def prefilled(IS, F, R, B32, TLF, TLI, bid, bt, rid, i, end):
    """Prompt done at ``end``: its first token is emitted; it joins the batch for the rest."""
    n, ft = IS[L.IP_N], IS[L.H_FT]
    b = L.DI0 + i * L.NDI
    F[ft + L.T_PE * n + rid] = end
    F[ft + L.T_FT * n + rid] = end
    F[ft + L.T_LAST * n + rid] = end
    ptr = IS[L.H_PTR]
    i0, i1 = IS[ptr + rid], IS[ptr + rid + 1]
    if i1 > i0:
        pc_insert(IS, B32, i, bid, bt, i0, i1)
    out = R[rid * L.NR + L.R_OUTPUT]
    if out == 1:
        finish(IS, F, R, TLF, TLI, rid, i, end, False)
        return
    IS[b + L.D_B] += 1
    IS[b + L.D_CTX] += R[rid * L.NR + L.R_PROMPT] + 1
    # the boundary at ``end`` advances by 0 iterations, so ``it`` is already current
    batch_push(IS, i, IS[b + L.D_IT] + out - 1, rid)


@jit
def complete_prompts(IS, F, R, B32, TLF, TLI, bid, bt, i, t, end, first, chunked):
    """The step's prompts (a list through R_PBN from ``first``) that are now fully
    prefilled emit their first token at ``end``: all of them in a prefill step (which also
    starts them, at ``t``), those whose last chunk this was in a mixed step."""
    n = IS[L.IP_N]
    rid = first
    while rid != -1:
        nxt = R[rid * L.NR + L.R_PBN]
        if not chunked:
            F[IS[L.H_FT] + L.T_PS * n + rid] = t
            prefilled(IS, F, R, B32, TLF, TLI, bid, bt, rid, i, end)
        elif R[rid * L.NR + R_DONE] == R[rid * L.NR + L.R_PROMPT]:
            wq_remove(IS, R, L.DI0 + i * L.NDI + L.D_WQH, rid)
            prefilled(IS, F, R, B32, TLF, TLI, bid, bt, rid, i, end)
        rid = nxt


@jit
def prefill_step(IS, F, R, B32, TLF, TLI, bid, bt, i, t):
    """vLLM v0: prefill waiting prompts (whole) before the next decode iteration; returns
    the step's duration, or -1 when no prompt can start."""
    n = IS[L.IP_N]
    b = L.DI0 + i * L.NDI
    hp = b + L.D_WQH
    c0 = L.FP_DC
    lf, lmh, att, kv = F[c0 + L.C_LF], F[c0 + L.C_LMH], F[c0 + L.C_ATT], F[c0 + L.C_KV]
    maxb, budget = IS[L.IP_MAXB], IS[L.IP_TOKB]
    first, last, count = -1, -1, 0
    new_sum = 0
    gemm, attn = 0.0, 0.0
    kv_io = 0.0
    while IS[b + L.D_B] + count < maxb:
        rid = admit_head(IS, F, R, B32, TLF, TLI, bid, bt, i, t)
        if rid == -1:
            break
        hit = IS[IS[L.H_O] + L.O_PH * n + rid]
        prompt = R[rid * L.NR + L.R_PROMPT]
        n_new = prompt - hit
        if count and new_sum + n_new > budget:
            break
        wq_remove(IS, R, hp, rid)
        first = step_append(R, first, last, rid)
        last = rid
        count += 1
        new_sum += n_new
        gemm += n_new * lf + lmh
        attn += att * (n_new * hit + n_new * (n_new + 1) / 2.0)
        kv_io += kv * prompt
    if count == 0:
        return -1.0
    flops = gemm + attn
    dur = prefill_step_time(F, c0, gemm, attn, new_sum, kv_io)
    wb = weights_read(F, c0, new_sum) + kv_io
    add_step_work(F, L.DF0 + i * L.NDF + L.DF_FLOPS, flops, wb, t, t + dur)
    if in_energy_window(F, t):
        power_work(  # --- power
            F, decode_record(F, i), c0, F[c0 + L.C_FRP], flops,
            weights_read(F, c0, new_sum) + kv_io, dur,
        )  # fmt: skip
    end = t + dur
    stall_gaps(IS, F, i, end, False)  # running sequences stall for the whole prefill step
    complete_prompts(IS, F, R, B32, TLF, TLI, bid, bt, i, t, end, first, False)
    if IS[L.IP_REC]:
        record(TLF, TLI, IS, L.REC_CO_PREFILL, i, t, end, count, new_sum, 0)
    return dur


@jit
def chunk_candidate(IS, F, R, B32, TLF, TLI, bid, bt, i, t, cur):
    """The next waiting prompt to take a chunk from, after waiting entry ``cur`` (-1: the
    head, admitted on the way), admitted now if it is not yet; -1 when none can go."""
    if cur == -1:
        return admit_head(IS, F, R, B32, TLF, TLI, bid, bt, i, t)
    n, ft = IS[L.IP_N], IS[L.H_FT]
    rid = R[cur * L.NR + L.R_WQN]
    while rid != -1 and IS[IS[L.H_O] + L.O_OUT * n + rid] == L.OUT_REJECTED:
        rid = R[rid * L.NR + L.R_WQN]
    if rid != -1 and math.isnan(F[ft + L.T_AD * n + rid]):
        # admit further prompts in FIFO order, stopping at the first that does not fit
        b, budget = L.DI0 + i * L.NDI, IS[L.IP_BUDGET]
        need = R[rid * L.NR + L.R_PROMPT] + R[rid * L.NR + L.R_OUTPUT]
        if need > budget or IS[b + L.D_PRIV] + need > budget:
            return -1
        reserve(IS, F, R, B32, TLF, TLI, bid, bt, rid, i, t, need)
    return rid


@jit
def gather_chunks(IS, F, R, B32, TLF, TLI, bid, bt, i, t):
    """Fill the step's token budget with prefill chunks of waiting prompts (FIFO), linked
    from ``first``; returns (first, chunks, chunk tokens, GEMM FLOPs, attention FLOPs, KV
    bytes) of the step, the running batch's decode tokens included."""
    n, ft = IS[L.IP_N], IS[L.H_FT]
    b = L.DI0 + i * L.NDI
    c0 = L.FP_DC
    lf, lmh, att, kv = F[c0 + L.C_LF], F[c0 + L.C_LMH], F[c0 + L.C_ATT], F[c0 + L.C_KV]
    maxb = IS[L.IP_MAXB]
    nb, ctx = IS[b + L.D_B], IS[b + L.D_CTX]
    room = IS[L.IP_TOKB] - nb
    gemm, attn = nb * (lf + lmh), att * ctx
    kv_io = kv * ctx
    first, last, count = -1, -1, 0
    chunk_sum = 0
    cur = -1  # the waiting entry before the next candidate (-1: the head)
    while room > 0 and nb + count < maxb:
        rid = chunk_candidate(IS, F, R, B32, TLF, TLI, bid, bt, i, t, cur)
        if rid == -1:
            break
        done = R[rid * L.NR + R_DONE]
        m = R[rid * L.NR + L.R_PROMPT] - done
        if room < m:
            m = room
        first = step_append(R, first, last, rid)
        R[rid * L.NR + L.R_CHUNK] = m
        last = rid
        count += 1
        chunk_sum += m
        if math.isnan(F[ft + L.T_PS * n + rid]):
            F[ft + L.T_PS * n + rid] = t
        gemm += m * lf
        attn += att * (m * done + m * (m + 1) / 2.0)
        kv_io += kv * (done + m)
        room -= m
        cur = rid
    return first, count, chunk_sum, gemm, attn, kv_io


@jit
def finishing_chunks(R, first):
    """Chunks of the step that complete their prompt (each computes the LM head)."""
    finishing = 0
    rid = first
    while rid != -1:
        if R[rid * L.NR + R_DONE] + R[rid * L.NR + L.R_CHUNK] == R[rid * L.NR + L.R_PROMPT]:
            finishing += 1
        rid = R[rid * L.NR + L.R_PBN]
    return finishing


@jit
def price_mixed(F, i, t, nb, chunk_sum, gemm, attn, kv_io):
    """The mixed step's operators (GEMMs at its nb + chunk tokens, attention) plus its
    fixed cost and fabric traffic, its work and power counted when ``t`` is in the
    window."""
    c0 = L.FP_DC
    tokens = float(nb + chunk_sum)
    wbytes = weights_read(F, c0, nb + chunk_sum)
    dur = op_time(F, c0, gemm, tokens, F[c0 + L.C_FRD], wbytes, attn, kv_io) + F[c0 + L.C_DOV]
    dur += comm(F, c0, tokens)
    flops = gemm + attn
    pw = L.DF0 + i * L.NDF + L.DF_FLOPS
    add_step_work(F, pw, flops, weights_read(F, c0, nb + chunk_sum) + kv_io, t, t + dur)
    if in_energy_window(F, t):
        power_work(  # --- power
            F, decode_record(F, i), c0, F[c0 + L.C_FRD], flops,
            weights_read(F, c0, nb + chunk_sum) + kv_io, dur,
        )  # fmt: skip
    return dur


@jit
def chunked_step(IS, F, R, B32, TLF, TLI, bid, bt, i, t):
    """Sarathi-Serve: one decode token per running sequence plus prefill chunks of waiting
    prompts (FIFO) in the step's token budget; returns its duration, or -1 when no prompt
    is waiting (plain decode: the closed form handles it)."""
    b = L.DI0 + i * L.NDI
    nb = IS[b + L.D_B]
    first, count, chunk_sum, gemm, attn, kv_io = gather_chunks(
        IS, F, R, B32, TLF, TLI, bid, bt, i, t
    )
    if count == 0:
        return -1.0
    gemm += finishing_chunks(R, first) * F[L.FP_DC + L.C_LMH]
    dur = price_mixed(F, i, t, nb, chunk_sum, gemm, attn, kv_io)
    end = t + dur
    stall_gaps(IS, F, i, end, True)  # running sequences emit one token in this step
    IS[b + L.D_IT] += 1  # the step is one decode iteration for the running batch
    IS[b + L.D_CTX] += nb
    rid = first
    while rid != -1:
        R[rid * L.NR + R_DONE] += R[rid * L.NR + L.R_CHUNK]
        rid = R[rid * L.NR + L.R_PBN]
    complete_prompts(IS, F, R, B32, TLF, TLI, bid, bt, i, t, end, first, True)
    if IS[L.IP_REC]:
        record(TLF, TLI, IS, L.REC_CO_MIXED, i, t, end, nb, chunk_sum, 0)
    return dur


@jit
def boundary(IS, F, R, B32, EHT, EHI, TLF, TLI, bid, bt, i, version, t):
    """Instance ``i`` reaches a boundary it scheduled: finish sequences, then run a prefill
    (or mixed) step if a prompt can start, else decode on to the next finish."""
    b = L.DI0 + i * L.NDI
    if version != IS[b + L.D_VER]:
        return
    f = L.DF0 + i * L.NDF
    k = account_segment(IS, F, i, t)
    nb = IS[b + L.D_B]
    if k > 0:
        record_gaps(IS, F, i, k, False)
        if IS[L.IP_REC]:
            record(TLF, TLI, IS, L.REC_DECODE, i, F[f + L.DF_TSEG], t, nb, k, IS[b + L.D_CTX])
    IS[b + L.D_IT] += k
    IS[b + L.D_CTX] += nb * k
    F[f + L.DF_TSEG] = t
    IS[b + L.D_STALL] = 0
    F[f + L.DF_NEXT_T] = math.inf
    it = IS[b + L.D_IT]
    top = IS[L.H_DH] + 2 * IS[L.H_CAPB] * i
    while IS[b + L.D_HSZ] > 0 and IS[top] == it:
        rid = batch_pop(IS, i)
        finish(IS, F, R, TLF, TLI, rid, i, t, True)
    if IS[L.IP_MODE] == L.MODE_PRIORITY:
        dur = prefill_step(IS, F, R, B32, TLF, TLI, bid, bt, i, t)
    else:
        dur = chunked_step(IS, F, R, B32, TLF, TLI, bid, bt, i, t)
    if dur >= 0.0:
        IS[b + L.D_STALL] = 1
        schedule(IS, F, EHT, EHI, i, t + dur, 0)
        return
    if IS[b + L.D_B] > 0:
        run_to_next_finish(IS, F, EHT, EHI, i, t)
