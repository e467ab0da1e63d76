"""The timeline log, written by the engine when recording is on, and its expansion.

Each record is two floats (start, end in seconds) in ``TLF`` and five ints (kind, track,
a, b, c; see ``layout.Rec``) in ``TLI``. The run loop grows both arrays before an event
could overflow them, like the event heap. After the run, ``expand`` turns the records into
slices with whole-nanosecond boundaries: a decode segment (k closed-form iterations of a
fixed batch) becomes one slice per iteration, its boundaries the same closed-form sums the
engine used, rounded to the nanosecond. Rounding boundaries (never durations) keeps slices
that touch in seconds touching in nanoseconds: slices on one track never overlap.
"""

from __future__ import annotations

import math

from .jit import entry, jit, sig
from .layout import GI_TLN, NTL_F, NTL_I, REC_DECODE
from .series import computed_coeffs, series_time


@sig(
    "void(float64[::1], int64[::1], int64[::1], int64, int64, float64, float64, int64, int64, int64)"
)
def record(TLF, TLI, IS, kind, track, t0, t1, a, b, c):
    """Append one record (the run loop made room)."""
    i = IS[GI_TLN]
    IS[GI_TLN] = i + 1
    TLF[NTL_F * i] = t0
    TLF[NTL_F * i + 1] = t1
    o = NTL_I * i
    TLI[o] = kind
    TLI[o + 1] = track
    TLI[o + 2] = a
    TLI[o + 3] = b
    TLI[o + 4] = c


@jit
def to_ns(t):
    """Seconds to whole nanoseconds, rounded to nearest."""
    return math.floor(t * 1e9 + 0.5)


@entry
def expand(TLF, TLI, n_rec, F, per_iteration, out_i, out_ns):
    """Fill the slice arrays: ``out_i`` rows (kind, track, a, b, c, iteration), ``out_ns``
    rows (start, end) in integer nanoseconds. Returns the number of slices written."""
    m = 0
    for r in range(n_rec):
        o = NTL_I * r
        kind, track, a, b, c = TLI[o], TLI[o + 1], TLI[o + 2], TLI[o + 3], TLI[o + 4]
        t0 = TLF[NTL_F * r]
        if kind == REC_DECODE and per_iteration:
            a1, s1, a2, s2, ov = computed_coeffs(F, a, c)  # F: parameters only
            prev = to_ns(t0)
            for j in range(1, b + 1):
                nxt = to_ns(t0 + series_time(a1, s1, a2, s2, ov, j))
                out_i[6 * m], out_i[6 * m + 1], out_i[6 * m + 2] = kind, track, a
                out_i[6 * m + 3], out_i[6 * m + 4], out_i[6 * m + 5] = 1, c, j
                out_ns[2 * m], out_ns[2 * m + 1] = prev, nxt
                prev = nxt
                m += 1
        else:
            out_i[6 * m], out_i[6 * m + 1], out_i[6 * m + 2] = kind, track, a
            out_i[6 * m + 3], out_i[6 * m + 4], out_i[6 * m + 5] = b, c, 0
            out_ns[2 * m] = to_ns(t0)
            out_ns[2 * m + 1] = to_ns(TLF[NTL_F * r + 1])
            m += 1
    return m
