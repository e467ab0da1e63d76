"""``cost_aware``: the hand-off decided per request from the decode instance's current state.

At admission (docs/model.md "The cost-aware policy") the request's prefix blocks split into
the leading run already resident on the decode instance (``h`` tokens, a replica hit), the
part the prefill node had cached (up to ``ph`` tokens: the prefill computed only the rest)
and the rest of the prompt. For the ``ph - h`` prefix tokens the decode instance lacks it
prices each way of getting them and takes the cheapest:

* **transfer**: the whole missing KV (``prompt - h`` tokens) crosses the link; it lands
  when the FCFS NIC queues it joins are free (their current free times) plus the move;
* **recompute on decode**: only ``prompt - ph`` tokens cross; the decode instance rebuilds
  the ``ph - h`` prefix tokens (attending to the ``h`` resident ones) as chunks mixed
  into its decode iterations (engine/recompute.py), after the chunks of the jobs queued
  before it; the request is ready at the later of its landing and its recompute's end.
  The mixed iterations are longer than plain ones, which delays every sequence in the
  batch, so the option is charged ``extra time × batch size`` on top (the TPOT delay it
  imposes);
* **promote from the host tier** (the same host-DRAM tier as ``replicate_tiered``): the
  host run's tokens come back over the host path (``promote_ready``), the rest of the
  missing KV crosses the link; ready at the later of the two.

Cost = (ready time − now) + delay imposed on others; ties go to transfer, then promotion. Everything read
is what a real decode scheduler knows at that moment: its own batch size and context,
its recompute queue, the NIC queues' free times (it posted or is told of the transfers in
flight), its resident blocks, and the prefill's cached-token count (returned with the
prefill's hand-off, as vLLM's and Dynamo's connectors do). The recompute's start is
estimated at now (after the queued jobs' chunks), not at the next iteration boundary, which
the scheduler could know but which moves as the batch changes: the estimate is exact on
an idle instance.

Whether a block the request brings is kept resident is a reuse estimate, not always or
never: each block id keeps a decayed access count (``f ← f·2^(−Δt/T) + 1`` at every
admission that uses it), and a block is kept when its count reaches ``KEEP_MIN`` = 1.5 (it
was used before within one half-life: 1 + 2^(−Δt/T) ≥ 1.5; a TinyLFU-style doorkeeper that
keeps one-off prefixes out of memory). The half-life ``T`` is the time the decode instance takes to
receive its whole KV budget in prompt tokens at the admitted rate observed so far (a block
that does not recur within one memory turnover would be trimmed before its reuse anyway).

State: a tail section of ``F`` after the per-request time rows (``tail``): per decode
instance its first admission time and admitted prompt tokens, then per instance and block
id the decayed count and the time it was last updated (each instance counts only what it
admitted itself).
"""

from __future__ import annotations

import math

import numpy as np

from . import layout as L
from .hostpath import host_path_free
from .jit import entry, jit
from .mixed import chunk_add, chunk_room, mixed_close, mixed_open
from .nics import free_at

KEEP_MIN = 1.5  # decayed uses (this one included) to keep a block: a reuse within one half-life
X_T0, X_TOK = 0, 1  # tail, per decode instance: first admission time, admitted prompt tokens


def tail_init(n_decode: int, n_ids: int) -> np.ndarray:
    """The tail section of ``F``: 2 fields per decode instance, then counts and times."""
    out = np.zeros(2 * n_decode + 2 * n_decode * n_ids)
    out[X_T0 : 2 * n_decode : 2] = np.nan
    return out


@entry  # also called from Python (through refresh.section)
def tail(IS):
    """Offset of the tail section: right after the per-request time rows and paged's two
    per-request preemption rows that follow them (layout.allocate)."""
    return IS[L.H_PGF] + 2 * IS[L.IP_N]


# ---------------------------------------------------------------- the recompute's price


@jit
def recompute_time(IS, F, d, m, h):
    """(Seconds, extra seconds) of rebuilding ``m`` prefix tokens after ``h`` resident ones
    on ``d`` as recompute.mixed_step runs it: chunks of the iteration token budget left by
    the current batch, each iteration also decoding the batch; the extra is what those
    iterations take beyond plain decode iterations (the delay every running sequence
    sees). The batch is taken as it is now; each iteration is priced by engine/mixed.py,
    as the run prices it (speculative decoding included)."""
    b = L.DI0 + d * L.NDI
    nb, ctx = IS[b + L.D_B], IS[b + L.D_CTX]
    room = chunk_room(IS, F, nb)
    total, extra, done = 0.0, 0.0, h
    while m > 0:
        c = room if room < m else m
        plain = 0.0
        if nb > 0:
            pg, pa, pk = mixed_open(F, nb, ctx)
            plain = mixed_close(F, nb, ctx, 0, pg, pa, pk)[0]
        gemm, attn, kv_io = mixed_open(F, nb, ctx)
        gemm, attn, kv_io = chunk_add(F, nb, gemm, attn, kv_io, c, done, True)
        dur = mixed_close(F, nb, ctx, c, gemm, attn, kv_io)[0]
        total += dur
        extra += dur - plain
        done += c
        m -= c
        ctx += nb
    return total, extra


