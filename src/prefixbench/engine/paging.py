"""Paged decode KV (memory.admission: paged; docs/model.md "Paged admission and preemption").

As vLLM's block manager and SGLang's token pool: a request is admitted with blocks for its
own prompt tokens (prompt less the resident replica blocks it uses), then a running sequence
takes one more block whenever its context crosses a multiple of ``block_size`` (the blocks of
an iteration are taken when it starts). Requests that do not fit queue FCFS.

When a starting iteration's blocks do not fit, idle replicas are trimmed LRU first; if that
is not enough, the most recently admitted running sequence is preempted (vLLM's victim: the
tail of its running queue), again until the iteration fits. A preempted sequence frees its
blocks and drops its references on shared replica blocks (they stay resident, idle, until
trimmed), and waits, ahead of every new admission, to resume when memory frees:

* recompute: on resume it looks its chain up in the replica store again (as vLLM's prefix
  cache does), takes blocks for the rest of its context (prompt + the tokens generated before
  its last iteration) and re-prefills that rest on the decode instance (vLLM re-runs the
  prefill in the same engine): ``run_reprefills``, at the decode boundary where it resumed,
  runs the re-prefills back to back as a stall of the batch before anything else; prefix
  recompute jobs (recompute.py) stay queued for the mixed iterations after it;
* swap: its whole context, in blocks, is copied to host memory over the decode instance's
  host path when it is preempted and back, as private blocks, when it resumes
  (engine/hostpath.py); the copy holds host memory (``IP_SWAPCAP`` per instance) until it
  is back, and a victim whose context does not fit in what is left is preempted by
  recompute instead.

Closed form: memory is accounted per iteration without an event per iteration. Between two
boundaries the batch is fixed, so the blocks it takes by any iteration are a step function
of the iteration index; ``sync`` brings the books up to the iterations started by ``t``
(trimming idle replicas in the order per-iteration allocation would), and the instance
schedules an extra boundary only at the first iteration whose blocks would not fit even
after trimming every idle replica, i.e. where a preemption is due. With memory to spare
nothing changes: the same boundaries, the same timestamps as reserve.
"""

from __future__ import annotations

import numpy as np

from . import layout as L
from .batch import interrupt, schedule
from .blocks import rs_acquire, rs_idle_tokens, rs_match, rs_release_chain, rs_trim
from .hostpath import host_path_move
from .jit import jit
from .power import decode_record, power_work
from .queues import batch_push, push, q_append, q_popleft
from .series import coeffs, comm, iterations_within, op_time, series_time, weights_read
from .timeline import record
from .window import add_step_work, in_energy_window, in_window


@jit
def target(IS, R, rid, g):
    """Private KV tokens a sequence holds for the iteration after its ``g``-th token: its own
    tokens (own prompt + g) in whole blocks, less its persisted (replica) tokens."""
    own = np.int64(R[rid * L.NR + L.R_OWN0]) + g
    return blocks(IS, own) - R[rid * L.NR + L.R_PTH]


@jit
def blocks(IS, tokens):
    """``tokens`` rounded up to whole blocks, in tokens. A power-of-two block size (16, the
    default) rounds with a mask: ``x & -bs`` is ``x // bs * bs`` for every int64 x, and
    costs a cycle where the division costs tens, once per running sequence per pass."""
    bs = IS[L.IP_BS]
    if bs & (bs - 1) == 0:
        return (tokens + bs - 1) & -bs
    return (tokens + bs - 1) // bs * bs


@jit
def generated_before(R, rid):
    """Tokens a preempted sequence had generated before its last iteration (whose KV it
    held: its iteration g attends prompt + g tokens)."""
    g = np.int64(R[rid * L.NR + L.R_GEN]) - 1
    return g if g > 0 else np.int64(0)


@jit
def swap_tokens(IS, R, rid):
    """Tokens a swapped sequence's context takes in host memory (whole blocks: its prompt
    and the tokens generated before its last iteration)."""
    return blocks(IS, np.int64(R[rid * L.NR + L.R_PROMPT]) + generated_before(R, rid))


