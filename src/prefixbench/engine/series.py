"""The cost model's step times, compiled (the same operations as costmodel.py, in the same
order, so the engine's numbers equal the cost model's bit for bit).

A fixed decode batch's iteration j costs max(a1 + s1·j, a2 + s2·j) + overhead (compute and
memory rooflines, both linear in j as the context grows), so k iterations cost a closed-form
sum and the engine advances a batch by events, never by tokens.
"""

from __future__ import annotations

import math

import numpy as np

from .jit import entry_sig, jit, sig
from .layout import (
    C_AR,
    C_ATT,
    C_BR,
    C_CFX,
    C_CPT,
    C_DOV,
    C_EF,
    C_EW,
    C_FRD,
    C_FRP,
    C_GH,
    C_KR,
    C_KV,
    C_LF,
    C_LMH,
    C_POV,
    C_SDKV,
    C_SDW,
    C_SG,
    C_STAU,
    C_W,
    FP_DC,
    G_CO_A1,
    G_CO_A2,
    G_CO_B,
    G_CO_C,
    G_CO_O,
    G_CO_S1,
    G_CO_S2,
)


@sig("float64(float64[::1], int64, float64)")
def weights_read_tokens(F, c0, tokens):
    """weights_read of a fractional token count (the expected experts touched are a
    continuous function of it: a speculative mixed iteration carries τ·c chunk tokens)."""
    ew = F[c0 + C_EW]
    if ew == 0.0:
        return F[c0 + C_W]
    touched = 1.0 - (1.0 - F[c0 + C_EF]) ** tokens
    return F[c0 + C_W] + ew * touched


@sig("float64(float64[::1], int64, int64)")
def weights_read(F, c0, batch):
    """Weight bytes one step reads (InstanceCost.weights_read): the dense part plus the
    experts ``batch`` tokens touch."""
    return weights_read_tokens(F, c0, float(batch))


@sig("float64(float64[::1], int64, float64, float64, float64)")
def gemm_time(F, c0, flops, tokens, rate):
    """Compute time of a step's GEMMs at eff(T) (costmodel.gemm_time): 0 for no tokens."""
    if tokens <= 0.0:
        return 0.0
    return flops * (tokens + F[c0 + C_GH]) / (tokens * rate)


@sig("float64(float64[::1], int64, float64, float64, float64, float64, float64, float64)")
def op_time(F, c0, gemm, tokens, rate, wbytes, attn, kv_io):
    """Σ over the step's operators of max(compute, memory) (costmodel.operator_time): the
    GEMMs (``wbytes`` of weights) plus attention (``kv_io`` bytes of KV)."""
    tg = gemm_time(F, c0, gemm, tokens, rate)
    mem = wbytes / F[c0 + C_BR]
    if mem > tg:
        tg = mem
    ta = attn / F[c0 + C_AR]
    kvt = kv_io / F[c0 + C_KR]
    if kvt > ta:
        ta = kvt
    return tg + ta


@sig("float64(float64[::1], int64, float64)")
def comm(F, c0, tokens):
    """Fabric time of a step of ``tokens`` tokens (InstanceCost.comm_time): TP all-reduces,
    PP stage transfers, EP all-to-alls; exactly 0.0 on the ideal fabric or one device."""
    return tokens * F[c0 + C_CPT] + F[c0 + C_CFX]


@sig("float64(float64[::1], int64, float64, float64, int64, float64)")
def prefill_step_time(F, c0, gemm, attn, new_tokens, kv_io):
    """A prefill step of ``new_tokens`` (summed over its prompts: ``gemm`` and ``attn``
    FLOPs, ``kv_io`` bytes of KV written and read): the operators at the prefill rates
    (costmodel.prefill_times), plus the fixed cost and the fabric."""
    t = new_tokens * 1.0
    return (
        op_time(F, c0, gemm, t, F[c0 + C_FRP], weights_read(F, c0, new_tokens), attn, kv_io)
        + F[c0 + C_POV]
        + comm(F, c0, t)
    )


@sig("float64(float64[::1], int64, float64, float64)")
def decode_fixed(F, c0, batch, g):
    """The GEMM operator of a decode iteration verifying ``g`` tokens per sequence
    (costmodel.decode_fixed)."""
    tokens = batch * g
    gemm = tokens * (F[c0 + C_LF] + F[c0 + C_LMH])
    t_c = gemm * (tokens + F[c0 + C_GH]) / (tokens * F[c0 + C_FRD])
    t_m = weights_read_tokens(F, c0, tokens) / F[c0 + C_BR]
    return t_c if t_c > t_m else t_m


@jit
def _lin_sum(a, s, j0, j1):
    """Sum over integer j in [j0, j1) of a + s·j."""
    n = j1 - j0
    if n <= 0:
        return 0.0
    return n * a + s * (j0 + j1 - 1.0) * n / 2.0


