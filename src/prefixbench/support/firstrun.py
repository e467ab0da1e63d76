"""Whether the event engine's machine code is ready, told without importing the engine
(whose import is itself part of the compile), and a count of its compile for a progress bar.

numba caches each compiled function as ``<module>.<function>-<line>.pyXY.nbi`` (an index)
plus ``.nbc`` files (the code), in the source's ``__pycache__`` or under ``NUMBA_CACHE_DIR``
(in a folder named after the source directory and its path's hash). An index is valid when
it was written by the installed numba, for the source file's current content (numba 0.68
stamps sources by content hash) and holds an entry for the codegen in use (target triple,
CPU name and features). The engine compiles for the generic CPU (``NUMBA_CPU_NAME=generic``),
so the cache the package build ships (docs/design.md "The compiled engine ships with the
package") is valid on every machine of the architecture. docs/design.md has the mechanism.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import re
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

ENGINE = Path(__file__).parent.parent / "engine"
# a compiled function is decorated by one of engine/jit.py's decorators, first line first
_DECORATED = re.compile(r"^@(jit|entry|sig\(|entry_sig\()")
_DEF = re.compile(r"^def (\w+)\(")


def use_generic_cpu() -> str:
    """Compile for LLVM's generic CPU unless the environment names one; the CPU name."""
    return os.environ.setdefault("NUMBA_CPU_NAME", "generic")


def compiled_functions(engine: Path = ENGINE) -> list[tuple[Path, str, int]]:
    """Every compiled function of the engine: (source, name, first line), as numba names
    its cache files (a decorated function's first line is its first decorator's)."""
    found = []
    for source in sorted(engine.glob("*.py")):
        lines = source.read_text().splitlines()
        first = None
        for number, line in enumerate(lines, start=1):
            if first is None and _DECORATED.match(line):
                first = number
            elif first is not None and (match := _DEF.match(line)):
                found.append((source, match.group(1), first))
                first = None
    return found


def _cache_dir(engine: Path) -> Path:
    """Where numba's locators put the engine's cache (numba/core/caching.py)."""
    root = os.environ.get("NUMBA_CACHE_DIR")
    if root:
        hashed = hashlib.sha1(str(engine.resolve()).encode()).hexdigest()
        return Path(root) / f"{engine.name}_{hashed}"
    if os.access(engine, os.W_OK):
        return engine / "__pycache__"
    from numba.misc.appdirs import AppDirs

    hashed = hashlib.sha1(str(engine.resolve()).encode()).hexdigest()
    return Path(AppDirs(appname="numba", appauthor=False).user_cache_dir) / f"engine_{hashed}"


def _magic() -> tuple:
    """The codegen's key in numba's cache index: target triple, CPU name, CPU features."""
    use_generic_cpu()
    from numba.core import config, registry

    config.reload_config()
    return registry.cpu_target.target_context.codegen().magic_tuple()


def _index_valid(index: Path, digest: bytes, version: str, magic: tuple) -> bool:
    """Whether ``index`` was written by numba ``version`` for a source of content hash
    ``digest`` and holds machine code for the codegen ``magic``."""
    try:
        with open(index, "rb") as f:
            if pickle.load(f) != version:
                return False
            stamp, overloads = pickle.loads(f.read())
    except (OSError, pickle.UnpicklingError, EOFError, ValueError, AttributeError):
        return False
    if stamp != digest:
        return False
    return any(key[1] == magic for key in overloads)


def engine_compiled(engine: Path = ENGINE) -> bool:
    """True when every compiled function of the engine has machine code cached for the
    installed numba and Python, the current sources and this codegen (CPU)."""
    if os.environ.get("NUMBA_DISABLE_JIT", "0") not in ("", "0"):
        return True  # interpreted: nothing to compile
    import numba

    cache, magic = _cache_dir(engine), _magic()
    tag = f"py{sys.version_info[0]}{sys.version_info[1]}{getattr(sys, 'abiflags', '')}"
    digests: dict[Path, bytes] = {}  # each source hashed once, not once per function
    for source, name, line in compiled_functions(engine):
        if source not in digests:
            digests[source] = hashlib.sha256(source.read_bytes()).digest()
        index = cache / f"{source.stem}.{name}-{line}.{tag}.nbi"
        if not _index_valid(index, digests[source], numba.__version__, magic):
            return False
    return True


@contextmanager
def counting_compiles(progress: Callable[[int, int], None]) -> Iterator[None]:
    """Within the block, call ``progress(compiled, total)`` at its start and each time numba
    finishes compiling another of the engine's functions (``total``: the engine's compiled
    functions; one compiled for two signatures counts once; a cache load is no compile)."""
    from numba.core import event

    total, seen = len(compiled_functions()), set()

    class _Listener(event.Listener):
        def on_start(self, ev) -> None:
            pass

        def on_end(self, ev) -> None:
            dispatcher = ev.data["dispatcher"]
            if dispatcher.py_func.__module__.startswith("prefixbench.engine."):
                if id(dispatcher) not in seen:
                    seen.add(id(dispatcher))
                    progress(min(len(seen), total), total)

    with event.install_listener("numba:compile", _Listener()):
        progress(0, total)
        yield