@jit
def nothing_held(IS, d):
    """No admitted request holds KV on ``d``: no private blocks, and every resident replica
    block idle (an admitted request whose prompt is all hits holds only references)."""
    b = L.DI0 + d * L.NDI
    return IS[b + L.D_PRIV] == 0 and IS[b + L.D_USED] == IS[b + L.D_IDLE]


@jit
def mem_short(IS, d):
    """(free tokens, idle replica tokens) of decode instance ``d``."""
    b = L.DI0 + d * L.NDI
    return IS[L.IP_BUDGET] - IS[b + L.D_PRIV] - IS[b + L.D_USED], IS[b + L.D_IDLE]


@jit
def demand(IS, R, d, G):
    """Private tokens the running sequences must add to hold iterations up to index ``G``."""
    b = L.DI0 + d * L.NDI
    if IS[b + L.D_ALLOC] >= G:
        return 0  # every running sequence holds its blocks through G already (took_through)
    rb = IS[L.H_DH] + 2 * IS[L.H_CAPB] * d + IS[L.H_CAPB]
    tot = 0
    for i in range(IS[b + L.D_HSZ]):
        rid = IS[rb + i]
        x = target(IS, R, rid, G - R[rid * L.NR + L.R_J0]) - R[rid * L.NR + L.R_PRIV]
        if x > 0:
            tot += x
    return tot


@jit
def alloc_through(IS, F, R, B32, B8, d, G, t):
    """Take the blocks of every running sequence's iterations up to index ``G`` (trimming
    idle replicas LRU when free memory is short; callers make sure it fits); True if memory
    changed (the caller then calls disagg.mem_changed)."""
    if IS[L.IP_POLICY] == L.POL_TIERED or IS[L.IP_POLICY] == L.POL_COST_AWARE:
        return alloc_known(IS, F, R, B32, B8, d, G, t, demand(IS, R, d, G))
    # the other policies' trim reads no sequence's blocks (blocks.rs_trim): one pass takes
    # them and sums what it took, then the trim frees that much (the same books)
    b = L.DI0 + d * L.NDI
    if IS[b + L.D_ALLOC] >= G:
        return False  # nothing to take (took_through)
    add = take_blocks(IS, R, d, G)
    took_through(IS, d, G)
    if add == 0:
        return False
    free = IS[L.IP_BUDGET] - IS[b + L.D_PRIV] - IS[b + L.D_USED]
    if free < add:
        rs_trim(IS, F, B32, B8, d, add - free, t)
    IS[b + L.D_PRIV] += add
    return True


@jit
def alloc_known(IS, F, R, B32, B8, d, G, t, add):
    """alloc_through with its demand (``add``) already counted."""
    b = L.DI0 + d * L.NDI
    if add == 0:
        took_through(IS, d, G)
        return False
    free = IS[L.IP_BUDGET] - IS[b + L.D_PRIV] - IS[b + L.D_USED]
    if free < add:
        if IS[L.IP_POLICY] == L.POL_TIERED or IS[L.IP_POLICY] == L.POL_COST_AWARE:
            trim_by_iteration(IS, F, R, B32, B8, d, G, t)
        else:
            rs_trim(IS, F, B32, B8, d, add - free, t)
    take_blocks(IS, R, d, G)
    IS[b + L.D_PRIV] += add
    took_through(IS, d, G)
    return True


@jit
def take_blocks(IS, R, d, G):
    """Give every running sequence of ``d`` its blocks through iteration ``G``; the tokens
    taken (the books of D_PRIV are the caller's)."""
    rb = IS[L.H_DH] + 2 * IS[L.H_CAPB] * d + IS[L.H_CAPB]
    add = 0
    for i in range(IS[L.DI0 + d * L.NDI + L.D_HSZ]):
        rid = IS[rb + i]
        rr = rid * L.NR
        x = target(IS, R, rid, G - R[rr + L.R_J0]) - R[rr + L.R_PRIV]
        if x > 0:
            R[rr + L.R_PRIV] += x
            add += x
    return add


@jit
def took_through(IS, d, G):
    """Every running sequence of ``d`` now holds its blocks through iteration ``G``; they
    keep them (a sequence's blocks only grow while it runs) until one joins (rejoin)."""
    a = L.DI0 + d * L.NDI + L.D_ALLOC
    if G > IS[a]:
        IS[a] = G


