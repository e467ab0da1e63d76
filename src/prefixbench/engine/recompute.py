"""Prefix recompute on the decode instance as real engines run it (docs/model.md §1.9).

A recompute job (``recompute_on_decode``: the prefix tokens the prefill node took from its
cache) runs as chunked prefill mixed into the decode iterations, as vLLM's and SGLang's
chunked prefill do: while jobs are queued, every iteration carries one decode token per
running sequence plus recompute chunks, first come first served, filling the rest of a
per-iteration token budget (``cluster.chunk_token_budget``; with speculative decoding the
batch's draft and verify tokens take their share first, engine/mixed.py prices the
iteration); jobs of several requests share an iteration. A job whose leading blocks
another queued or running job on the same instance is already computing does not compute them again: it waits until that job has
computed them (its shared tokens count as done at the end of the iteration that finishes
them, or at once if they already are) and then computes the rest itself.

Everything about an iteration is decided at its start (its chunks, its duration, which
jobs it finishes); the instance's next boundary is its end. A job finished by it enters
the join queue at its start (so it goes ahead of a request whose KV lands during it) and
joins at its end, with its KV landed.
"""

from __future__ import annotations

import math

from . import ced
from . import layout as L
from .batch import itl_add, schedule
from .jit import jit
from .mixed import chunk_add, chunk_room, mixed_close, mixed_open
from .power import decode_record, power_work
from .queues import job_enqueue, q_append
from .timeline import record
from .window import add_step_work, in_energy_window


@jit
def queue_job(IS, R, bid, bt, rid, d, m, h):
    """Queue ``rid``'s job of ``m`` prefix tokens after its ``h`` resident ones (cost_aware;
    0 otherwise) on ``d``, deduplicated against the jobs queued or running there (the one
    sharing the most leading tokens; ties: the earliest); returns the tokens it computes
    itself."""
    m += h
    b = L.DI0 + d * L.NDI
    ptr = IS[L.H_PTR]
    i0, i1 = IS[ptr + rid], IS[ptr + rid + 1]
    best, best_s = -1, 0
    a = IS[b + L.D_RQH]
    while a != -1:
        if ced.is_replay(R, a):  # --- ced: a replay window is the prompt's own
            a = R[a * L.NR + L.R_RQN]
            continue
        j0, j1 = IS[ptr + a], IS[ptr + a + 1]
        cap = R[a * L.NR + L.R_RTOT]
        if m < cap:
            cap = m
        s = 0
        k = 0
        while i0 + k < i1 and j0 + k < j1 and bid[i0 + k] == bid[j0 + k] and s < cap:
            s += bt[i0 + k]
            k += 1
        if s > cap:
            s = cap
        if s > best_s:
            best, best_s = a, s
        a = R[a * L.NR + L.R_RQN]
    if best_s <= h:  # nothing to take from another job beyond what is resident
        best, best_s = -1, 0
    job_enqueue(IS, R, d, rid, h, best, best_s, m)
    return m - max(best_s, h)


@jit
def _unlink(IS, R, b, prev, a, nxt):
    """Job ``a`` (after ``prev``, before ``nxt``) leaves decode ``b``'s recompute queue."""
    if prev == -1:
        IS[b + L.D_RQH] = nxt
    else:
        R[prev * L.NR + L.R_RQN] = nxt
    if nxt == -1:
        IS[b + L.D_RQT] = prev


@jit
def mark_ready(IS, R, B8, bid, rid, d):
    """The request's persisted blocks hold their KV: they give hits from now on."""
    ptr, pflag = IS[L.H_PTR], IS[L.H_PFLAG]
    st = d * IS[L.IP_U]
    for j in range(IS[ptr + rid] + R[rid * L.NR + L.R_NHIT], IS[ptr + rid + 1]):
        if B8[pflag + j]:
            B8[st + bid[j]] |= L.ST_READY


