"""What a workload could reuse at best: each request's infinite-cache hit (policy-independent).

A request's *reusable* tokens are those of the longest leading run of its chain whose blocks
some earlier request (in arrival order) also carried: what an unbounded cache that keeps
every block it has ever seen would serve. It bounds every policy's replica hit from above,
and ``replicate_all_lru`` with unbounded memory reaches it (docs/model.md, "Sessions").

Both this and the hand-off bound's resident run (metrics/bound.py ``max_resident``) are one
forward pass over the chains with one byte per block (``leading_runs``): a block is marked
once a request has carried it, after that request's own run is read, so only earlier
requests count (docs/performance.md "The 1M-request trace, phase by phase").
"""

from __future__ import annotations

import math

import numpy as np

from ..support.firstrun import use_generic_cpu
from .dense import joint_ids
from .requests import Requests

use_generic_cpu()  # the same code generation as the engine's (its cache ships too)

from numba import njit  # noqa: E402


def reusable_tokens(req: Requests, answers: bool = False) -> np.ndarray:
    """Per request, tokens of its leading chain blocks already carried by an earlier request
    (``answers``: in its chain or in its answer blocks, docs/model.md §1.10.1; an upper
    bound, as an answer exists only once its request has finished)."""
    with_answers = answers and req.ans_ptr is not None and int(req.ans_ptr[-1])
    ans = (req.ans_ptr, req.ans_hash) if with_answers else None
    return leading_runs(req.blk_ptr, req.blk_hash, req.blk_tokens, math.inf, (), ans)


def leading_runs(ptr, blocks, tokens, capacity: float, warm=(), answers=None) -> np.ndarray:
    """Per request (``ptr``: chain offsets into ``blocks`` and ``tokens``): tokens of its
    chain up to its last block that, with every block before it, an earlier request carried
    (in its chain, or in its answer when ``answers`` = (ans_ptr, ans_hash)) or the set
    ``warm`` holds from the start, and whose running total fits ``capacity``."""
    ptr = np.ascontiguousarray(ptr, dtype=np.int64)
    n = len(ptr) - 1
    out = np.zeros(n, dtype=np.int64)
    if len(blocks) == 0:
        return out
    a_ptr, a_hash = (np.zeros(n + 1, np.int64), ()) if answers is None else answers
    (ids, a_ids, w_ids), u = joint_ids(blocks, a_hash, warm)
    seen = np.zeros(u, dtype=np.uint8)  # calloc'd: pages the pass touches, zeroed once
    seen[w_ids] = 1
    tokens = np.ascontiguousarray(tokens, dtype=np.int64)
    a_ptr = np.ascontiguousarray(a_ptr, dtype=np.int64)
    _leading(ptr, np.ascontiguousarray(ids), tokens, a_ptr, np.ascontiguousarray(a_ids), seen,
             float(capacity), out)  # fmt: skip
    return out


@njit(cache=True)
def _leading(ptr, ids, tokens, a_ptr, a_ids, seen, capacity, out):
    """``out[i]``: request ``i``'s leading run of seen blocks within ``capacity`` (tokens
    are positive, so the total only grows along a chain); then its chain's and its answer's
    blocks are marked seen for the requests after it. Allocates nothing (the caller does:
    compiled code that allocates loads numba's array module, docs/performance.md)."""
    for i in range(ptr.shape[0] - 1):
        cum = 0
        for j in range(ptr[i], ptr[i + 1]):
            if seen[ids[j]] == 0:
                break
            cum += tokens[j]
            if cum > capacity:
                break
            out[i] = cum
        for j in range(ptr[i], ptr[i + 1]):
            seen[ids[j]] = 1
        for j in range(a_ptr[i], a_ptr[i + 1]):
            seen[a_ids[j]] = 1


def warm_up() -> None:
    """Compile (or load) the pass: the package build calls this (setup.py)."""
    ptr = np.array([0, 2, 3], dtype=np.int64)
    leading_runs(ptr, [3, 1, 3], [4, 4, 4], math.inf, [1], (np.array([0, 1, 1]), [2]))