@jit
def fits_surely(IS, d, hi, avail):
    """demand(hi) <= avail, decided without visiting the batch when the bound allows: a
    sequence holding its blocks through iteration A needs at most blocks(hi - A) more by
    ``hi`` (ceil((y + m) / bs) <= ceil(y / bs) + ceil(m / bs)), so the batch needs at most
    D_HSZ of those. False when the bound cannot tell (the caller then counts)."""
    b = L.DI0 + d * L.NDI
    a = IS[b + L.D_ALLOC]
    if a < 0:
        return False
    m = hi - a
    if m < 0:
        m = 0
    return IS[b + L.D_HSZ] * blocks(IS, m) <= avail


@jit
def trim_by_iteration(IS, F, R, B32, B8, d, G, t):
    """replicate_tiered: make the trims iterations up to ``G`` need at the start of the
    iteration that needs each (a trim demotes over the host path at that time, as a
    per-iteration allocation would; the running segment started iteration D_IT at
    DF_TSEG)."""
    b = L.DI0 + d * L.NDI
    f = L.DF0 + d * L.NDF
    it0 = IS[b + L.D_IT]
    seg = IS[b + L.D_B] > 0 and IS[b + L.D_STALL] == 0
    a1, s1, a2, s2, o = coeffs(F, IS[b + L.D_B], IS[b + L.D_CTX])
    lo = it0
    while lo <= G:
        free = IS[L.IP_BUDGET] - IS[b + L.D_PRIV] - IS[b + L.D_USED]
        g = first_short(IS, R, d, lo, G, free)
        if g == -1:
            return
        when = t
        if seg and g > it0:
            when = F[f + L.DF_TSEG] + series_time(a1, s1, a2, s2, o, g - it0)
            if when > t:
                when = t
        if rs_trim(IS, F, B32, B8, d, demand(IS, R, d, g) - free, when) == 0:
            return
        lo = g + 1


@jit
def sync(IS, F, R, B32, B8, d, t):
    """Bring ``d``'s books to the iterations of its running segment started by ``t``; True
    if memory changed."""
    b = L.DI0 + d * L.NDI
    f = L.DF0 + d * L.NDF
    if IS[b + L.D_B] == 0 or IS[b + L.D_STALL] or F[f + L.DF_NEXT_T] == L.INF:
        return False  # idle, stalled, or at a boundary being handled
    nk = IS[b + L.D_NK]
    a1, s1, a2, s2, o = coeffs(F, IS[b + L.D_B], IS[b + L.D_CTX])
    started = iterations_within(a1, s1, a2, s2, o, t - F[f + L.DF_TSEG], nk) + 1
    if started > nk:
        started = nk
    return alloc_through(IS, F, R, B32, B8, d, IS[b + L.D_IT] + started - 1, t)


@jit
def first_short(IS, R, d, lo, hi, avail):
    """The first iteration index in [lo, hi] whose blocks exceed ``avail``; -1 if none."""
    if hi < lo or fits_surely(IS, d, hi, avail) or demand(IS, R, d, hi) <= avail:
        return -1
    while lo < hi:
        mid = (lo + hi) // 2
        if demand(IS, R, d, mid) > avail:
            hi = mid
        else:
            lo = mid + 1
    return lo


@jit
def schedule_segment(IS, F, R, EHT, EHI, d, t):
    """At a boundary (iteration D_IT's blocks taken): run to the next finish, or stop at the
    first iteration whose blocks would not fit even after trimming every idle replica."""
    b = L.DI0 + d * L.NDI
    it = IS[b + L.D_IT]
    k = IS[IS[L.H_DH] + 2 * IS[L.H_CAPB] * d] - it
    free, idle = mem_short(IS, d)
    g = first_short(IS, R, d, it + 1, it + k - 1, free + idle)
    if g != -1:
        k = g - it
    if IS[b + L.D_JQH] != -1 and IS[b + L.D_B] < IS[L.IP_MAXB]:
        k = 1  # a preemption freed a slot: the join queue takes it at the next boundary
    a1, s1, a2, s2, o = coeffs(F, IS[b + L.D_B], IS[b + L.D_CTX])
    schedule(IS, F, EHT, EHI, d, t + series_time(a1, s1, a2, s2, o, k), k)


