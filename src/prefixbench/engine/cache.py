"""Block-granular KV caches: the prefill node's prefix cache and the decode node's replicas.

A prompt's cacheable part is a chain of block hashes; a hit is the longest leading run of
cached blocks. Eviction is LRU with leaf-first order: when a chain is touched its blocks
are refreshed tail first, so the root of a chain is always fresher than its tail and an
eviction never strands a reachable suffix behind a missing root.
"""

from __future__ import annotations

from collections import OrderedDict


class BlockLRU:
    """The prefill instance's prefix cache: LRU over blocks, capacity in tokens."""

    __slots__ = ("capacity", "used", "_blocks")

    def __init__(self, capacity_tokens: int) -> None:
        self.capacity = int(capacity_tokens)
        self.used = 0
        self._blocks: OrderedDict[int, int] = OrderedDict()  # hash -> tokens, oldest first

    def match(self, hashes: list[int], tokens: list[int]) -> int:
        """Tokens of the longest leading run of cached blocks."""
        hit = 0
        blocks = self._blocks
        for h, t in zip(hashes, tokens, strict=True):
            if h not in blocks:
                break
            hit += t
        return hit

    def insert(self, hashes: list[int], tokens: list[int]) -> None:
        """Cache a computed chain (refresh present blocks), then evict LRU blocks over capacity."""
        blocks = self._blocks
        for h, t in zip(reversed(hashes), reversed(tokens), strict=True):
            if h in blocks:
                blocks.move_to_end(h)
            elif t <= self.capacity:
                blocks[h] = t
                self.used += t
        while self.used > self.capacity:
            _, t = blocks.popitem(last=False)
            self.used -= t


class ReplicaStore:
    """The decode instance's resident prefix replicas.

    Each block has a refcount (active requests using it). Blocks with refcount 0 are
    *inactive*: kept in LRU order and trimmed first when admission needs memory. A block is
    *pending* from admission until its KV lands over the link; only ready blocks give hits.
    """

    __slots__ = ("tokens", "refs", "ready", "inactive", "used", "idle")

    def __init__(self) -> None:
        self.tokens: dict[int, int] = {}
        self.refs: dict[int, int] = {}
        self.ready: set[int] = set()
        self.inactive: OrderedDict[int, None] = OrderedDict()  # refcount-0 ready blocks, LRU first
        self.used = 0  # tokens held by all replica blocks
        self.idle = 0  # tokens held by inactive (trimmable) blocks

    def __contains__(self, h: int) -> bool:
        return h in self.tokens

    def match(self, hashes: list[int]) -> int:
        """Number of leading blocks that are resident and ready."""
        n = 0
        ready = self.ready
        for h in hashes:
            if h not in ready:
                break
            n += 1
        return n

    def acquire(self, hashes: list[int]) -> None:
        refs, inactive = self.refs, self.inactive
        tokens = self.tokens
        for h in hashes:
            if refs[h] == 0:
                del inactive[h]
                self.idle -= tokens[h]
            refs[h] += 1

    def release(self, hashes: list[int]) -> None:
        """Drop one reference from each block; blocks reaching 0 become trimmable, tail first."""
        refs, inactive = self.refs, self.inactive
        for h in reversed(hashes):
            r = refs[h] - 1
            assert r >= 0, "replica refcount went negative"
            refs[h] = r
            if r == 0:
                if h in self.ready:
                    inactive[h] = None
                    self.idle += self.tokens[h]
                else:  # its transfer never landed: nothing to keep
                    self._drop(h)

    def add_pending(self, h: int, tokens: int) -> None:
        """A block that will be persisted once its transfer lands (held by one request)."""
        self.tokens[h] = tokens
        self.refs[h] = 1
        self.used += tokens

    def mark_ready(self, hashes: list[int]) -> None:
        self.ready.update(hashes)

    def prewarm(self, hashes: list[int], tokens: list[int]) -> None:
        """Install ready, inactive blocks (hottest first in ``hashes``; least hot trimmed first)."""
        for h, t in zip(reversed(hashes), reversed(tokens), strict=True):
            if h not in self.tokens:
                self.tokens[h] = t
                self.refs[h] = 0
                self.ready.add(h)
                self.inactive[h] = None
                self.used += t
                self.idle += t

    def trim(self, need: int) -> int:
        """Evict inactive blocks, least recently used first, until ``need`` tokens are freed."""
        freed = 0
        inactive = self.inactive
        while freed < need and inactive:
            h, _ = inactive.popitem(last=False)
            t = self.tokens[h]
            freed += t
            self.idle -= t
            self._drop(h)
        return freed

    def _drop(self, h: int) -> None:
        self.used -= self.tokens.pop(h)
        del self.refs[h]
        self.ready.discard(h)
