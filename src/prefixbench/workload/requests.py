"""The request table every workload produces and the simulator core consumes.

One numpy array per field (struct of arrays). A prompt is ``prompt_len`` tokens; its
cacheable part is a chain of blocks (CSR: ``blk_ptr`` into ``blk_hash``/``blk_tokens``).
Two prompts share KV exactly over their longest common leading run of block hashes, so a
synthetic shared prefix and a multi-turn trace history look the same to the core.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class Requests:
    arrival: np.ndarray  # float64 seconds, non-decreasing
    prompt_len: np.ndarray  # int64 tokens (prefix + suffix)
    output_len: np.ndarray  # int64 tokens to generate (>= 1)
    blk_ptr: np.ndarray  # int64, len n+1: blocks of request i are blk_ptr[i]:blk_ptr[i+1]
    blk_hash: np.ndarray  # int64 block ids; equal id <=> equal KV (whole prefix equal)
    blk_tokens: np.ndarray  # int64 tokens each block covers (last block of a chain may be partial)
    prefix_id: np.ndarray  # int64 shared-prefix id for per-prefix stats, -1 = none
    # the answer's full blocks (docs/model.md §1.10.1, generated tokens): CSR like the chain,
    # the blocks past the prompt's whole blocks that the request's own output fills; None
    # when the workload has no per-block chains (nothing to cache)
    ans_ptr: np.ndarray | None = None
    ans_hash: np.ndarray | None = None
    ans_tokens: np.ndarray | None = None

    def __len__(self) -> int:
        return int(self.arrival.shape[0])

    def validate(self) -> None:
        """Internal consistency (raises AssertionError: a bug, not a user error)."""
        n = len(self)
        for name in ("prompt_len", "output_len", "prefix_id"):
            assert getattr(self, name).shape == (n,), name
        assert self.blk_ptr.shape == (n + 1,) and self.blk_ptr[0] == 0
        assert self.blk_hash.shape == self.blk_tokens.shape == (int(self.blk_ptr[-1]),)
        assert np.all(np.diff(self.arrival) >= 0), "arrivals must be sorted"
        csum = np.concatenate(([0], np.cumsum(self.blk_tokens)))
        chain = csum[self.blk_ptr[1:]] - csum[self.blk_ptr[:-1]]
        assert np.all(chain <= self.prompt_len), "chain longer than prompt"
        assert np.all(self.output_len >= 1) and np.all(self.prompt_len >= 1)
        if self.ans_ptr is not None:
            assert self.ans_ptr.shape == (n + 1,) and self.ans_ptr[0] == 0
            assert self.ans_hash.shape == self.ans_tokens.shape == (int(self.ans_ptr[-1]),)

    def without_answers(self) -> Requests:
        """The same requests with no answer blocks (prompt-only caching)."""
        return Requests(
            self.arrival, self.prompt_len, self.output_len, self.blk_ptr, self.blk_hash,
            self.blk_tokens, self.prefix_id,
        )  # fmt: skip

    def slice(self, start: int, stop: int) -> Requests:
        """Requests start..stop-1 (block arrays re-based)."""
        b0, b1 = int(self.blk_ptr[start]), int(self.blk_ptr[stop])
        ans = {}
        if self.ans_ptr is not None:
            a0, a1 = int(self.ans_ptr[start]), int(self.ans_ptr[stop])
            ans = {
                "ans_ptr": self.ans_ptr[start : stop + 1] - a0,
                "ans_hash": self.ans_hash[a0:a1],
                "ans_tokens": self.ans_tokens[a0:a1],
            }
        return Requests(
            arrival=self.arrival[start:stop],
            prompt_len=self.prompt_len[start:stop],
            output_len=self.output_len[start:stop],
            blk_ptr=self.blk_ptr[start : stop + 1] - b0,
            blk_hash=self.blk_hash[b0:b1],
            blk_tokens=self.blk_tokens[b0:b1],
            prefix_id=self.prefix_id[start:stop],
            **ans,
        )