@jit
def guard(IS, F, R, EHT, EHI, d, t):
    """Memory was taken on ``d`` mid-segment (an admission): stop the segment earlier if an
    iteration still to start no longer fits."""
    b = L.DI0 + d * L.NDI
    f = L.DF0 + d * L.NDF
    if IS[b + L.D_B] == 0 or IS[b + L.D_STALL] or F[f + L.DF_NEXT_T] == L.INF:
        return
    nk = IS[b + L.D_NK]
    tseg = F[f + L.DF_TSEG]
    a1, s1, a2, s2, o = coeffs(F, IS[b + L.D_B], IS[b + L.D_CTX])
    started = iterations_within(a1, s1, a2, s2, o, t - tseg, nk) + 1
    it = IS[b + L.D_IT]
    free, idle = mem_short(IS, d)
    g = first_short(IS, R, d, it + started, it + nk - 1, free + idle)
    if g != -1:
        k = g - it
        schedule(IS, F, EHT, EHI, d, tseg + series_time(a1, s1, a2, s2, o, k), k)


@jit
def batch_remove(IS, d, rid):
    """Take ``rid`` out of ``d``'s batch heap (a preempted sequence)."""
    capb = IS[L.H_CAPB]
    base = IS[L.H_DH] + 2 * capb * d
    rb = base + capb
    sz = L.DI0 + d * L.NDI + L.D_HSZ
    size = IS[sz]
    i = 0
    while IS[rb + i] != rid:
        i += 1
    size -= 1
    IS[sz] = size
    if i == size:
        return
    it, r = IS[base + size], IS[rb + size]
    # sift the last entry up from i, then down
    while i > 0:
        p = (i - 1) >> 1
        if IS[base + p] < it or (IS[base + p] == it and IS[rb + p] < r):
            break
        IS[base + i], IS[rb + i] = IS[base + p], IS[rb + p]
        i = p
    while 2 * i + 1 < size:
        c = 2 * i + 1
        if c + 1 < size and (
            IS[base + c + 1] < IS[base + c]
            or (IS[base + c + 1] == IS[base + c] and IS[rb + c + 1] < IS[rb + c])
        ):
            c += 1
        if it < IS[base + c] or (it == IS[base + c] and r < IS[rb + c]):
            break
        IS[base + i], IS[rb + i] = IS[base + c], IS[rb + c]
        i = c
    IS[base + i], IS[rb + i] = it, r


@jit
def most_recent(IS, R, d):
    """The running sequence admitted (or resumed) last: vLLM's preemption victim."""
    rb = IS[L.H_DH] + 2 * IS[L.H_CAPB] * d + IS[L.H_CAPB]
    best = IS[rb]
    for i in range(1, IS[L.DI0 + d * L.NDI + L.D_HSZ]):
        rid = IS[rb + i]
        if R[rid * L.NR + L.R_ASEQ] > R[best * L.NR + L.R_ASEQ]:
            best = rid
    return best


@jit
def release_replicas(IS, R, B32, B8, bid, d, rid):
    """Drop the request's references on replica blocks (held hit, then persisted), tail
    first as disagg.finish does, so the chain's root stays the freshest idle block."""
    rs_release_chain(IS, R, B32, B8, bid, d, rid)
    rr = rid * L.NR
    R[rr + L.R_NHIT] = 0
    R[rr + L.R_FLAGS] &= ~L.F_PERS
    R[rr + L.R_PTH] = 0


