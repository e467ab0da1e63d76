"""Generated tokens in the decode cache (docs/model.md §1.10.1).

When a sequence finishes, the full blocks of its answer (``Requests.ans_*``, laid after
the chains in the block ids; offsets at ``ans_base``) join its decode instance's replicas
under the replicating policies, as SGLang's ``cache_finished_req`` inserts
``origin_input_ids + output_ids`` into the radix tree and vLLM hashes decode blocks as they
fill. They are idle (nobody holds them) and ready; a later turn whose chain continues into
them hits them like any replica, and a trim demotes them to the host tier like any other.
"""

from __future__ import annotations

from . import layout as L
from .hosttier import ht_base, ht_write_run
from .jit import jit
from .queues import lru_append


@jit
def ans_base(IS):
    """Offset in ``IS`` of the answers' n + 1 block offsets (right after the chains')."""
    return IS[L.H_PTR] + IS[L.IP_N] + 1


@jit
def _kept(IS, F, B32, B8, d, h, hbase):
    """Whether answer block ``h`` may join ``d``'s replicas: in neither tier yet, and the
    policy keeps it (all-LRU, tiered, cost_aware and conditional_disagg: always; hot set: a
    hot block)."""
    if B8[d * IS[L.IP_U] + h] & L.ST_IN:
        return False
    if hbase >= 0 and B32[hbase + 4 * h + L.HT_IN]:
        return False
    policy = IS[L.IP_POLICY]
    if policy == L.POL_HOTSET:
        return B8[IS[L.H_HOT] + h] != 0
    return True


@jit
def keep_answer(IS, F, B32, B8, bid, bt, rid, d):
    """Request ``rid`` finished on ``d`` (its private KV already released): its answer blocks
    become idle ready replicas, root first while they fit the free memory (the rest are
    dropped), linked tail first and before the chain is released, so the chain's root stays
    the freshest idle block. Returns the tokens kept."""
    policy = IS[L.IP_POLICY]
    ap = ans_base(IS)
    a0, a1 = IS[ap + rid], IS[ap + rid + 1]
    if policy < L.POL_HOTSET or a1 == a0:
        return 0
    b = L.DI0 + d * L.NDI
    hbase = -1
    if policy == L.POL_TIERED or policy == L.POL_COST_AWARE:
        hbase = ht_base(IS, d)
    free = IS[L.IP_BUDGET] - IS[b + L.D_PRIV] - IS[b + L.D_USED]
    end = a0  # the leading answer blocks that fit
    for j in range(a0, a1):
        if _kept(IS, F, B32, B8, d, bid[j], hbase):
            if bt[j] > free:
                break
            free -= bt[j]
        end = j + 1
    rs = 4 * IS[L.IP_U] * d
    kept = 0
    for j in range(end - 1, a0 - 1, -1):
        h = bid[j]
        if _kept(IS, F, B32, B8, d, h, hbase):
            B32[rs + 4 * h + L.RS_TOK] = bt[j]
            B32[rs + 4 * h + L.RS_REF] = 0
            B8[d * IS[L.IP_U] + h] = L.ST_IN | L.ST_READY | L.ST_INACT
            lru_append(B32, IS, b + L.D_LRUH, rs, L.RS_PREV, L.RS_NEXT, h)
            IS[b + L.D_USED] += bt[j]
            IS[b + L.D_IDLE] += bt[j]
            kept += bt[j]
    return kept


@jit
def write_through_finished(IS, F, R, B32, B8, bid, rid, d, t):
    """write_through (``IP_HWP`` 1): a finished request's blocks enter the host tier as
    SGLang's decode radix inserts them at finish: its chain past its HBM hit, then its
    answer, root first, each resident and ready block without a host copy."""
    policy = IS[L.IP_POLICY]
    if IS[L.IP_HWP] != 1 or not (policy == L.POL_TIERED or policy == L.POL_COST_AWARE):
        return
    ptr, ap = IS[L.H_PTR], ans_base(IS)
    i0 = IS[ptr + rid] + R[rid * L.NR + L.R_NHIT]
    ht_write_run(IS, F, B32, B8, bid, d, i0, IS[ptr + rid + 1], t)
    ht_write_run(IS, F, B32, B8, bid, d, IS[ap + rid], IS[ap + rid + 1], t)
