"""The steady window (docs/model.md "Utilisation"): from the end of warm-up (the first
measured arrival) to the last arrival, so the drain after the last arrival, when load falls
to nothing, does not dilute busy times. A step or decode segment counts when it starts in
the window; its busy time is clipped at the window's end, a segment's work to the
iterations started in it.
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
def iterations_in(F, nb, ctx, tseg, t, k):
    """Of ``k`` closed-form iterations from ``tseg`` (ending at ``t``), those started before
    the window's end."""
    end = F[L.FP_TSTEADY]
    if t <= end:
        return k
    a1, s1, a2, s2, o = coeffs(F, nb, ctx)
    m = iterations_within(a1, s1, a2, s2, o, end - tseg, k) + 1
    return m if m < k else k