# entry: costmodel.series_time calls it from Python too (a helper without a CPython
# wrapper would crash there)
@entry_sig("float64(float64, float64, float64, float64, float64, int64)")
def series_time(a1, s1, a2, s2, o, k):
    """Time of the first ``k`` iterations of a fixed batch (costmodel.series_time)."""
    if k <= 0:
        return 0.0
    last = k - 1
    kf = float(k)
    first = a1 >= a2
    # equal slopes never cross (a rounding tie at the end is not a switch)
    if s1 == s2 or first == (a1 + s1 * last >= a2 + s2 * last):
        if first:
            return kf * o + _lin_sum(a1, s1, 0.0, kf)
        return kf * o + _lin_sum(a2, s2, 0.0, kf)
    # the dominant roofline term switches once, at j = x in (0, last]
    x = (a2 - a1) / (s1 - s2)
    c = np.ceil(x)
    if 1.0 > c:
        c = 1.0
    if last < c:
        c = float(last)
    if first:
        return kf * o + _lin_sum(a1, s1, 0.0, c) + _lin_sum(a2, s2, c, kf)
    return kf * o + _lin_sum(a2, s2, 0.0, c) + _lin_sum(a1, s1, c, kf)


@entry_sig("int64(float64, float64, float64, float64, float64, float64, int64)")
def iterations_within(a1, s1, a2, s2, o, elapsed, k_max):
    """Largest k <= k_max with series_time(k) <= elapsed (costmodel.iterations_within)."""
    if elapsed < 0.0:
        return 0
    if series_time(a1, s1, a2, s2, o, k_max) <= elapsed:
        return k_max
    if a1 >= a2:
        a, s = a1, s1
    else:
        a, s = a2, s2
    a += o
    if s > 0.0:
        b = a - s / 2.0
        guess = (-b + math.sqrt(b * b + 2.0 * s * elapsed)) / s
    elif a > 0.0:
        guess = elapsed / a
    else:
        guess = 0.0
    v = guess
    if float(k_max - 1) < v:
        v = float(k_max - 1)
    lo = int(v) if v > 0.0 else 0
    for _ in range(3):
        if series_time(a1, s1, a2, s2, o, lo) > elapsed:
            lo -= 1
        elif series_time(a1, s1, a2, s2, o, lo + 1) <= elapsed:
            lo += 1
        else:
            return lo
    lo, hi = 0, k_max
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if series_time(a1, s1, a2, s2, o, mid) <= elapsed:
            lo = mid
        else:
            hi = mid
    return lo


@jit
def coeffs(F, batch, ctx):
    """(a1, s1, a2, s2, overhead) of a decode batch (costmodel.decode_series_coeffs); the
    overhead includes the batch's fabric time, constant while the batch is. The last batch
    and context asked for keep their coefficients in ``F`` (layout.G_CO_*): a boundary, its
    schedule, the interrupts and the paged books between two changes of the batch all ask
    for the same ones, and each costs six divisions."""
    if F[G_CO_B] == batch and F[G_CO_C] == ctx:
        return F[G_CO_A1], F[G_CO_S1], F[G_CO_A2], F[G_CO_S2], F[G_CO_O]
    a1, s1, a2, s2, o = computed_coeffs(F, batch, ctx)
    F[G_CO_B], F[G_CO_C] = batch, ctx
    F[G_CO_A1], F[G_CO_S1], F[G_CO_A2], F[G_CO_S2], F[G_CO_O] = a1, s1, a2, s2, o
    return a1, s1, a2, s2, o


@jit
def computed_coeffs(F, batch, ctx):
    """coeffs without the memo: for an ``F`` holding only the parameters (the timeline's
    copy, engine/timeline.py), which has no G_CO_* slots to write."""
    c0 = FP_DC
    ar, kr, br = F[c0 + C_AR], F[c0 + C_KR], F[c0 + C_BR]
    att, kv = F[c0 + C_ATT], F[c0 + C_KV]
    g, tau = F[c0 + C_SG], F[c0 + C_STAU]
    ver = batch * int(g)
    fixed = decode_fixed(F, c0, float(batch), g)
    if g == 1.0 and tau == 1.0:  # plain decode: only attention depends on j
        a1 = att * ctx / ar
        s1 = att * batch / ar
        a2 = kv * ctx / kr
        s2 = kv * batch / kr
        return a1, s1, a2, s2, fixed + F[c0 + C_DOV] + (batch * F[c0 + C_CPT] + F[c0 + C_CFX])
    # --- speculative decoding: verify g tokens per sequence, the draft's memory-bound
    # steps added to both attention terms, all divided by the expected tokens tau
    dkv = F[c0 + C_SDKV] / kr
    a1 = (att * g * ctx / ar + dkv * ctx) / tau
    s1 = (att * g * batch / ar + dkv * batch) / tau
    a2 = (kv * ctx / kr + dkv * ctx) / tau
    s2 = (kv * batch / kr + dkv * batch) / tau
    o = (fixed + F[c0 + C_DOV] * g + comm(F, c0, float(ver)) + F[c0 + C_SDW] / br) / tau
    return a1, s1, a2, s2, o
