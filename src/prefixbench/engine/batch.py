"""A decode batch in closed form, shared by the decode instances and colocated instances.

A fixed batch's iterations cost an arithmetic series in the resident context
(series.series_time), so an instance schedules one event at the next iteration boundary
where something happens (a sequence finishes) and is interrupted when work arrives: the
work then waits for the first boundary strictly after its arrival. Boundaries are decided
in absolute time, the way their times are computed, so rounding can never move work to an
earlier or a later boundary than the one it sees.
"""

from __future__ import annotations

import math

import numpy as np

from .jit import jit, sig
from .layout import (
    C_ATT,
    C_FRD,
    C_KV,
    C_LF,
    C_LMH,
    C_SDA,
    C_SDF,
    C_SDKV,
    C_SDW,
    C_SG,
    C_STAU,
    D_B,
    D_CTX,
    D_HSZ,
    D_IT,
    D_NK,
    D_STALL,
    D_VER,
    DF0,
    DF_BUSY,
    DF_FLOPS,
    DF_NEXT_T,
    DF_TSEG,
    DI0,
    EV_DECODE,
    FP_DC,
    FP_TSTEADY,
    G_BATCH_AREA,
    G_ITL_CNT,
    G_ITL_H,
    G_ITL_MAX,
    G_ITL_MIN,
    G_ITL_NW,
    G_ITL_SUM,
    H_CAPB,
    H_DH,
    H_FT,
    IP_N,
    ITL_BPD,
    ITL_LOG10_LO,
    ITL_NB,
    NDF,
    NDI,
    T_FT,
    T_GAP,
    T_LAST,
)
from .power import decode_record, power_work
from .queues import push
from .series import coeffs, iterations_within, series_time, weights_read
from .window import clipped, in_energy_window, in_window, iterations_in

# the histogram's bin edges, 10**(lo + (b + 1)/BPD) for bin b: the values the compiled
# expression gives (tests/test_itl.py checks every one bit for bit), looked up instead of
# one power per bin a segment's gaps span
ITL_EDGES = np.array([10.0 ** (ITL_LOG10_LO + (bb + 1.0) / ITL_BPD) for bb in range(ITL_NB)])


@sig("void(int64[::1], float64[::1], float64[::1], int64[::1], int64, float64, int64)")
def schedule(IS, F, EHT, EHI, d, t, k):
    """Make the boundary ``k`` iterations after ``t_seg``, at time ``t``, the next one."""
    b = DI0 + d * NDI
    IS[b + D_VER] += 1
    F[DF0 + d * NDF + DF_NEXT_T] = t
    IS[b + D_NK] = k
    push(EHT, EHI, IS, t, EV_DECODE, d, IS[b + D_VER])


@jit
def first_boundary_after(F, nb, ctx, tseg, t, k_max):
    """The first iteration boundary strictly after ``t`` (at most ``k_max``): (k, time)."""
    a1, s1, a2, s2, o = coeffs(F, nb, ctx)
    k = iterations_within(a1, s1, a2, s2, o, t - tseg, k_max) + 1
    if k_max < k:
        k = k_max
    while k < k_max and tseg + series_time(a1, s1, a2, s2, o, k) <= t:
        k += 1
    while k > 1 and tseg + series_time(a1, s1, a2, s2, o, k - 1) > t:
        k -= 1
    return k, tseg + series_time(a1, s1, a2, s2, o, k)


@sig("void(int64[::1], float64[::1], float64[::1], int64[::1], int64, float64)")
def interrupt(IS, F, EHT, EHI, d, t):
    """Work arrived for instance ``d``: make it stop at the next iteration boundary."""
    b = DI0 + d * NDI
    f = DF0 + d * NDF
    if IS[b + D_STALL]:
        return  # the end of the running stall (or step) is a boundary already scheduled
    if IS[b + D_B] == 0:
        if F[f + DF_NEXT_T] > t:
            F[f + DF_TSEG] = t
            schedule(IS, F, EHT, EHI, d, t, 0)
        return
    k_max = IS[IS[H_DH] + 2 * IS[H_CAPB] * d] - IS[b + D_IT]
    k, tb = first_boundary_after(F, IS[b + D_B], IS[b + D_CTX], F[f + DF_TSEG], t, k_max)
    if tb < F[f + DF_NEXT_T]:
        schedule(IS, F, EHT, EHI, d, tb, k)


@sig("void(int64[::1], float64[::1], float64[::1], int64[::1], int64, float64)")
def run_to_next_finish(IS, F, EHT, EHI, d, t):
    """Schedule the boundary at which the batch's next sequence finishes."""
    b = DI0 + d * NDI
    a1, s1, a2, s2, o = coeffs(F, IS[b + D_B], IS[b + D_CTX])
    k_next = IS[IS[H_DH] + 2 * IS[H_CAPB] * d] - IS[b + D_IT]
    schedule(IS, F, EHT, EHI, d, t + series_time(a1, s1, a2, s2, o, k_next), k_next)


