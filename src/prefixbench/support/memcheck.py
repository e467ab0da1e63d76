"""Will a run fit in memory? An estimate before anything is allocated, and a refusal.

A run keeps per-request arrays (the workload, each policy's result columns and the
per-request table), so its peak memory grows linearly with the number of requests.
Measured peak RSS (``/usr/bin/time -f %M``), all four policies: ``run_scenario`` on
medium_chat with the request tables kept, 214 MB at 1,000 requests, 367 MB at 100,000 and
585 MB at 300,000 (1.09 KB per request over a ~250 MB base of Python, numpy, polars and
numba); ``prefixbench run --set run.requests=10000000`` (enterprise_hotset, which also
writes requests.parquet) 18.4 GB, i.e. 1.8 KB per request. The estimate uses 2.0 KB per
request (10% over the worst measured) and refuses a run whose estimate exceeds the memory
available now (``MemAvailable`` in ``/proc/meminfo``, or ``os.sysconf`` pages, and the
cgroup limit when there is one, and the address space ``ulimit -v`` leaves). Other things
that scale are checked the same way before they are allocated: session turns
(workload/sessions.py), a trace's text (workload/traces.py), the timeline's records
(``check_timeline``) and the workers of a sweep or a ``map`` together (``check_workers``:
points × workers against the memory they share).
"""

from __future__ import annotations

import os
from pathlib import Path

from prefixbench.errors import SimulationError

BASE_BYTES = 250e6
PER_REQUEST_BYTES = 2000.0


def estimate_bytes(requests: int) -> float:
    """Peak memory of a run of ``requests`` requests (all policies, tables kept)."""
    return BASE_BYTES + PER_REQUEST_BYTES * requests


def _meminfo_available() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return float(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return float(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):
        return None


def _cgroup_available() -> float | None:
    """Room left under a cgroup v2 memory limit (a container), if there is one."""
    try:
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        if limit == "max":
            return None
        used = float(Path("/sys/fs/cgroup/memory.current").read_text().strip())
        return float(limit) - used
    except (OSError, ValueError):
        return None


def _cgroup_v1_available() -> float | None:
    """Room left under a cgroup v1 memory limit (an older container runtime)."""
    base = Path("/sys/fs/cgroup/memory")
    try:
        limit = float((base / "memory.limit_in_bytes").read_text().strip())
        if limit >= 2**62:  # "no limit" is a huge page-rounded number
            return None
        return limit - float((base / "memory.usage_in_bytes").read_text().strip())
    except (OSError, ValueError):
        return None


def _rlimit_available() -> float | None:
    """Address space left under ``ulimit -v`` (RLIMIT_AS): the soft limit less this
    process's virtual size (``VmSize`` in /proc/self/status)."""
    try:
        import resource

        soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    except (ImportError, OSError, ValueError):
        return None
    if soft == resource.RLIM_INFINITY or soft < 0:
        return None
    used = 0.0
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmSize:"):
                used = float(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return float(soft) - used


def _least(*sources) -> float | None:
    known = [v for v in (f() for f in sources) if v is not None]
    return min(known) if known else None


def shared_available_bytes() -> float | None:
    """Memory every process of this machine or container shares: the least of available RAM
    and the cgroup (v2 or v1) room (a pool's workers together must fit in it)."""
    return _least(_meminfo_available, _cgroup_available, _cgroup_v1_available)


def available_bytes() -> float | None:
    """Memory this process can still use, or None when the system does not say: the least
    of available RAM, the cgroup (v2 or v1) room and the address space ``ulimit -v`` leaves."""
    return _least(shared_available_bytes, _rlimit_available)


def check_bytes(need: float, what: str, where: str, fix: str) -> None:
    """Refuse an allocation of about ``need`` bytes (``what`` names it) beyond what is
    available, before it is made."""
    have = available_bytes()
    if have is not None and need > have:
        raise SimulationError(
            f"{what} need about {need / 1e9:.1f} GB of memory, but only "
            f"{max(have, 0) / 1e9:.1f} GB is available",
            where=where,
            fix=f"{fix}, or free memory",
        )


def check_workers(requests: int, workers: int, where: str = "--jobs") -> None:
    """Refuse ``workers`` processes each running a point of ``requests`` requests whose
    estimates together exceed the memory they share (every worker holds one point; RAM and
    the cgroup are shared, while ``ulimit -v`` binds each process alone, so one point under
    it is ``check_fits``'s question, asked when the grid is validated)."""
    if workers <= 1:
        return
    per = estimate_bytes(requests)
    have = shared_available_bytes()
    if have is not None and per * workers > have:
        fit = max(1, int(have // per))
        raise SimulationError(
            f"{workers} workers of {requests:,} requests each need about "
            f"{per * workers / 1e9:.1f} GB of memory, but only {have / 1e9:.1f} GB is available",
            where=where,
            fix=f"use --jobs {fit} or fewer, or fewer requests per point",
        )


def check_fits(requests: int, where: str = "run.requests") -> None:
    """Refuse a run whose estimated memory exceeds what is available (one line, both numbers)."""
    need = estimate_bytes(requests)
    have = available_bytes()
    if have is not None and need > have:
        raise SimulationError(
            f"{requests:,} requests need about {need / 1e9:.1f} GB of memory "
            f"({PER_REQUEST_BYTES / 1e3:.1f} KB per request + {BASE_BYTES / 1e9:.2f} GB), "
            f"but only {have / 1e9:.1f} GB is available",
            where=where,
            fix=f"lower {where} to at most {max(0, int((have - BASE_BYTES) / PER_REQUEST_BYTES)):,}, "
            "or free memory",
        )


# The timeline keeps every policy's records until the file is written: about ten records
# per request (its prefill step share, transfer, decode boundaries, KV and queue counters),
# each 56 bytes of arrays and ~200 bytes of JSON text. An estimate from the record layout
# (engine/layout.py NTL_F, NTL_I and engine/recorder.py's event text), not a measurement.
TIMELINE_BYTES_PER_REQUEST = 3000.0


def check_timeline(requests: int, policies: int) -> None:
    """Refuse a --timeline whose records would not fit, before the first policy runs."""
    need = estimate_bytes(requests) + TIMELINE_BYTES_PER_REQUEST * requests * policies
    check_bytes(
        need,
        f"a timeline of {requests:,} requests under {policies} policies",
        "--timeline",
        "lower run.requests or name one policy",
    )
