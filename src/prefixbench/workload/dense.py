"""Block hashes as dense ids in linear time: the counting passes of a million-request trace.

``np.unique`` sorts (O(m log m)) and, with ``return_inverse``, allocates several arrays of
the references' size; on a tiled trace's 24 million block references it was seconds and
gigabytes. Here:

* hashes that are already small non-negative integers (synthetic prefix ids, Mooncake hash
  ids and tiled copies of them) are their own ids, and counting is ``np.bincount``;
* other hashes get ids in order of first appearance from a compiled open-addressing hash
  table (linear probing, Fibonacci hashing, grown at half full).

Equal hash <=> equal id either way. ``unique_counts`` returns exactly what
``np.unique(values, return_index=True, return_counts=True)`` returns, and ``shared_counts``
exactly its first indices and counts of the values seen at least twice (tests/test_dense.py).
"""

from __future__ import annotations

import numpy as np

from ..support.firstrun import use_generic_cpu

use_generic_cpu()  # the same code generation as the engine's (its cache ships too)

from numba import njit  # noqa: E402

_MULT = np.uint64(0x9E3779B97F4A7C15)  # 2^64 / golden ratio (Knuth's multiplicative hash)


def _small(values: np.ndarray) -> int:
    """``max + 1`` when the values are small non-negative integers (usable as ids), else 0."""
    if values.size == 0:
        return 0
    return _small_range(int(values.min()), int(values.max()), values.size)


def _small_range(lo: int, hi: int, size: int) -> int:
    """``hi + 1`` when ``size`` values in [lo, hi] can be their own ids, else 0."""
    return hi + 1 if lo >= 0 and hi < min(2**31 - 1, 4 * size + 65536) else 0


@njit(cache=True)
def _slot(v, shift):
    return np.int64((np.uint64(v) * _MULT) >> np.uint64(shift))


@njit(cache=True)
def _hash_ids(values):
    """(ids in first-appearance order, the value of each id, its first index)."""
    m = values.shape[0]
    ids = np.empty(m, dtype=np.int64)
    uniq = np.empty(m, dtype=np.int64)
    first = np.empty(m, dtype=np.int64)
    bits = 10
    table = np.full(1 << bits, -1, dtype=np.int64)  # slot -> id, -1 empty
    u = 0
    for j in range(m):
        v = values[j]
        mask = (1 << bits) - 1
        s = _slot(v, 64 - bits)
        while True:
            k = table[s]
            if k < 0:
                table[s] = u
                uniq[u] = v
                first[u] = j
                ids[j] = u
                u += 1
                break
            if uniq[k] == v:
                ids[j] = k
                break
            s = (s + 1) & mask
        if 2 * u > (1 << bits):  # half full: double and re-insert every id
            bits += 1
            mask = (1 << bits) - 1
            table = np.full(1 << bits, -1, dtype=np.int64)
            for k in range(u):
                s = _slot(uniq[k], 64 - bits)
                while table[s] >= 0:
                    s = (s + 1) & mask
                table[s] = k
    return ids, uniq[:u].copy(), first[:u].copy()


def dense_ids(values) -> tuple[np.ndarray, int]:
    """(ids in [0, u), u): equal value <=> equal id. Small non-negative integers are their
    own ids (then some ids in [0, u) may be unused)."""
    values = np.ascontiguousarray(values, dtype=np.int64)
    u = _small(values)
    if u or values.size == 0:
        return values, u
    ids, uniq, _ = _hash_ids(values)
    return ids, int(uniq.size)


def joint_ids(*arrays) -> tuple[list[np.ndarray], int]:
    """Dense ids shared by several hash arrays: ([the ids of each], u), equal hash <=>
    equal id across all of them. Small non-negative integers are their own ids, as in
    ``dense_ids``, without concatenating the arrays (on a tiled trace, 24 million
    references: 190 MB of fresh memory less)."""
    arrays = [np.ascontiguousarray(a, dtype=np.int64) for a in arrays]
    full = [a for a in arrays if a.size]
    if not full:
        return arrays, 0
    lo, hi = min(int(a.min()) for a in full), max(int(a.max()) for a in full)
    u = _small_range(lo, hi, sum(a.size for a in arrays))
    if u:
        return arrays, u
    ids, u = dense_ids(np.concatenate(arrays))
    return np.split(ids, np.cumsum([a.size for a in arrays])[:-1]), u