@jit
def itl_bin(g):
    """The histogram bin of a gap of ``g`` seconds (the end bins hold what lies outside)."""
    if g <= 0.0:
        return 0
    x = (math.log10(g) - ITL_LOG10_LO) * ITL_BPD
    if x < 0.0:
        return 0
    if x >= ITL_NB - 1:
        return ITL_NB - 1
    return int(x)


@jit
def itl_add(F, g, w):
    """``w`` token gaps of ``g`` seconds each into the pooled ITL accumulators."""
    if w <= 0:
        return
    F[G_ITL_SUM] += g * w
    F[G_ITL_CNT] += w
    if g < F[G_ITL_MIN]:
        F[G_ITL_MIN] = g
    if g > F[G_ITL_MAX]:
        F[G_ITL_MAX] = g
    F[G_ITL_H + itl_bin(g)] += w


@jit
def _below(a, s, o, e, j0, j1):
    """How many integer j in [j0, j1) have a + s·j + o < e (s >= 0)."""
    n = j1 - j0
    if s <= 0.0:
        return n if a + o < e else 0
    c = math.ceil((e - o - a) / s) - j0
    if c < 0:
        return 0
    return n if c > n else int(c)


@jit
def itl_series(F, a1, s1, a2, s2, o, k, w):
    """Iterations 1..k-1 of a segment: each gives ``w`` sequences one gap equal to its
    duration max(a1 + s1·j, a2 + s2·j) + o, non-decreasing in j (both slopes >= 0), so the
    count below each bin edge is solved for j: closed form, a few bins per segment."""
    if k <= 1 or w <= 0:
        return
    n = k - 1
    F[G_ITL_SUM] += w * (series_time(a1, s1, a2, s2, o, k) - series_time(a1, s1, a2, s2, o, 1))
    F[G_ITL_CNT] += w * n
    lo = max(a1 + s1, a2 + s2) + o
    hi = max(a1 + s1 * n, a2 + s2 * n) + o
    if lo < F[G_ITL_MIN]:
        F[G_ITL_MIN] = lo
    if hi > F[G_ITL_MAX]:
        F[G_ITL_MAX] = hi
    b0, b1 = itl_bin(lo), itl_bin(hi)
    done = 0
    for bb in range(b0, b1):
        e = ITL_EDGES[bb]
        c = _below(a1, s1, o, e, 1, k)
        c2 = _below(a2, s2, o, e, 1, k)
        if c2 < c:
            c = c2
        if c > done:
            F[G_ITL_H + bb] += w * (c - done)
            done = c
    F[G_ITL_H + b1] += w * (n - done)


@jit
def add_work(F, f, flops, bytes_):
    """FLOPs and bytes of a step (started in the measured window) at ``F[f]``, ``F[f+1]``."""
    F[f] += flops
    F[f + 1] += bytes_


@jit
def segment_work_in_window(F, d, nb, ctx, tseg, t, k):
    """The measured work of ``k`` iterations from ``tseg`` (ending at ``t``): those started
    before the window's end, the last of them by the share of its time inside (window.py)."""
    ks = iterations_in(F, nb, ctx, tseg, t, k)
    flops, bytes_ = segment_totals(F, nb, ctx, ks)
    end = F[FP_TSTEADY]
    if t > end:
        a1, s1, a2, s2, o = coeffs(F, nb, ctx)
        t0 = tseg + series_time(a1, s1, a2, s2, o, ks - 1)
        t1 = tseg + series_time(a1, s1, a2, s2, o, ks)
        if t1 > end and t1 > t0:
            w = (end - t0) / (t1 - t0)
            w = 0.0 if w < 0.0 else w
            f0, b0 = segment_totals(F, nb, ctx, ks - 1)
            flops = f0 + w * (flops - f0)
            bytes_ = b0 + w * (bytes_ - b0)
    add_work(F, DF0 + d * NDF + DF_FLOPS, flops, bytes_)


@jit
def segment_power(F, d, nb, ctx, k):
    """Account the dynamic energy of ``k`` iterations (segment_totals) of ``d``."""
    flops, bytes_ = segment_totals(F, nb, ctx, k)
    a1, s1, a2, s2, o = coeffs(F, nb, ctx)
    dur = series_time(a1, s1, a2, s2, o, k)
    power_work(F, decode_record(F, d), FP_DC, F[FP_DC + C_FRD], flops, bytes_, dur)


@jit
def segment_totals(F, nb, ctx, k):
    """FLOPs and bytes of ``k`` closed-form iterations of a batch of ``nb`` sequences
    attending to ``ctx`` tokens at the first (iteration j attends to ctx + nb·j): the
    per-iteration terms of series.coeffs, summed over j."""
    c0 = FP_DC
    kf = float(k)
    toks = kf * ctx + nb * kf * (kf - 1.0) / 2.0  # context tokens attended, summed over j
    # --- speculative decoding: the verify pass and the draft steps per token
    g, tau = F[c0 + C_SG], F[c0 + C_STAU]
    flops = kf * nb * g * (F[c0 + C_LF] + F[c0 + C_LMH]) + F[c0 + C_ATT] * g * toks
    flops = (flops + (kf * nb * F[c0 + C_SDF] + F[c0 + C_SDA] * toks)) / tau
    bytes_ = kf * weights_read(F, c0, nb * int(g)) + F[c0 + C_KV] * toks
    bytes_ = (bytes_ + (kf * F[c0 + C_SDW] + F[c0 + C_SDKV] * toks)) / tau
    return flops, bytes_


