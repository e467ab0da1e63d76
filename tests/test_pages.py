"""Releasing a dead part of a large array (support/pages.py): only whole pages inside the
part are given back, the rest of the array keeps its values."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from prefixbench.support.pages import MIN_BYTES, release


@pytest.mark.skipif(sys.platform != "linux", reason="madvise(MADV_DONTNEED) is Linux's")
def test_released_pages_read_zero_and_the_rest_is_untouched():
    a = np.arange(3 * MIN_BYTES // 8, dtype=np.int64) + 1
    lo, hi = 1000, 1000 + MIN_BYTES // 8 + 5000
    done = release(a, lo, hi)
    assert done >= MIN_BYTES - 2 * 4096 and done % 4096 == 0
    inside = a[lo:hi]
    assert (inside == 0).sum() * 8 == done  # whole pages inside [lo, hi) only
    keep = np.ones(a.size, dtype=bool)
    keep[lo:hi] = False
    assert np.array_equal(a[keep], np.flatnonzero(keep) + 1)


def test_small_or_empty_parts_are_left_alone():
    a = np.ones(1000)
    assert release(a, 0, 1000) == 0 and release(a, 5, 5) == 0
    assert a.sum() == 1000
