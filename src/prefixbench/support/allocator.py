"""How the process allocates large arrays: without a page-fault storm on large runs.

A run of a million requests allocates and frees numpy arrays of several to hundreds of MB
over and over (the trace's columns, the engine's result columns, the bound's schedules).
Two defaults make the kernel spend as much CPU on that as the run spends computing
(docs/performance.md "The 1M-request trace on a quiet machine"):

* numpy asks for transparent huge pages on every array of 4 MiB or more
  (``madvise(MADV_HUGEPAGE)``; numpy ``numpy/__init__.py`` ``hugepage_setup``, on by default
  on Linux >= 4.6, read once from ``NUMPY_MADVISE_HUGEPAGE`` when numpy is imported). With
  the kernel's ``defrag`` setting ``madvise`` (the usual default) each such fault may
  compact memory synchronously before it zeroes 2 MiB.
* glibc serves a block above its mmap threshold (128 KiB, raised as such blocks are freed,
  at most 32 MiB) with a fresh ``mmap`` and returns it on ``free``, and trims the heap's top
  above twice that, so the next array of the same size is faulted in and zeroed again.

:func:`configure` turns numpy's huge pages off and raises glibc's mmap and trim thresholds
(``mallopt``), so freed memory is reused instead of faulted in again. A setting the user
made wins: ``NUMPY_MADVISE_HUGEPAGE`` set to anything is left alone, and so are glibc's
allocator when ``GLIBC_TUNABLES`` or a ``MALLOC_*_`` variable is set. On a C library other
than glibc (musl, macOS) the ``mallopt`` step does nothing. The price is that a process
keeps the memory it freed until it exits (its peak RSS stays its RSS).
"""

from __future__ import annotations

import os
import sys

HUGEPAGE_VAR = "NUMPY_MADVISE_HUGEPAGE"
MALLOC_VARS = (
    "GLIBC_TUNABLES", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_",
    "MALLOC_MMAP_MAX_",
)  # fmt: skip
# glibc malloc.h: the mallopt parameters
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
# mallopt takes an int; glibc accepts a threshold up to INT_MAX on 64-bit (2.36 measured)
KEEP_BYTES = 2**31 - 1


def configure(environ=None) -> dict[str, bool]:
    """Apply both settings once per process, before or after numpy is imported; which ones
    took effect (``False`` where the user's own setting was kept or the platform has none)."""
    env = os.environ if environ is None else environ
    return {"numpy_hugepages_off": _numpy_hugepages_off(env), "glibc_keep_freed": _glibc(env)}


def _numpy_hugepages_off(env) -> bool:
    if HUGEPAGE_VAR in env:
        return False
    env[HUGEPAGE_VAR] = "0"  # read by numpy at import (and inherited by worker processes)
    np = sys.modules.get("numpy")
    if np is not None:  # imported already: numpy's own switch for what the variable sets
        setter = getattr(getattr(np, "_core", None), "multiarray", None)
        setter = getattr(setter, "_set_madvise_hugepage", None)
        if setter is None:
            return False
        setter(False)
    return True


def _glibc(env) -> bool:
    if any(v in env for v in MALLOC_VARS) or not _is_glibc():
        return False
    import ctypes

    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    ok = mallopt(M_MMAP_THRESHOLD, KEEP_BYTES) == 1
    return mallopt(M_TRIM_THRESHOLD, KEEP_BYTES) == 1 and ok


def _is_glibc() -> bool:
    if not sys.platform.startswith("linux"):
        return False
    try:
        return (os.confstr("CS_GNU_LIBC_VERSION") or "").startswith("glibc")
    except (ValueError, OSError, AttributeError):
        return False
