"""What a workload could reuse at best: each request's infinite-cache hit (policy-independent).

A request's *reusable* tokens are those of the longest leading run of its chain whose blocks
some earlier request (in arrival order) also carried: what an unbounded cache that keeps
every block it has ever seen would serve. It bounds every policy's replica hit from above,
and ``replicate_all_lru`` with unbounded memory reaches it (docs/model.md, "Sessions").
"""

from __future__ import annotations

import numpy as np

from .dense import dense_ids
from .requests import Requests


def reusable_tokens(req: Requests, answers: bool = False) -> np.ndarray:
    """Per request, tokens of its leading chain blocks already carried by an earlier request
    (``answers``: in its chain or in its answer blocks, docs/model.md §1.10.1; an upper
    bound, as an answer exists only once its request has finished)."""
    n = len(req)
    nb = np.diff(req.blk_ptr)
    if len(req.blk_hash) == 0:
        return np.zeros(n, dtype=np.int64)
    owner = np.repeat(np.arange(n, dtype=np.int64), nb)
    hashes, owners = req.blk_hash, owner
    if answers and req.ans_ptr is not None and int(req.ans_ptr[-1]):
        a_owner = np.repeat(np.arange(n, dtype=np.int64), np.diff(req.ans_ptr))
        hashes = np.concatenate((req.blk_hash, req.ans_hash))
        owners = np.concatenate((owner, a_owner))
    inverse, u = dense_ids(hashes)
    earliest = np.full(u, np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(earliest, inverse, owners)
    seen = earliest[inverse[: len(owner)]] < owner  # first carried by an earlier request
    # leading run per request: the position of its first unseen block (or its chain's end)
    pos = np.arange(len(owner), dtype=np.int64)
    stop = np.where(seen, np.iinfo(np.int64).max, pos)
    first_miss = np.full(n, np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(first_miss, owner, stop)
    run_end = np.minimum(first_miss, req.blk_ptr[1:])
    csum = np.concatenate(([0], np.cumsum(req.blk_tokens)))
    return (csum[run_end] - csum[req.blk_ptr[:-1]]).astype(np.int64)
