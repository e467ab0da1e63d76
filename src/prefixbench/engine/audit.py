"""Conservation checks on a finished run's state (for tests and debugging).

``simulate(..., keep_state=True)`` keeps the flat state on ``SimResult.state``; ``audit``
lists what is wrong with it: a request that did not end exactly once, KV or replica
references left behind, queues or batches not drained, replica accounting that does not
add up. The engine itself asserts at every memory change that decode KV stays within the
budget.
"""

from __future__ import annotations

import numpy as np

from . import layout as L


def _host_tier(IS, B32, d: int, in_hbm: np.ndarray) -> list[str]:
    """replicate_tiered's host pool of decode ``d``: its tokens add up, stay within the
    pool, and no block is in both HBM and host."""
    U, D, P = int(IS[L.IP_U]), int(IS[L.IP_ND]), int(IS[L.IP_NP])
    b = L.DI0 + d * L.NDI
    o = 4 * U * (D + P) + 4 * U * d
    if B32.shape[0] < o + 4 * U:  # no host tier allocated (other policies)
        return [] if IS[b + L.D_HUSED] == 0 else [f"decode {d}: host tokens without a tier"]
    rec = B32[o : o + 4 * U].reshape(U, 4) if U else np.zeros((0, 4), np.int32)
    host = rec[:, L.HT_IN] != 0
    out = []
    if int(rec[host, L.HT_TOK].sum()) != IS[b + L.D_HUSED]:
        out.append(f"decode {d}: host tier tokens do not add up")
    if IS[b + L.D_HUSED] > IS[b + L.D_HCAP] or IS[b + L.D_HPEAK] > IS[b + L.D_HCAP]:
        out.append(f"decode {d}: host tier over its pool")
    if (host & in_hbm).any():
        out.append(f"decode {d}: a block in both HBM and the host tier")
    return out


def audit(state) -> list[str]:
    """Problems with a disaggregated run's final state (empty when it is consistent)."""
    IS, B32, B8 = state.IS, state.B32, state.B8
    n, U = int(IS[L.IP_N]), int(IS[L.IP_U])
    D, P = int(IS[L.IP_ND]), int(IS[L.IP_NP])
    io = int(IS[L.H_O])
    out = IS[io + L.O_OUT * n : io + (L.O_OUT + 1) * n]
    problems = []
    if not np.isin(out, (L.OUT_COMPLETED, L.OUT_REJECTED)).all():
        problems.append("a request never ended")
    if IS[L.GI_INSYS] != 0:
        problems.append(f"{IS[L.GI_INSYS]} requests still in the system")
    for d in range(D):
        b = L.DI0 + d * L.NDI
        rec = B32[4 * U * d : 4 * U * (d + 1)].reshape(U, 4) if U else np.zeros((0, 4), np.int32)
        st = B8[d * U : (d + 1) * U]
        present = (st & L.ST_IN) != 0
        for name, field in (("batch", L.D_B), ("private KV", L.D_PRIV), ("load", L.D_LOAD)):
            if IS[b + field] != 0:
                problems.append(f"decode {d}: {name} {IS[b + field]} left at the end")
        queues = (("join", L.D_JQH), ("recompute", L.D_RQH), ("wait", L.D_WQH), ("resume", L.D_PQH))
        for name, head in queues:
            if IS[b + head] != -1:
                problems.append(f"decode {d}: {name} queue not empty")
        if IS[b + L.D_HSZ] != 0:
            problems.append(f"decode {d}: batch heap not empty")
        if (rec[:, L.RS_REF] != 0).any():
            problems.append(f"decode {d}: replica references left")
        if int(rec[present, L.RS_TOK].sum()) != IS[b + L.D_USED]:
            problems.append(f"decode {d}: resident replica tokens do not add up")
        if (present & ((st & L.ST_READY) == 0)).any():
            problems.append(f"decode {d}: a replica never landed but was kept")
        idle = present & ((st & L.ST_INACT) != 0)
        if int(rec[idle, L.RS_TOK].sum()) != IS[b + L.D_IDLE]:
            problems.append(f"decode {d}: idle replica tokens do not add up")
        if IS[b + L.D_USED] > IS[L.IP_BUDGET]:
            problems.append(f"decode {d}: replicas over the KV budget")
        problems += _host_tier(IS, B32, d, present)
    for p in range(P):
        pb = int(IS[L.H_PI]) + p * L.NPI
        if IS[pb + L.P_LOAD] != 0 or IS[pb + L.P_QH] != -1 or IS[pb + L.P_BH] != -1:
            problems.append(f"prefill {p}: work left at the end")
    return problems
