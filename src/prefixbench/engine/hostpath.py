"""The decode instance's host<->GPU path: one FCFS queue per decode instance, shared by both
directions (swap-out and swap-in, host-tier loads), with its free and busy time in F.

A move of ``nbytes`` (the instance's bytes; a TP instance has one path per device, so the
instance rate FP_HOST_BPS is the per-device bandwidth times the devices, as the NIC sharding
does) takes latency + bytes / rate once the path is free.
"""

from __future__ import annotations

from . import layout as L
from .jit import jit
from .window import clipped


@jit
def host_path_move(IS, F, d, t, nbytes):
    """Queue ``nbytes`` on decode instance ``d``'s host path at ``t``; returns when it ends."""
    f = L.DF0 + d * L.NDF
    start = t
    if F[f + L.DF_HOST_FREE] > start:
        start = F[f + L.DF_HOST_FREE]
    occupy = nbytes / F[L.FP_HOST_BPS]
    F[f + L.DF_HOST_FREE] = start + occupy
    F[f + L.DF_HOST_BUSY] += clipped(F, start, start + occupy)
    return start + occupy + F[L.FP_HOST_LAT]
