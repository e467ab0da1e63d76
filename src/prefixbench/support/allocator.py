"""How the process allocates large arrays: without numpy's huge-page fault storm.

A run of a million requests allocates and frees numpy arrays of several to hundreds of MB
over and over (the trace's columns, the engine's result columns, the bound's schedules).
numpy asks for transparent huge pages on every array of 4 MiB or more
(``madvise(MADV_HUGEPAGE)``; numpy ``numpy/__init__.py`` ``hugepage_setup``, on by default on
Linux >= 4.6, read once from ``NUMPY_MADVISE_HUGEPAGE`` when numpy is imported). With the
kernel's ``defrag`` setting ``madvise`` (the usual default) each such fault may compact
memory synchronously before it zeroes 2 MiB, so the kernel spent as much CPU on a large
run as the run spent computing (docs/performance.md "The 1M-request trace on a quiet
machine").

:func:`configure` turns numpy's huge pages off, unless the user set
``NUMPY_MADVISE_HUGEPAGE`` to anything. glibc's mmap and trim thresholds are left alone:
raising them (``mallopt``) halved the trace's system time again but raised a
10-million-request run's peak from 3.9 to 5.4 GB (freed blocks left as holes in the heap),
past the 4 GB that run must fit in; a user can still set ``GLIBC_TUNABLES`` for a large
trace (docs/performance.md, same section).
"""

import os
import sys

HUGEPAGE_VAR = "NUMPY_MADVISE_HUGEPAGE"


def configure(environ=None) -> dict[str, bool]:
    """Turn numpy's huge pages off once per process, before or after numpy is imported;
    whether it took effect (``False`` where the user's own setting was kept)."""
    env = os.environ if environ is None else environ
    return {"numpy_hugepages_off": _numpy_hugepages_off(env)}


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
