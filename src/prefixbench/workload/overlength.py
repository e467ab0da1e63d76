"""Requests longer than the model's context (``workload.overlength``).

A serving engine refuses a prompt longer than its ``max_model_len`` and caps a request's
generation at what fits after the prompt (vLLM: ``max_tokens`` is limited to
``max_model_len - prompt``). ``truncate`` does the same to a trace: it caps the output to
the room after the prompt and, when the prompt alone does not fit, cuts the prompt to the
context minus one token (its trailing blocks are dropped, the leading shared blocks kept)
with one output token. ``skip`` drops such requests; ``error`` stops with the first one.
"""

from __future__ import annotations

import numpy as np

from ..errors import SimulationError
from .requests import Requests

MODES = ("error", "skip", "truncate")


def too_long(req: Requests, max_context: int) -> np.ndarray:
    return (req.prompt_len + req.output_len) > max_context


def apply_overlength(
    req: Requests, max_context: int, mode: str, model: str = "the model"
) -> tuple[Requests, str | None]:
    """``req`` with over-length requests handled by ``mode``, and a note with the count."""
    bad = too_long(req, max_context)
    count = int(bad.sum())
    if count == 0:
        return req, None
    if mode == "error":
        i = int(np.flatnonzero(bad)[0])
        raise SimulationError(
            f"{count} of {len(req)} requests are longer than {model}'s context of "
            f"{max_context} tokens (the first, request {i}, needs "
            f"{int(req.prompt_len[i] + req.output_len[i])})",
            where="workload",
            fix="set workload.overlength=skip or workload.overlength=truncate, or pick a "
            "longer-context model",
        )
    if mode == "skip":
        if count == len(req):
            raise SimulationError(
                f"every request is longer than {model}'s context of {max_context} tokens",
                where="workload",
                fix="pick a longer-context model",
            )
        return _select(req, ~bad), (
            f"skipped {count} of {len(req)} requests longer than the {max_context}-token context "
            "(workload.overlength=skip)"
        )
    if mode == "truncate":
        return _truncate(req, max_context), (
            f"truncated {count} of {len(req)} requests to the {max_context}-token context "
            "(workload.overlength=truncate)"
        )
    raise ValueError(mode)


def _select(req: Requests, keep: np.ndarray) -> Requests:
    """The requests where ``keep``; block chains re-based; first arrival at 0."""
    counts = np.diff(req.blk_ptr)
    block_keep = np.repeat(keep, counts)
    arrival = req.arrival[keep]
    return Requests(
        arrival=arrival - arrival[0],
        prompt_len=req.prompt_len[keep],
        output_len=req.output_len[keep],
        blk_ptr=np.concatenate(([0], np.cumsum(counts[keep]))).astype(np.int64),
        blk_hash=req.blk_hash[block_keep],
        blk_tokens=req.blk_tokens[block_keep],
        prefix_id=req.prefix_id[keep],
    )


def _truncate(req: Requests, max_context: int) -> Requests:
    prompt = np.minimum(req.prompt_len, max_context - 1)
    output = np.minimum(req.output_len, max_context - prompt)
    # keep each chain's leading blocks that fit in the new prompt; cut the last one short
    n = len(req)
    counts = np.diff(req.blk_ptr)
    owner = np.repeat(np.arange(n), counts)
    start_in_chain = _chain_offsets(req.blk_tokens, req.blk_ptr)
    keep = start_in_chain < prompt[owner]
    tokens = np.minimum(req.blk_tokens, prompt[owner] - start_in_chain)[keep]
    new_counts = np.bincount(owner[keep], minlength=n).astype(np.int64)
    return Requests(
        arrival=req.arrival,
        prompt_len=prompt.astype(np.int64),
        output_len=output.astype(np.int64),
        blk_ptr=np.concatenate(([0], np.cumsum(new_counts))).astype(np.int64),
        blk_hash=req.blk_hash[keep],
        blk_tokens=tokens.astype(np.int64),
        prefix_id=req.prefix_id,
    )


def _chain_offsets(blk_tokens: np.ndarray, blk_ptr: np.ndarray) -> np.ndarray:
    """Tokens before each block within its own request's chain."""
    csum = np.concatenate(([0], np.cumsum(blk_tokens)))
    counts = np.diff(blk_ptr)
    chain_start = np.repeat(csum[blk_ptr[:-1]], counts)
    return csum[:-1] - chain_start