def unique_counts(values) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``np.unique(values, return_index=True, return_counts=True)`` in linear time when
    the values are small non-negative integers (sorting only the distinct values else)."""
    values = np.ascontiguousarray(values, dtype=np.int64)
    u = _small(values)
    if values.size == 0:
        return values.copy(), np.zeros(0, np.int64), np.zeros(0, np.int64)
    if u:
        return _small_kept(values, u, 1, with_values=True)  # every value kept
    ids, uniq, first = _hash_ids(values)
    counts = np.bincount(ids, minlength=uniq.size).astype(np.int64)
    order = np.argsort(uniq, kind="stable")
    return uniq[order], first[order], counts[order]


def _small_kept(values: np.ndarray, u: int, min_count: int, with_values: bool = False):
    """For small non-negative values: ((the kept values ascending, if ``with_values``), the
    first index, the count) of each value seen at least ``min_count`` times, ascending by
    value. One array of ``u`` counts, reused as the values' output slots (on a tiled trace,
    15 million distinct blocks: 120 MB in place of 600 MB, fresh memory the kernel must
    zero). The arrays are allocated here, in Python: a compiled function that allocates
    loads numba's array module (``numba.np.arrayobj`` and 12 others, about 0.07 CPU-s of a
    process's start-up) with its cached code."""
    counts = np.zeros(u, dtype=np.int64)
    k = _tally(values, counts, min_count)
    seen = np.empty(k if with_values else 0, dtype=np.int64)
    f = np.empty(k, dtype=np.int64)
    c = np.empty(k, dtype=np.int64)
    _first_of_kept(values, counts, min_count, seen, f, c)
    return (seen, f, c) if with_values else (f, c)


@njit(cache=True)
def _tally(values, counts, min_count):
    """``counts[v]``: occurrences of ``v``; returns how many values occur ``min_count``
    times or more."""
    for j in range(values.shape[0]):
        counts[values[j]] += 1
    k = 0
    for v in range(counts.shape[0]):
        k += counts[v] >= min_count
    return k


@njit(cache=True)
def _first_of_kept(values, counts, min_count, seen, f, c):
    """``c``: the kept values' counts ascending by value, ``f``: their first indices, and
    ``seen`` (unless empty) the values themselves."""
    k = 0
    u = counts.shape[0]
    keep_values = seen.shape[0] > 0
    for v in range(u):  # a kept value's slot is stored as -(slot + 1); the others become 0
        if counts[v] >= min_count:
            if keep_values:
                seen[k] = v
            c[k] = counts[v]
            counts[v] = -(k + 1)
            k += 1
        else:
            counts[v] = 0
    for j in range(values.shape[0]):  # the first occurrence of a kept value fills its slot
        s = counts[values[j]]
        if s < 0:
            f[-s - 1] = j
            counts[values[j]] = 0


def shared_counts(values, min_count: int = 2) -> tuple[np.ndarray, np.ndarray]:
    """(first index, count) of every value occurring at least ``min_count`` times, ascending
    by value: ``unique_counts``'s ``first`` and ``counts`` where ``counts >= min_count``,
    without its full-length arrays when the values are small non-negative integers."""
    values = np.ascontiguousarray(values, dtype=np.int64)
    u = _small(values)
    if u:
        return _small_kept(values, u, max(int(min_count), 1))
    _, first, counts = unique_counts(values)
    keep = counts >= min_count
    return first[keep], counts[keep]


def warm_up() -> None:
    """Compile (or load) both paths: the package build calls this (setup.py)."""
    unique_counts(np.array([3, 1, 3], dtype=np.int64))
    unique_counts(np.array([-(2**62), 5, -(2**62)], dtype=np.int64))
    shared_counts(np.array([3, 1, 3], dtype=np.int64))