@jit
def preempt(IS, F, R, B32, B8, bid, d, rid, t):
    """Take ``rid`` out of the batch at the boundary ``t``: free its blocks and replica
    references (swap: copy its context to host first) and queue it, first, to resume."""
    n, ft = IS[L.IP_N], IS[L.H_FT]
    b = L.DI0 + d * L.NDI
    rr = rid * L.NR
    g = IS[b + L.D_IT] - R[rr + L.R_J0]
    batch_remove(IS, d, rid)
    IS[b + L.D_B] -= 1
    IS[b + L.D_CTX] -= np.int64(R[rr + L.R_PROMPT]) + g
    R[rr + L.R_GEN] = g
    priv = R[rr + L.R_PRIV]
    IS[b + L.D_PRIV] -= priv
    R[rr + L.R_PRIV] = 0
    R[rr + L.R_FLAGS] |= L.F_PRE
    release_replicas(IS, R, B32, B8, bid, d, rid)
    io = IS[L.H_O]
    IS[io + L.O_NPRE * n + rid] += 1
    F[IS[L.H_PGF] + n + rid] = t
    if g == 0:  # its first token was due at the end of the iteration it now misses
        F[ft + L.T_FT * n + rid] = np.nan
        F[ft + L.T_DS * n + rid] = np.nan
    if IS[L.IP_SWAP]:  # --- admit: swapped if its context fits the host memory left
        tok = swap_tokens(IS, R, rid)
        if IS[b + L.D_SWAPU] + tok <= IS[L.IP_SWAPCAP]:
            IS[b + L.D_SWAPU] += tok
            R[rr + L.R_FLAGS] |= L.F_SWAPD
            IS[io + L.O_PTOK * n + rid] += tok
            host_path_move(IS, F, d, t, tok * F[L.FP_DC + L.C_KV])
    # prepend: the queue resumes the earliest admitted of a boundary's victims first
    h = b + L.D_PQH
    R[rr + L.R_PGN] = IS[h]
    IS[h] = rid
    if IS[h + 1] == -1:
        IS[h + 1] = rid


@jit
def prepare_iteration(IS, F, R, B32, B8, bid, d, t):
    """Before iteration D_IT starts: take its blocks, trimming idle replicas first, then
    preempting the most recently admitted running sequence until they fit (the caller
    records the memory change)."""
    b = L.DI0 + d * L.NDI
    it = IS[b + L.D_IT]
    if IS[b + L.D_B] > 0 and fits_surely(IS, d, it, mem_short(IS, d)[0]):
        # it fits without a trim: one pass takes what demand would have counted
        IS[b + L.D_PRIV] += take_blocks(IS, R, d, it)
        took_through(IS, d, it)
        return
    victims = 0
    need = 0  # an empty batch takes nothing
    while IS[b + L.D_B] > 0:
        need = demand(IS, R, d, it)
        free, idle = mem_short(IS, d)
        if need <= free:
            break
        if need <= free + idle:
            rs_trim(IS, F, B32, B8, d, need - free, t)
            break
        if idle > 0:
            rs_trim(IS, F, B32, B8, d, idle, t)
        victim = most_recent(IS, R, d)
        if IS[b + L.D_B] == 1:  # alone and still short: its shared blocks' rounding is
            R[victim * L.NR + L.R_FLAGS] |= L.F_SOLO  # in the way; it resumes on its own
        preempt(IS, F, R, B32, B8, bid, d, victim, t)
        victims += 1
        need = 0  # counted again for the batch left, unless it is empty
    # the loop left the batch as it counted ``need`` (a trim takes no sequence's blocks)
    alloc_known(IS, F, R, B32, B8, d, it, t, need)
    if victims and IS[b + L.D_B] > 0:
        first_tokens(IS, F, R, d, t)


@jit
def first_tokens(IS, F, R, d, t):
    """Sequences about to run their first iteration: its end, for the batch left after a
    preemption (join_batch priced it for the batch before)."""
    n, ft = IS[L.IP_N], IS[L.H_FT]
    b = L.DI0 + d * L.NDI
    a1, s1, a2, s2, o = coeffs(F, IS[b + L.D_B], IS[b + L.D_CTX])
    first = t + series_time(a1, s1, a2, s2, o, 1)
    rb = IS[L.H_DH] + 2 * IS[L.H_CAPB] * d + IS[L.H_CAPB]
    for i in range(IS[b + L.D_HSZ]):
        rid = IS[rb + i]
        if R[rid * L.NR + L.R_J0] == IS[b + L.D_IT]:
            F[ft + L.T_FT * n + rid] = first


