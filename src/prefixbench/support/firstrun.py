"""Whether this install still has to compile the event engine (the first simulation after
installing compiles it once with numba, about half a minute on two cores; later processes
load the cached machine code). Looked up without importing the engine, whose import is
itself part of the compile."""

from __future__ import annotations

import os
from pathlib import Path

# numba caches each compiled function as <module>.<function>-<line>.pyXY.nbi (+ .nbc) in
# the source's __pycache__ (or under NUMBA_CACHE_DIR, in a folder named after the source
# directory); the run loop is compiled last, so its index stands for the whole engine
_INDEX = "loop.run_disaggregated-*.nbi"


def engine_compiled() -> bool:
    """True when the engine's cache is there, or when this cannot be told (a read-only
    install caches elsewhere): only a certain first run is announced."""
    engine = Path(__file__).parent / "engine"
    try:
        root = os.environ.get("NUMBA_CACHE_DIR")
        if root:
            return any(Path(root).glob(f"*/{_INDEX}"))
        cache = engine / "__pycache__"
        if not os.access(engine, os.W_OK):
            return True
        return cache.is_dir() and any(cache.glob(_INDEX))
    except OSError:
        return True
