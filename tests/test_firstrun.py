"""Whether the engine's machine code is ready: told from numba's cache indexes without
importing the engine, for the installed numba, Python, sources and CPU."""

from __future__ import annotations

import hashlib
import pickle
import shutil

from prefixbench.support import firstrun
from prefixbench.support.firstrun import compiled_functions, engine_compiled


def _engine_copy(tmp_path):
    """A copy of the engine's sources with a copy of its cache (warm, checked first)."""
    from prefixbench.engine.api import warm_up

    warm_up(colocated=True)
    engine = tmp_path / "engine"
    shutil.copytree(firstrun.ENGINE, engine, ignore=shutil.ignore_patterns("*.pyc"))
    return engine


def test_every_engine_function_is_found_and_the_warm_up_compiles_each():
    """The count the progress bar shows is the engine's functions, and the warm-up (the
    package build's compile) leaves every one cached."""
    import importlib

    from numba.core.dispatcher import Dispatcher

    from prefixbench.engine.api import warm_up

    warm_up(colocated=True)
    found = compiled_functions()
    dispatchers = set()
    for source in sorted({s for s, _, _ in found}):
        module = importlib.import_module(f"prefixbench.engine.{source.stem}")
        for value in vars(module).values():
            if isinstance(value, Dispatcher) and value.py_func.__module__ == module.__name__:
                dispatchers.add(
                    (source, value.py_func.__name__, value.py_func.__code__.co_firstlineno)
                )
    assert set(found) == dispatchers
    assert len(found) > 100
    assert engine_compiled()


def test_a_moved_install_keeps_its_cache(tmp_path):
    """numba keys sources by content: the cache is valid at another path (a wheel's)."""
    assert engine_compiled(_engine_copy(tmp_path))


def test_an_edited_source_another_numba_or_cpu_is_not_compiled(tmp_path, monkeypatch):
    engine = _engine_copy(tmp_path)
    loop = engine / "loop.py"
    loop.write_text(loop.read_text() + "\n# edited\n")
    assert not engine_compiled(engine)  # the loop's index is stamped with the old content

    engine = _engine_copy(tmp_path / "b")
    source, name, line = compiled_functions(engine)[0]
    index = engine / "__pycache__" / f"{source.stem}.{name}-{line}.py311.nbi"
    with open(index, "rb") as f:
        pickle.load(f)
        rest = f.read()
    index.write_bytes(pickle.dumps("0.1.0") + rest)
    assert not engine_compiled(engine)  # written by another numba

    engine = _engine_copy(tmp_path / "c")
    monkeypatch.setattr(firstrun, "_magic", lambda: ("x86_64-unknown-linux-gnu", "skylake", ""))
    assert not engine_compiled(engine)  # compiled for another CPU


def test_an_empty_cache_dir_is_not_compiled(tmp_path, monkeypatch):
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path))
    assert not engine_compiled()


def test_the_cache_dir_is_the_one_numba_uses(tmp_path, monkeypatch):
    """Under NUMBA_CACHE_DIR numba names the folder after the source directory and a hash
    of its path (numba/core/caching.py get_suitable_cache_subpath)."""
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path))
    hashed = hashlib.sha1(str(firstrun.ENGINE.resolve()).encode()).hexdigest()
    assert firstrun._cache_dir(firstrun.ENGINE) == tmp_path / f"engine_{hashed}"


def test_compiles_are_counted(monkeypatch):
    """The progress callback sees each engine function numba compiles, once."""
    from numba import njit, types
    from numba.core.caching import NullCache

    from prefixbench.engine import window

    for function in (window.in_window, window.clipped):
        monkeypatch.setattr(function, "_cache", NullCache())  # compile, neither load nor save
    seen = []
    with firstrun.counting_compiles(lambda done, total: seen.append((done, total))):
        njit(lambda x: x + 1)(1)  # not the engine's: not counted
        # engine functions for a signature no run uses (float32 arrays): compiled anew
        window.in_window.compile((types.float32[:], types.float32))
        window.in_window.compile((types.float32[:], types.float64))
        window.clipped.compile((types.float32[:], types.float32, types.float32))
    total = len(compiled_functions())
    assert seen == [(0, total), (1, total), (2, total)]
