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
cgroup limit when there is one).
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


def available_bytes() -> float | None:
    """Memory this process can still use, or None when the system does not say."""
    known = [v for v in (_meminfo_available(), _cgroup_available()) if v is not None]
    return min(known) if known else None


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
