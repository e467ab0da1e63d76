"""The run loops: pop the next event, hand it to its mode's handler, until none is left.

Each loop returns to Python when the event heap or the timeline log might overflow
(``NEED_HEAP``, ``NEED_LOG``); the caller grows the array and calls again, so capacity
grows on demand and nothing is allocated in compiled code. The run's end time is the last
event that did something: a stale timeout (its request was admitted or rejected meanwhile)
does not stretch the measured window.
"""

from __future__ import annotations

from . import colocated as co
from . import disagg as dis
from . import paging as pg
from . import warmup as wu
from .jit import entry, jit
from .layout import (
    EV_DECODE,
    EV_PREFILL,
    EV_TIMEOUT,
    EV_TRANSFER,
    FP_TWARM,
    G_NOW,
    GI_HSZ,
    GI_INSYS,
    GI_TLN,
    IP_HOLD,
    IP_N,
    IP_ND,
    IP_NP,
    IP_REC,
    NTL_F,
)
from .queues import pop

DONE, NEED_HEAP, NEED_LOG = 0, 1, 2
# STALLED + 2·kind + (a < 0): more events than stall_limit in a row left the clock where it
# was (a period or a step below the float resolution of the time); api.py names the field
STALLED = 8


@entry
def stall_limit(IS):
    """Events that may legitimately share one timestamp: a few per request (arrivals at the
    same instant, their queueing and admissions) and per instance, with a wide margin."""
    return 8 * IS[IP_N] + 64 * (IS[IP_ND] + IS[IP_NP]) + 4096


@jit
def stalled(kind, a):
    return STALLED + 2 * kind + (1 if a < 0 else 0)


@entry
def heap_room(IS):
    """Event heap entries one more event may need: a handler pushes at most two events per
    request in the system, plus two."""
    return IS[GI_HSZ] + 2 * IS[GI_INSYS] + 4


@entry
def log_room(IS):
    """Timeline records one more event may need (two per request in the system, plus the
    step, segment and counters of the instance it concerns), and the final counters."""
    return IS[GI_TLN] + 2 * IS[GI_INSYS] + IS[IP_ND] + 8


@jit
def next_event(IS, EHT, EHI, TLF):
    """(DONE, the next event) if handling it cannot overflow the event heap or the timeline
    log, else (which array must grow first, nothing popped)."""
    if heap_room(IS) > EHT.shape[0]:
        return NEED_HEAP, 0.0, 0, 0, 0
    if IS[IP_REC] and log_room(IS) > TLF.shape[0] // NTL_F:
        return NEED_LOG, 0.0, 0, 0, 0
    t, kind, a, b = pop(EHT, EHI, IS)
    return DONE, t, kind, a, b


@entry
def run_disaggregated(IS, F, R, B32, B8, EHT, EHI, TLF, TLI, bid, bt):
    """Handle events until none is left (DONE), an array must grow (NEED_*) or time stops
    advancing (STALLED + ...)."""
    last, same, limit = -1.0, 0, stall_limit(IS)
    while IS[GI_HSZ] > 0:
        status, t, kind, a, b = next_event(IS, EHT, EHI, TLF)
        if status != DONE:
            return status
        if t == last:
            same += 1
            if same > limit:
                return stalled(kind, a)
        else:
            last, same = t, 0
        if kind == EV_DECODE:
            dis.decode_boundary(IS, F, R, B32, B8, EHT, EHI, TLF, TLI, bid, bt, a, b, t)
        elif kind == EV_TRANSFER:
            if a < 0:  # a decode instance's prewarm (warmup.py): not request activity
                wu.landed(IS, B32, B8, -a - 1)
                continue
            if b == 1:  # paged swap: a preempted sequence's KV is back from host memory
                pg.swapped_in(IS, F, R, EHT, EHI, a, t)
            else:
                dis.landed(IS, F, R, B8, EHT, EHI, bid, a, t)
        elif kind == EV_PREFILL:
            dis.prefill_done(IS, F, R, B32, B8, EHT, EHI, TLF, TLI, bid, bt, a, t)
        elif kind == EV_TIMEOUT:
            if a < 0:  # the hot set's refresh (warmup.refresh): not request activity
                wu.refresh(IS, F, R, B32, B8, EHT, EHI, TLF, TLI, t)
                continue
            if not dis.timeout(IS, F, R, a, t):
                continue
        else:
            dis.arrive(IS, F, R, B32, B8, EHT, EHI, TLF, TLI, bid, bt, a, t)
        if IS[IP_HOLD]:  # --- admit: held KV freed by this event restarts a stalled prefill
            dis.kick_prefills(IS, F, R, B32, B8, EHT, EHI, TLF, TLI, bid, bt, t)
        F[G_NOW] = t
    return DONE


@entry
def run_colocated(IS, F, R, B32, EHT, EHI, TLF, TLI, bid, bt):
    """The colocated loop (its instances have no link and no hand-off)."""
    last, same, limit = -1.0, 0, stall_limit(IS)
    while IS[GI_HSZ] > 0:
        status, t, kind, a, b = next_event(IS, EHT, EHI, TLF)
        if status != DONE:
            return status
        if t == last:
            same += 1
            if same > limit:
                return stalled(kind, a)
        else:
            last, same = t, 0
        if kind == EV_DECODE:
            co.boundary(IS, F, R, B32, EHT, EHI, TLF, TLI, bid, bt, a, b, t)
        elif kind == EV_TIMEOUT:
            if not co.timeout(IS, F, a, t):
                continue
        else:
            co.arrive(IS, F, R, EHT, EHI, a, t)
        F[G_NOW] = t
    return DONE


@entry
def close_run(IS, F, TLF, TLI):
    """The end of the run: integrate memory up to t_end (left in F[G_NOW])."""
    t_end = F[G_NOW]
    if F[FP_TWARM] > t_end:
        t_end = F[FP_TWARM]
    for d in range(IS[IP_ND]):
        dis.mem_changed(IS, F, TLF, TLI, d, t_end)
    F[G_NOW] = t_end
