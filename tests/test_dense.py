"""workload/dense.py: linear-time block ids and counts equal np.unique's on every input shape."""

from __future__ import annotations

import numpy as np
import pytest

from prefixbench.workload.dense import dense_ids, joint_ids, shared_counts, unique_counts

RNG = np.random.default_rng(11)
CASES = {
    "small ids": RNG.integers(0, 1000, 5000),
    "one value": np.array([5]),
    "empty": np.zeros(0, np.int64),
    "64-bit hashes": RNG.integers(-(2**63), 2**63 - 1, 5000, dtype=np.int64),
    "repeated 64-bit hashes": np.repeat(RNG.integers(-(2**63), 2**63 - 1, 300), 7),
    "negative and huge": np.array([-1, -1, 2**62, -1, 0, 2**62]),
    "above the small range": RNG.integers(0, 10**9, 3000),  # grows the table past 1024
}


@pytest.mark.parametrize("name", CASES)
def test_unique_counts_is_np_unique(name):
    values = CASES[name].astype(np.int64)
    want = np.unique(values, return_index=True, return_counts=True)
    got = unique_counts(values)
    for w, g in zip(want, got, strict=True):
        assert np.array_equal(w, g)


@pytest.mark.parametrize("name", CASES)
@pytest.mark.parametrize("min_count", [1, 2, 3])
def test_shared_counts_is_np_unique_of_the_repeated(name, min_count):
    values = CASES[name].astype(np.int64)
    _, first, counts = np.unique(values, return_index=True, return_counts=True)
    keep = counts >= min_count
    got_first, got_counts = shared_counts(values, min_count)
    assert np.array_equal(got_first, first[keep]) and np.array_equal(got_counts, counts[keep])


@pytest.mark.parametrize("name", CASES)
def test_dense_ids_equal_iff_equal(name):
    values = CASES[name].astype(np.int64)
    ids, u = dense_ids(values)
    assert ids.shape == values.shape
    if values.size == 0:
        return
    assert 0 <= ids.min() and ids.max() < u
    _, rank = np.unique(values, return_inverse=True)
    pairs = set(zip(rank.reshape(-1).tolist(), ids.tolist(), strict=True))
    distinct = len(set(values.tolist()))
    assert len(pairs) == distinct == len(set(ids.tolist()))  # a bijection of the values


@pytest.mark.parametrize("name", CASES)
def test_joint_ids_are_one_numbering_across_the_arrays(name):
    """Split into three parts (one empty), the parts' ids are one bijection of the values:
    a value in two parts has one id in both."""
    values = CASES[name].astype(np.int64)
    cut = values.size // 3
    parts = (values[:cut], np.zeros(0, np.int64), values[cut:])
    got, u = joint_ids(*parts)
    assert [g.shape for g in got] == [p.shape for p in parts]
    ids = np.concatenate(got)
    if values.size == 0:
        return
    assert 0 <= ids.min() and ids.max() < u
    pairs = set(zip(values.tolist(), ids.tolist(), strict=True))
    assert len(pairs) == len(set(values.tolist())) == len(set(ids.tolist()))


def test_joint_small_ids_are_the_values_themselves():
    (a, b), u = joint_ids(np.array([4, 0]), [9])
    assert a.tolist() == [4, 0] and b.tolist() == [9] and u == 10


@pytest.mark.parametrize("seed", range(40))
def test_most_referenced_is_the_sorted_cut(seed):
    """The counting cut of the working set equals the sort-based one it replaced."""
    from prefixbench.system.runner import most_referenced

    rng = np.random.default_rng(seed)
    counts = rng.integers(2, int(rng.integers(3, 40)), int(rng.integers(1, 300)))
    hashes = np.arange(counts.size)  # ascending, as unique_counts returns them
    for coverage in (0.9, 0.5, 0.999, 1.0, 0.01):
        order = np.lexsort((hashes, -counts))
        covered = np.cumsum(counts[order]) / counts.sum()
        want = order[: int(np.searchsorted(covered, coverage) + 1)]
        assert sorted(most_referenced(counts, coverage).tolist()) == sorted(want.tolist())