@jit
def resume_one(IS, F, R, B32, B8, EHT, EHI, bid, bt, d, rid, t):
    """Give a preempted sequence its blocks back (False if they do not fit) and start its
    re-prefill (recompute: less the replica blocks it finds resident) or its copy back
    from host (swap)."""
    b = L.DI0 + d * L.NDI
    rr = rid * L.NR
    prompt = np.int64(R[rr + L.R_PROMPT])
    ptr = IS[L.H_PTR]
    i0, i1 = IS[ptr + rid], IS[ptr + rid + 1]
    nhit = 0
    solo = R[rr + L.R_FLAGS] & L.F_SOLO
    swapped = R[rr + L.R_FLAGS] & L.F_SWAPD
    if not swapped and IS[L.IP_POLICY] >= L.POL_HOTSET and i1 > i0 and not solo:
        nhit = rs_match(B8, IS[L.IP_U], d, bid, i0, i1)
    hit = 0
    for j in range(i0, i0 + nhit):
        hit += bt[j]
    need = blocks(IS, prompt - hit + generated_before(R, rid))
    free, idle = mem_short(IS, d)
    if free < need and free + idle - rs_idle_tokens(IS, B32, bid, d, i0, i0 + nhit) < need:
        return False
    rs_acquire(IS, B32, B8, bid, d, i0, i0 + nhit)
    if free < need:
        rs_trim(IS, F, B32, B8, d, need - free, t)
    R[rr + L.R_NHIT] = nhit
    R[rr + L.R_OWN0] = prompt - hit
    IS[b + L.D_PRIV] += need
    R[rr + L.R_PRIV] = need
    IS[L.GI_ASEQ] += 1
    R[rr + L.R_ASEQ] = IS[L.GI_ASEQ]
    if swapped:
        land = host_path_move(IS, F, d, t, need * F[L.FP_DC + L.C_KV])
        push(EHT, EHI, IS, land, L.EV_TRANSFER, rid, 1)
    else:
        n, io = IS[L.IP_N], IS[L.H_O]
        m, _ = reprefill_tokens(IS, R, rid)
        IS[io + L.O_PTOK * n + rid] += m
        R[rr + L.R_FLAGS] |= L.F_REPF
        q_append(IS, R, b + L.D_FQH, L.R_RQN, rid)
        interrupt(IS, F, EHT, EHI, d, t)
    return True


@jit
def resume_waiting(IS, F, R, B32, B8, EHT, EHI, bid, bt, d, t):
    """Memory freed on ``d``: resume preempted sequences in order; True when none is left
    (new admissions may then proceed). The caller records the memory change."""
    h = L.DI0 + d * L.NDI + L.D_PQH
    while IS[h] != -1:
        rid = IS[h]
        if not resume_one(IS, F, R, B32, B8, EHT, EHI, bid, bt, d, rid, t):
            return False
        q_popleft(IS, R, h, L.R_PGN)
    return True


@jit
def reprefill_tokens(IS, R, rid):
    """(tokens re-prefilled, cached tokens they attend to) of a resume under recompute: the
    context the sequence held, less the replica tokens it found resident on resuming."""
    prompt = np.int64(R[rid * L.NR + L.R_PROMPT])
    cached = prompt - R[rid * L.NR + L.R_OWN0]
    return prompt + generated_before(R, rid) - cached, cached


@jit
def reprefill(IS, F, R, d, rid, start, t):
    """Run a resumed sequence's re-prefill from ``start`` (the batch stalls); its end."""
    m, c = reprefill_tokens(IS, R, rid)
    c0 = L.FP_DC
    lf, att, kv = F[c0 + L.C_LF], F[c0 + L.C_ATT], F[c0 + L.C_KV]
    gemm, attn = m * lf, att * (m * c + m * (m + 1) / 2.0)
    wbytes, kv_io = weights_read(F, c0, m), kv * (m + c)
    R[rid * L.NR + L.R_FLAGS] &= ~L.F_REPF
    step = op_time(F, c0, gemm, m * 1.0, F[c0 + L.C_FRP], wbytes, attn, kv_io) + F[c0 + L.C_POV]
    dur = step + comm(F, c0, float(m))
    if in_window(F, t):  # the stall is measured from t; this re-prefill's share in it
        add_step_work(
            F, L.DF0 + d * L.NDF + L.DF_FLOPS, gemm + attn, wbytes + kv_io, start, start + dur
        )
    if in_energy_window(F, t):  # --- power: a re-prefill draws like a prefill step
        power_work(F, decode_record(F, d), c0, F[c0 + L.C_FRP], gemm + attn, wbytes + kv_io, dur)
    return start + dur


