"""The steady window (docs/model.md "Utilisation"): from the end of warm-up (the first
measured arrival) to the last arrival, so the drain after the last arrival, when load falls
to nothing, does not dilute busy times. A step or decode segment counts when it starts in
the window; its busy time is clipped at the window's end, and so is its work: a step that
runs past the end counts the share of its FLOPs and bytes that falls inside (its time
share; a decode segment counts its iterations started inside, the last one by its share),
so no instance reports more work than its busy time at the roofline could do.
"""

from __future__ import annotations

from . import layout as L
from .jit import jit
from .series import coeffs, iterations_within


@jit
def in_window(F, t):
    """A step starting at ``t`` is measured."""
    return F[L.FP_TWARM] <= t < F[L.FP_TSTEADY]


@jit
def in_energy_window(F, t):
    """A step starting at ``t`` counts towards energy: from the end of warm-up to the end of
    the run, the window idle power is charged over (docs/model.md §2.11)."""
    return F[L.FP_TWARM] <= t


@jit
def clipped(F, t0, t1):
    """Measured busy time of a step from ``t0`` to ``t1`` (0 unless it starts in the window)."""
    if not in_window(F, t0):
        return 0.0
    if t1 > F[L.FP_TSTEADY]:
        return F[L.FP_TSTEADY] - t0
    return t1 - t0


@jit
def work_share(F, t0, t1):
    """Share of a step from ``t0`` to ``t1`` whose work is measured: 0 unless it starts in
    the window, else the part of its time before the window's end."""
    if not in_window(F, t0):
        return 0.0
    end = F[L.FP_TSTEADY]
    if t1 <= end or t1 <= t0:
        return 1.0
    return (end - t0) / (t1 - t0)


@jit
def add_step_work(F, f, flops, bytes_, t0, t1):
    """FLOPs and bytes of a step from ``t0`` to ``t1`` at ``F[f]``, ``F[f+1]``, in the share
    measured (work_share)."""
    w = work_share(F, t0, t1)
    if w > 0.0:
        F[f] += w * flops
        F[f + 1] += w * bytes_


@jit
def iterations_in(F, nb, ctx, tseg, t, k):
    """Of ``k`` closed-form iterations from ``tseg`` (ending at ``t``), those started before
    the window's end."""
    end = F[L.FP_TSTEADY]
    if t <= end:
        return k
    a1, s1, a2, s2, o = coeffs(F, nb, ctx)
    m = iterations_within(a1, s1, a2, s2, o, end - tseg, k) + 1
    return m if m < k else k
