"""A trace request's answer as blocks (docs/model.md §1.10.1, "Generated tokens").

A trace records prompts as hash-block chains, never answers. A follow-up turn's prompt holds
its previous turn's prompt and answer, so the answer can be read off the follow-up: a
request whose chain extends an earlier request's whole chain (its leading full blocks)
takes the blocks past it, up to that earlier request's output, as that request's answer.
The earliest such later request is taken (a retry or a branch later on does not rename the
answer). A request with no follow-up in the trace, or the part of an answer past what its
follow-up shows, gets fresh block ids nobody else has: the blocks still occupy the decode
cache, as in SGLang and vLLM, but no request can hit them.

A whole chain of fewer than two blocks names no conversation (Mooncake's conversation trace
starts every prompt with the same block), so it is not followed. This is a reading of the
trace, not a record of it: approximate where prompts share long prefixes across sessions.
"""

from __future__ import annotations

import numpy as np

from .dense import dense_ids
from .requests import Requests

MIN_WHOLE = 2  # whole blocks a chain needs before a follow-up can be matched to it


def _whole_blocks(req: Requests, block: int) -> np.ndarray:
    """Per request, its chain's leading blocks of ``block`` tokens."""
    counts = np.diff(req.blk_ptr)
    owner = np.repeat(np.arange(len(req), dtype=np.int64), counts)
    pos = np.arange(int(req.blk_ptr[-1]), dtype=np.int64) - req.blk_ptr[:-1][owner]
    whole = counts.copy()
    short = req.blk_tokens != block
    np.minimum.at(whole, owner[short], pos[short])
    return whole


def _follow_ups(req: Requests, whole: np.ndarray, wants: np.ndarray):
    """Per request: the earliest later request whose chain goes past its whole chain
    (-1 if none), and that request's first block past it."""
    n = len(req)
    counts = np.diff(req.blk_ptr)
    owner = np.repeat(np.arange(n, dtype=np.int64), counts)
    pos = np.arange(int(req.blk_ptr[-1]), dtype=np.int64) - req.blk_ptr[:-1][owner]
    rank, _ = dense_ids(req.blk_hash)  # equal hash <=> equal id is all the keys need
    inner = pos < counts[owner] - 1  # a block with a block after it in its chain
    key = rank[inner] * (n + 1) + owner[inner]
    order = np.argsort(key, kind="stable")
    key, at = key[order], np.flatnonzero(inner)[order]
    j = np.full(n, -1, dtype=np.int64)
    nxt = np.zeros(n, dtype=np.int64)
    i = np.flatnonzero(wants)
    last = rank[req.blk_ptr[:-1][i] + whole[i] - 1]
    idx = np.searchsorted(key, last * (n + 1) + i + 1)
    ok = idx < key.size
    idx = np.minimum(idx, max(key.size - 1, 0))
    if key.size:
        ok &= key[idx] // (n + 1) == last
        hit = at[idx]
        ok &= pos[hit] == whole[i] - 1  # the same block at the same depth
        j[i[ok]] = owner[hit[ok]]
        nxt[i[ok]] = hit[ok] + 1
    return j, nxt


def trace_answers(req: Requests) -> Requests:
    """``req`` with answer blocks (``ans_*``) read off the follow-up turns; blocks are the
    chains' full-block size (the largest block); an empty chain table gets none."""
    if req.blk_hash.size == 0:
        return req
    block = int(req.blk_tokens.max())
    whole = _whole_blocks(req, block)
    committed = req.prompt_len + req.output_len - 1  # the last token has no KV
    aligned = whole == req.prompt_len // block  # the chain covers the prompt's whole blocks
    k = np.where(aligned, np.maximum(committed // block - whole, 0), 0)
    j, nxt = _follow_ups(req, whole, (whole >= MIN_WHOLE) & (k > 0))
    whole_j = whole[np.maximum(j, 0)]
    start_j = req.blk_ptr[:-1][np.maximum(j, 0)]
    shown = np.where(j >= 0, np.maximum(start_j + whole_j - nxt, 0), 0)
    real = np.minimum(k, shown)
    ptr = np.concatenate(([0], np.cumsum(k))).astype(np.int64)
    owner = np.repeat(np.arange(len(req), dtype=np.int64), k)
    m = np.arange(int(ptr[-1]), dtype=np.int64) - ptr[:-1][owner]
    is_real = m < real[owner]
    src = np.where(is_real, nxt[owner] + m, 0)
    fresh = np.cumsum(~is_real) - 1
    top, low = int(req.blk_hash.max()), int(req.blk_hash.min())
    base = top + 1 + fresh if top < 2**62 else low - 1 - fresh
    hashes = np.where(is_real, req.blk_hash[src], base).astype(np.int64)
    out = Requests(**{**req.__dict__})
    out.ans_ptr, out.ans_hash = ptr, hashes
    out.ans_tokens = np.full(hashes.size, block, dtype=np.int64)
    return out