@jit
def _done(IS, F, R, B8, bid, b, rid, t_end):
    """``rid``'s job is finished at ``t_end``: it joins once its KV has landed (cost_aware:
    its kept blocks hold their KV from then on)."""
    n = IS[L.IP_N]
    F[IS[L.H_FT] + L.T_RE * n + rid] = t_end
    fl = rid * L.NR + L.R_FLAGS
    R[fl] &= ~L.F_RC
    if R[fl] & L.F_XD:
        if R[fl] & L.F_PERS:
            mark_ready(IS, R, B8, bid, rid, (b - L.DI0) // L.NDI)
        if ced.ready(IS, F, R, rid, (b - L.DI0) // L.NDI):  # --- ced: or replay first
            q_append(IS, R, b + L.D_JQH, L.R_JQN, rid)


@jit
def resolve_shared(IS, F, R, B8, bid, d, t):
    """At a boundary: jobs whose shared tokens the job they wait on has computed by now take
    them as done; a job left with nothing to compute finishes here (and can join now)."""
    n, ft = IS[L.IP_N], IS[L.H_FT]
    b = L.DI0 + d * L.NDI
    prev = -1
    a = IS[b + L.D_RQH]
    while a != -1:
        ar = a * L.NR
        nxt = R[ar + L.R_RQN]
        dep = R[ar + L.R_RDEP]
        if dep != -1 and R[dep * L.NR + L.R_RDONE] >= R[ar + L.R_RSH]:
            R[ar + L.R_RDONE] = R[ar + L.R_RSH]
            R[ar + L.R_RDEP] = -1
            if math.isnan(F[ft + L.T_RS * n + a]):
                F[ft + L.T_RS * n + a] = t
            if R[ar + L.R_RDONE] == R[ar + L.R_RTOT]:
                _unlink(IS, R, b, prev, a, nxt)
                _done(IS, F, R, B8, bid, b, a, t)
                a = nxt
                continue
        prev = a
        a = nxt


@jit
def mixed_gaps(IS, F, d, end):
    """Every running sequence of ``d`` emits a token at ``end``; for the ones that joined
    at the step's start it is their first (``t_first_token`` is ``end``), which is no gap."""
    b = L.DI0 + d * L.NDI
    n, ft = IS[L.IP_N], IS[L.H_FT]
    rb = IS[L.H_DH] + 2 * IS[L.H_CAPB] * d + IS[L.H_CAPB]
    for i in range(IS[b + L.D_HSZ]):
        rid = IS[rb + i]
        if F[ft + L.T_FT * n + rid] != end:
            g = end - F[ft + L.T_LAST * n + rid]
            if g > F[ft + L.T_GAP * n + rid]:
                F[ft + L.T_GAP * n + rid] = g
            if rid >= F[L.G_ITL_NW]:
                itl_add(F, g, 1)
        F[ft + L.T_LAST * n + rid] = end


@jit
def mixed_step(IS, F, R, B8, bid, EHT, EHI, TLF, TLI, d, t, nj):
    """One decode iteration of ``d``'s batch plus recompute chunks in the token budget (the
    ``nj`` requests that joined at ``t`` emit their first token at its end)."""
    n, ft = IS[L.IP_N], IS[L.H_FT]
    b = L.DI0 + d * L.NDI
    c0 = L.FP_DC
    nb, ctx = IS[b + L.D_B], IS[b + L.D_CTX]
    room = chunk_room(IS, F, nb)
    gemm, attn, kv_io = mixed_open(F, nb, ctx)
    chunks = 0
    a = IS[b + L.D_RQH]
    while a != -1:  # chunks, first come first served
        ar = a * L.NR
        R[ar + L.R_RCH] = 0
        if R[ar + L.R_RDEP] == -1 and room > 0:
            done = R[ar + L.R_RDONE]
            m = R[ar + L.R_RTOT] - done
            if room < m:
                m = room
            R[ar + L.R_RCH] = m
            chunks += m
            room -= m
            gemm, attn, kv_io = chunk_add(
                F, nb, gemm, attn, kv_io, m, done, not ced.is_replay(R, a)
            )
        a = R[ar + L.R_RQN]
    dur, flops, bytes_ = mixed_close(F, nb, ctx, chunks, gemm, attn, kv_io)
    end = t + dur
    # MFU/MBU: steps started in the steady window, clipped at its end (window.py)
    add_step_work(F, L.DF0 + d * L.NDF + L.DF_FLOPS, flops, bytes_, t, end)
    if in_energy_window(F, t):  # energy: to the end of the run (docs/model.md §2.11)
        power_work(F, decode_record(F, d), c0, F[c0 + L.C_FRD], flops, bytes_, dur)
    prev = -1
    a = IS[b + L.D_RQH]
    while a != -1:  # what the step computes, known at its start
        ar = a * L.NR
        nxt = R[ar + L.R_RQN]
        moved = R[ar + L.R_RCH] > 0
        R[ar + L.R_RDONE] += R[ar + L.R_RCH]
        dep = R[ar + L.R_RDEP]
        if dep != -1 and R[dep * L.NR + L.R_RDONE] >= R[ar + L.R_RSH]:
            R[ar + L.R_RDONE] = R[ar + L.R_RSH]
            R[ar + L.R_RDEP] = -1
            moved = True
        if moved and math.isnan(F[ft + L.T_RS * n + a]):
            F[ft + L.T_RS * n + a] = t
        if R[ar + L.R_RDONE] == R[ar + L.R_RTOT]:
            _unlink(IS, R, b, prev, a, nxt)
            _done(IS, F, R, B8, bid, b, a, end)
        else:
            prev = a
        a = nxt
    jn = IS[L.H_JN]
    for i in range(nj):
        F[ft + L.T_FT * n + IS[jn + i]] = end
    if IS[L.IP_GAPS]:
        mixed_gaps(IS, F, d, end)
    IS[b + L.D_IT] += 1  # one iteration for the running batch
    IS[b + L.D_CTX] += nb
    IS[b + L.D_STALL] = 1
    if IS[L.IP_REC]:
        record(TLF, TLI, IS, L.REC_STALL, d, t, end, nb, chunks, 0)
    schedule(IS, F, EHT, EHI, d, end, 0)