@sig("void(int64[::1], float64[::1], int64, int64, boolean)")
def record_gaps(IS, F, d, k, first_token_in_batch):
    """Largest token gap per sequence over ``k`` closed-form iterations from ``t_seg``: the
    first iteration's gap runs from the sequence's previous token (so it includes a stall);
    later gaps are iteration times, largest at the first or last. With
    ``first_token_in_batch`` (disaggregated) a sequence whose first token is this
    iteration's has no gap yet."""
    b = DI0 + d * NDI
    n, ft = IS[IP_N], IS[H_FT]
    a1, s1, a2, s2, o = coeffs(F, IS[b + D_B], IS[b + D_CTX])
    worst = 0.0
    if k > 1:
        worst = a1 + s1 * (k - 1)
        if a2 + s2 * (k - 1) > worst:
            worst = a2 + s2 * (k - 1)
        if a1 > worst:
            worst = a1
        if a2 > worst:
            worst = a2
        worst = worst + o
    tseg = F[DF0 + d * NDF + DF_TSEG]
    t1 = tseg + series_time(a1, s1, a2, s2, o, 1)
    tk = tseg + series_time(a1, s1, a2, s2, o, k)
    rb = IS[H_DH] + 2 * IS[H_CAPB] * d + IS[H_CAPB]
    nw = F[G_ITL_NW]
    steady = 0
    # itl_add(F, g, 1) per gap, with the pooled sums kept in registers (the same additions
    # in the same order) and the bin's logarithm taken once per distinct gap: the
    # sequences that ran the previous segment all share one gap. The count and the bin's
    # count are integers (exact in a float below 2**53), so they are added once, after the
    # run of gaps they count, instead of one float addition per gap
    s_sum, s_min, s_max = F[G_ITL_SUM], F[G_ITL_MIN], F[G_ITL_MAX]
    last_g, last_bin, run = -1.0, 0, 0
    for i in range(IS[b + D_HSZ]):
        rid = IS[rb + i]
        g = t1 - F[ft + T_LAST * n + rid]
        if first_token_in_batch and F[ft + T_FT * n + rid] == t1:
            g = 0.0
        if rid >= nw:
            steady += 1
            if g > 0.0:
                if g != last_g:
                    F[G_ITL_H + last_bin] += run
                    F[G_ITL_CNT] += run
                    last_g, last_bin, run = g, itl_bin(g), 0
                s_sum += g
                run += 1
                if g < s_min:
                    s_min = g
                if g > s_max:
                    s_max = g
        m = g if g > worst else worst
        if m > F[ft + T_GAP * n + rid]:
            F[ft + T_GAP * n + rid] = m
        F[ft + T_LAST * n + rid] = tk
    F[G_ITL_H + last_bin] += run
    F[G_ITL_CNT] += run
    F[G_ITL_SUM], F[G_ITL_MIN], F[G_ITL_MAX] = s_sum, s_min, s_max
    itl_series(F, a1, s1, a2, s2, o, k, steady)


@sig("void(int64[::1], float64[::1], int64, float64, boolean)")
def stall_gaps(IS, F, d, end, emits):
    """Every running sequence of instance ``d`` waits until ``end`` for its next token (a
    colocated step); with ``emits`` the step gives each of them a token at ``end``."""
    b = DI0 + d * NDI
    n, ft = IS[IP_N], IS[H_FT]
    rb = IS[H_DH] + 2 * IS[H_CAPB] * d + IS[H_CAPB]
    for i in range(IS[b + D_HSZ]):
        rid = IS[rb + i]
        g = end - F[ft + T_LAST * n + rid]
        if g > F[ft + T_GAP * n + rid]:
            F[ft + T_GAP * n + rid] = g
        if emits:
            F[ft + T_LAST * n + rid] = end
            if rid >= F[G_ITL_NW]:
                itl_add(F, g, 1)


@jit
def account_segment(IS, F, d, t):
    """Instance ``d`` reaches ``t`` at the end of the segment it scheduled at DF_TSEG: its
    busy time, batch area and work inside the measured window; returns the iterations the
    segment advances by (D_NK)."""
    b = DI0 + d * NDI
    f = DF0 + d * NDF
    k = IS[b + D_NK]
    nb = IS[b + D_B]
    tseg = F[f + DF_TSEG]
    if (nb > 0 or IS[b + D_STALL]) and in_window(F, tseg):
        F[f + DF_BUSY] += clipped(F, tseg, t)
        F[G_BATCH_AREA] += nb * clipped(F, tseg, t)
        if k > 0:
            segment_work_in_window(F, d, nb, IS[b + D_CTX], tseg, t, k)
    if nb > 0 and k > 0 and in_energy_window(F, tseg):  # --- power: drain included
        segment_power(F, d, nb, IS[b + D_CTX], k)
    return k
