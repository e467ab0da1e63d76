"""The host<->GPU path of each decode instance: one FCFS queue (docs/model.md, "Host tier").

Promotions (host to HBM) and demotions (HBM to host) contend on it in the order they are
issued. A move occupies the path for ``bytes / rate`` and lands ``latency`` later (the
latency is pipelined, as on the KV link). ``rate`` is the instance's aggregate: one path per
device, the KV sharded over them like the NICs (runner.host_path_rate). Both the host tier
(hosttier.py) and paged swap (paging.py) use it. Its busy time counts the steady window
(window.py) like every other utilisation; its bytes count every move after warm-up.
"""

from __future__ import annotations

from . import layout as L
from .jit import jit
from .window import clipped


@jit
def host_path_free(F, d, t):
    """When a move issued at ``t`` on decode ``d``'s path would start."""
    f = L.DF0 + d * L.NDF
    return t if F[f + L.DF_HP_FREE] <= t else F[f + L.DF_HP_FREE]


@jit
def host_path_move(IS, F, d, t, nbytes):
    """Queue ``nbytes`` on decode ``d``'s host path at ``t``; returns when they land."""
    f = L.DF0 + d * L.NDF
    start = host_path_free(F, d, t)
    occupy = nbytes / F[f + L.DF_HP_BPS]
    F[f + L.DF_HP_FREE] = start + occupy
    F[f + L.DF_HP_BUSY] += clipped(F, start, start + occupy)  # the steady window (paged)
    if start >= F[L.FP_TWARM]:
        F[f + L.DF_HP_BYTES] += nbytes
    return start + occupy + F[f + L.DF_HP_LAT]
