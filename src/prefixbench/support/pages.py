"""Giving the memory of a dead part of a large array back to the operating system.

The engine keeps a run in a few flat arrays; its result columns are views into them, so
the arrays live as long as the results, including the parts only the simulation read
(request offsets, arrival and last-token times). ``release`` returns the whole pages of
such a part to the kernel (Linux ``madvise(MADV_DONTNEED)``: an anonymous private page
released reads as zero afterwards), which at ten million requests is about 0.3 GB less
held while the summary and the per-request file are computed (docs/performance.md).
Elsewhere, or when the call fails, nothing happens: the part simply stays resident.
"""

from __future__ import annotations

import ctypes
import mmap
import sys

import numpy as np

MADV_DONTNEED = 4  # linux/mman-common.h
MIN_BYTES = 1 << 21  # smaller parts are not worth a system call
_libc = None


def _madvise():
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
        _libc.madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
        _libc.madvise.restype = ctypes.c_int
    return _libc.madvise


def release(a: np.ndarray, lo: int, hi: int) -> int:
    """Release the whole pages inside ``a[lo:hi]`` (a C-contiguous array; the caller
    guarantees nothing reads those elements again: they may read as zero). Returns the
    bytes released (0 when not on Linux, too small, or refused)."""
    if sys.platform != "linux" or not a.flags.c_contiguous or hi <= lo:
        return 0
    page = mmap.PAGESIZE
    start = a.ctypes.data + lo * a.itemsize
    end = a.ctypes.data + hi * a.itemsize
    first, last = -(-start // page) * page, end // page * page
    if last - first < MIN_BYTES:
        return 0
    try:
        ok = _madvise()(first, last - first, MADV_DONTNEED) == 0
    except (OSError, AttributeError):
        return 0
    return last - first if ok else 0
