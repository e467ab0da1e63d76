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

Residency is priced by memory: every block a request brings is kept resident. Keeping it
costs no KV that admission could use (while its request runs the replica takes the place
of that request's private copy, the same tokens; once idle it is trimmed LRU, into the
host tier, before any admission waits for room), and not keeping it costs a private copy
for every concurrent request that shares it (which raises the admission waits) and a
transfer or recompute for every later one. So the price of keeping is never positive.
(A doorkeeper that kept a block only at its second use within a half-life lost to
``replicate_tiered`` by up to 20% in mean TTFT at budget factor 0.35.)

State: a tail section of ``F`` after the per-request time rows (``tail``), reserved (2 + 2
per block id floats per decode instance; unused since residency needs no counts).
"""

from __future__ import annotations

import numpy as np

from . import layout as L
from .hostpath import host_path_free
from .jit import entry, jit
from .mixed import chunk_add, chunk_room, mixed_close, mixed_open
from .nics import free_at

X_T0, X_TOK = 0, 1  # tail, per decode instance: first admission time, admitted prompt tokens


def tail_size(n_decode: int, n_ids: int) -> int:
    """Floats of the tail section of ``F``: 2 fields per decode instance, then counts and
    times (layout.allocate reserves them, zeroed)."""
    return 2 * n_decode + 2 * n_decode * n_ids


def tail_init(F: np.ndarray, at: int, n_decode: int) -> None:
    """Initialise the (zeroed) tail section at ``F[at:]``: no first admission yet."""
    F[at + X_T0 : at + 2 * n_decode : 2] = np.nan


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
