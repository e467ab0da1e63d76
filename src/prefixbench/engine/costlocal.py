"""``cost_aware``'s fourth option: a local prefill on the decode instance, decided at
arrival (docs/model.md §1.14.1).

Before a prefill instance sees the request, ``cost_aware`` prices the two paths with what
the schedulers know at that moment and takes the cheaper (ties: remote):

* **local** on the candidate decode instance (the one holding the longest ready run of the
  request's blocks; ties: fewest requests handed to it, lowest index): its ``prompt − hit``
  uncached tokens as chunks in the decode iterations (conditional_disagg's mechanism,
  engine/recompute.py), priced as the recompute option is (costaware.recompute_time after
  the queued jobs, plus ``extra × batch``, the TPOT delay it imposes). Admission pressure:
  it is a candidate only if the instance admits it now without trimming, with nobody
  queued for admission or preempted there, and with ``prompt + output − hit`` tokens free
  (a local prefill holds decode memory from its arrival on, a remote one only from its
  hand-off);
* **remote**: the least loaded prefill instance's queued and running prompt tokens as one
  step, then its own step (its prefill-cache hit there), then its ``prompt − hit`` tokens
  of KV over the link at the group rate, without the NIC queues.

A remote request is then handed off as ``cost_aware`` always does (transfer, promotion or
recompute, costaware.choose).
"""

from __future__ import annotations

import numpy as np

from . import ced
from . import layout as L
from .blocks import decode_hit, prefill_hit
from .costaware import recompute_start, recompute_time
from .jit import jit
from .series import prefill_step_time


@jit
def candidate(IS, B8, bid, bt, rid):
    """The decode instance holding the longest ready run of ``rid``'s blocks (ties: fewest
    requests handed to it and not yet ended, then the lowest index)."""
    best, best_k = 0, np.int64(-1)
    for d in range(IS[L.IP_ND]):
        k, _ = decode_hit(IS, B8, bid, bt, rid, d)
        load = IS[L.DI0 + d * L.NDI + L.D_LOAD]
        if k > best_k or (k == best_k and load < IS[L.DI0 + best * L.NDI + L.D_LOAD]):
            best, best_k = d, k
    return best


@jit
def step_alone(F, n, hit):
    """A prefill step of one prompt of ``n`` new tokens after ``hit`` cached ones
    (disagg.start_prefill's sums for a single request)."""
    c0 = L.FP_PC
    prompt = n + hit
    gemm = n * F[c0 + L.C_LF] + F[c0 + L.C_LMH] + ced.replay_flops(F, c0, prompt)
    attn = F[c0 + L.C_ATT] * (n * hit + n * (n + 1) / 2.0)
    kv_io = F[c0 + L.C_KV] * prompt
    replayed = ced.replay_tokens(F, c0, prompt)
    return prefill_step_time(F, c0, gemm, attn, n, kv_io) + F[c0 + L.C_CEDC] * replayed


@jit
def remote_cost(IS, F, R, B32, bid, bt, rid, hit_tok):
    """Seconds until ``rid`` would be ready on decode if prefilled remotely."""
    npf = IS[L.IP_NP]
    p = 0
    for i in range(1, npf):
        if IS[IS[L.H_PI] + i * L.NPI + L.P_LOAD] < IS[IS[L.H_PI] + p * L.NPI + L.P_LOAD]:
            p = i
    queued = np.int64(IS[IS[L.H_PI] + p * L.NPI + L.P_LOAD])
    prompt = np.int64(R[rid * L.NR + L.R_PROMPT])
    ph = np.int64(prefill_hit(IS, R, B32, p, bid, bt, rid))
    wait = step_alone(F, queued, np.int64(0)) if queued > 0 else 0.0
    cost = wait + step_alone(F, prompt - ph, ph)
    nbytes = (prompt - hit_tok) * F[L.FP_DC + L.C_KV]
    if nbytes > 0:
        cost = cost + nbytes / F[L.FP_LINK_BPS] + F[L.FP_LINK_LAT]
    return cost


@jit
def prefills_locally(IS, F, R, B32, B8, bid, bt, rid, d, t):
    """Whether ``cost_aware`` prefills ``rid`` on decode instance ``d`` (the cheaper path;
    ties: remote)."""
    b = L.DI0 + d * L.NDI
    prompt = np.int64(R[rid * L.NR + L.R_PROMPT])
    _, hit = decode_hit(IS, B8, bid, bt, rid, d)
    free = IS[L.IP_BUDGET] - IS[b + L.D_PRIV] - IS[b + L.D_USED]
    if IS[b + L.D_WQH] != -1 or IS[b + L.D_PQH] != -1:
        return False
    if free < prompt + R[rid * L.NR + L.R_OUTPUT] - hit:
        return False
    span, extra = recompute_time(IS, F, d, prompt - hit, hit)
    local = recompute_start(IS, F, R, d, t) + span - t + IS[b + L.D_B] * extra
    return local < remote_cost(IS, F, R, B32, bid, bt, rid, hit)
