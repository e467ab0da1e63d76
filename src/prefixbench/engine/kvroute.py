"""KV-aware routing: cache overlap weighed against load, as NVIDIA Dynamo's KV router
scores workers (docs/model.md "KV-aware routing").

Dynamo (ai-dynamo/dynamo lib/llm/src/kv_router/scheduler.rs, the worker selector's cost
function) gives each worker the logit ``w · potential_prefill_blocks + decode_blocks`` and
takes the lowest (temperature 0, its default): the blocks the request would still have to
prefill there, after the worker's cached overlap, weighed by ``w``
(``--kv-overlap-score-weight``, default 1) against the blocks the worker already carries.
Here, in tokens (a common factor of the block size changes no choice):

* prefill instance ``p``: ``w · (prompt − hit_p) + queued_p``, where ``hit_p`` is the
  leading run of the prompt in ``p``'s prefix cache (at most ``prompt − 1``: the last
  token is always computed) and ``queued_p`` the prompt tokens queued and running there
  (the load ``least_tokens`` balances);
* decode instance ``d``: ``w · (prompt − hit_d) + active_d``, where ``hit_d`` is the
  leading run resident and ready there and ``active_d`` the prompt and output tokens of
  the requests admitted there and not finished (the KV they hold by their last token:
  Dynamo counts the active sequences' blocks; the whole sequence, rather than the tokens
  generated so far, prices paged and reserved admission alike).

Ties go to the lowest index. ``w = 0`` is pure load balancing.
"""

from __future__ import annotations

from . import layout as L
from .blocks import decode_hit, prefill_hit
from .jit import jit


@jit
def prefill_cost(IS, F, R, B32, bid, bt, rid, p):
    """Prefill instance ``p``'s score for ``rid`` (lower is better)."""
    prompt = R[rid * L.NR + L.R_PROMPT]
    hit = prefill_hit(IS, R, B32, p, bid, bt, rid)
    load = IS[IS[L.H_PI] + p * L.NPI + L.P_LOAD]
    return F[L.FP_KVW] * (prompt - hit) + load


@jit
def decode_cost(IS, F, R, B8, bid, bt, rid, d):
    """Decode instance ``d``'s score for ``rid`` (lower is better)."""
    prompt = R[rid * L.NR + L.R_PROMPT]
    _, hit = decode_hit(IS, B8, bid, bt, rid, d)
    return F[L.FP_KVW] * (prompt - hit) + IS[L.DI0 + d * L.NDI + L.D_ACT]


@jit
def best_prefill(IS, F, R, B32, bid, bt, rid):
    """The prefill instance with the lowest score (ties: lowest index)."""
    best, best_c = 0, prefill_cost(IS, F, R, B32, bid, bt, rid, 0)
    for p in range(1, IS[L.IP_NP]):
        c = prefill_cost(IS, F, R, B32, bid, bt, rid, p)
        if c < best_c:
            best, best_c = p, c
    return best


@jit
def best_decode(IS, F, R, B8, bid, bt, rid):
    """The decode instance with the lowest score (ties: lowest index)."""
    best, best_c = 0, decode_cost(IS, F, R, B8, bid, bt, rid, 0)
    for d in range(1, IS[L.IP_ND]):
        c = decode_cost(IS, F, R, B8, bid, bt, rid, d)
        if c < best_c:
            best, best_c = d, c
    return best