@jit
def run_reprefills(IS, F, R, EHT, EHI, TLF, TLI, d, t):
    """At a boundary of ``d``: run the queued re-prefills of resumed sequences back to back,
    the batch stalled; they join at the stall's end, which is the next boundary."""
    b = L.DI0 + d * L.NDI
    end = t
    tokens = 0
    while IS[b + L.D_FQH] != -1:
        rid = q_popleft(IS, R, b + L.D_FQH, L.R_RQN)
        tokens += reprefill_tokens(IS, R, rid)[0]
        end = reprefill(IS, F, R, d, rid, end, t)
        q_append(IS, R, b + L.D_JQH, L.R_JQN, rid)
    IS[b + L.D_STALL] = 1
    F[L.DF0 + d * L.NDF + L.DF_STALL_END] = end
    if IS[L.IP_REC]:
        record(TLF, TLI, IS, L.REC_STALL, d, t, end, 0, tokens, 0)
    schedule(IS, F, EHT, EHI, d, end, 0)


@jit
def still_joining(IS, R, nj):
    """Of the ``nj`` requests that joined at this boundary (IS[H_JN]...), keep those the
    iteration's blocks did not preempt; their count."""
    jn = IS[L.H_JN]
    k = 0
    for i in range(nj):
        rid = IS[jn + i]
        if not R[rid * L.NR + L.R_FLAGS] & L.F_PRE:
            IS[jn + k] = rid
            k += 1
    return k


@jit
def swapped_in(IS, F, R, EHT, EHI, rid, t):
    """A swapped sequence's KV is back on its decode instance (its host copy is freed):
    it queues to rejoin."""
    d = IS[IS[L.H_O] + L.O_DI * IS[L.IP_N] + rid]
    IS[L.DI0 + d * L.NDI + L.D_SWAPU] -= swap_tokens(IS, R, rid)
    R[rid * L.NR + L.R_FLAGS] &= ~L.F_SWAPD
    q_append(IS, R, L.DI0 + d * L.NDI + L.D_JQH, L.R_JQN, rid)
    interrupt(IS, F, EHT, EHI, d, t)


@jit
def rejoin(IS, F, R, d, it, rid, t):
    """A sequence takes a batch slot at iteration ``it``; True if it is a resumed one that
    has emitted tokens already (handled here: it keeps its first-token time)."""
    rr = rid * L.NR
    n = IS[L.IP_N]
    if R[rr + L.R_FLAGS] & L.F_PRE:
        R[rr + L.R_FLAGS] &= ~L.F_PRE
        pg = IS[L.H_PGF]
        F[pg + rid] += t - F[pg + n + rid]
    g = R[rr + L.R_GEN]
    R[rr + L.R_J0] = it - g
    joined_through(IS, R, d, it, rid, g)
    if g == 0:
        return False
    b = L.DI0 + d * L.NDI
    IS[b + L.D_CTX] += np.int64(R[rr + L.R_PROMPT]) + g
    batch_push(IS, d, it + R[rr + L.R_OUTPUT] - g, rid)
    return True


@jit
def joined_through(IS, R, d, it, rid, g):
    """D_ALLOC after ``rid`` joins at iteration ``it`` (its ``g``-th token next): the
    batch holds its blocks through min(D_ALLOC, it) if the joiner holds its own through
    ``it`` (a fresh admission holds its prompt's blocks: target at g = 0), else -1 (counted
    from its admission on)."""
    a = L.DI0 + d * L.NDI + L.D_ALLOC
    if IS[a] >= 0 and R[rid * L.NR + L.R_PRIV] >= target(IS, R, rid, g):
        if it < IS[a]:
            IS[a] = it
    else:
        IS[a] = -1