# ---------------------------------------------------------------- estimates


@jit
def link_ready(IS, F, rid, d, t, nbytes):
    """When ``nbytes`` from the request's prefill instance would land on ``d`` if sent now
    (disagg.send_kv's queueing, without sending)."""
    if nbytes <= 0.0:
        return t
    n, io = IS[L.IP_N], IS[L.H_O]
    start = free_at(IS, F, IS[io + L.O_PI * n + rid], d, t)
    return start + nbytes / F[L.FP_LINK_BPS] + F[L.FP_LINK_LAT]


@jit
def recompute_start(IS, F, R, d, t):
    """When a recompute queued now would get its first chunk on ``d``: after the tokens the
    jobs queued before it still have to compute (FCFS chunks; the next iteration boundary
    is not waited for)."""
    start = t
    q = IS[L.DI0 + d * L.NDI + L.D_RQH]
    while q != -1:
        qr = q * L.NR
        left = R[qr + L.R_RTOT] - R[qr + L.R_RDONE]
        if left > 0 and R[qr + L.R_RDEP] == -1:
            start += recompute_time(IS, F, d, left, R[qr + L.R_RDONE])[0]
        q = R[qr + L.R_RQN]
    return start


@jit
def promote_ready(F, d, t, tokens):
    """When ``tokens`` of the request's host run would be in HBM if promoted now: the
    instance's host-path queue as it is (hostpath.host_path_move, without moving)."""
    f = L.DF0 + d * L.NDF
    return host_path_free(F, d, t) + tokens * F[L.FP_DC + L.C_KV] / F[f + L.DF_HP_BPS] + F[
        f + L.DF_HP_LAT
    ]


@jit
def choose(IS, F, R, rid, d, t, prompt, hit_tok, host_tok):
    """The hand-off of a cost_aware request: (tokens that cross the link, prefix tokens the
    decode instance recomputes, whether the ``host_tok`` tokens of the host run are
    promoted). Costs are ready time − now, plus the delay a recompute imposes on the batch;
    ties prefer transfer, then promotion, then recompute."""
    n, io = IS[L.IP_N], IS[L.H_O]
    kv = F[L.FP_DC + L.C_KV]
    full = prompt - hit_tok
    cost = link_ready(IS, F, rid, d, t, full * kv) - t
    xfer, rc, promote = full, np.int64(0), False
    if host_tok > 0:
        ready_p = promote_ready(F, d, t, host_tok)
        rest = link_ready(IS, F, rid, d, t, (full - host_tok) * kv)
        if rest > ready_p:
            ready_p = rest
        if ready_p - t <= cost:  # ties promote, as replicate_tiered: the link stays free
            cost, xfer, promote = ready_p - t, full - host_tok, True
    ph = np.int64(IS[io + L.O_PH * n + rid])
    m = ph - hit_tok
    if m <= 0:
        return xfer, rc, promote
    span, extra = recompute_time(IS, F, d, m, hit_tok)
    done = recompute_start(IS, F, R, d, t) + span
    ready_r = link_ready(IS, F, rid, d, t, (prompt - ph) * kv)
    if done > ready_r:
        ready_r = done
    cost_r = (ready_r - t) + IS[L.DI0 + d * L.NDI + L.D_B] * extra
    if cost_r < cost:
        return prompt - ph, m, False
    return xfer, rc, promote


# ---------------------------------------------------------------- residency


@jit
def touch(IS, F, bid, i0, i1, d, t, prompt):
    """An admitted request uses blocks ``bid[i0:i1]``: decay and bump their counts."""
    x = tail(IS)
    U, D = IS[L.IP_U], IS[L.IP_ND]
    me = x + 2 * d
    if math.isnan(F[me + X_T0]):
        F[me + X_T0] = t
    F[me + X_TOK] += prompt
    half = L.INF
    if t > F[me + X_T0]:
        half = IS[L.IP_BUDGET] / (F[me + X_TOK] / (t - F[me + X_T0]))
    cnt = x + 2 * D + d * U
    at = x + 2 * D + (D + d) * U
    for j in range(i0, i1):
        h = bid[j]
        dt = t - F[at + h]
        decay = 1.0
        if dt > 0.0:
            decay = 0.0 if half <= 0.0 else 0.5 ** (dt / half)
        F[cnt + h] = F[cnt + h] * decay + 1.0
        F[at + h] = t


@jit
def keeps(IS, F, d, h):
    """Whether a cost_aware request on ``d`` keeps block ``h`` resident (after ``touch``)."""
    D = IS[L.IP_ND]
    return F[tail(IS) + 2 * D + d * IS[L.IP_U] + h] >= KEEP_MIN
