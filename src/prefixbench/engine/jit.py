"""How the engine is compiled: one numba decorator for every helper.

``jit`` compiles lazily (numba infers the argument types at the first call); ``sig`` fixes
a signature, for helpers called with literal arguments (numba would otherwise compile one
copy per literal). Both cache the machine code next to the source (``cache=True``), so a
fresh process loads instead of compiling, and both skip numba's reference counting
(``_nrt=False``): the helpers only index arrays allocated in Python and kept alive by the
caller, and an atomic incref/decref of every array on every call would cost more than the
simulation itself.
numba's per-function cache object is made when the function is first used (``_LazyCache``),
not at import.

The code is generated for LLVM's generic CPU of the architecture (``NUMBA_CPU_NAME=generic``,
unless the environment names another), so that the cache built when the package is built
(docs/design.md "The compiled engine ships with the package") is valid on any machine of
that architecture instead of only on the one that built it.

With ``NUMBA_DISABLE_JIT=1`` numba returns the plain Python functions, so the same source
runs interpreted (for debugging and coverage; tests/test_engine.py runs a scenario so).
"""

from __future__ import annotations

from ..support.firstrun import use_generic_cpu

CPU = use_generic_cpu()

from numba import njit  # noqa: E402  (numba reads NUMBA_CPU_NAME when imported)
from numba.core import caching, config, registry, typeinfer  # noqa: E402
from numba.core.runtime import rtsys  # noqa: E402

config.reload_config()  # numba was imported before (by a caller): take the CPU name now


def _load_overload(self, sig, target_context):
    """numba's ``Cache.load_overload`` without its ``target_context.refresh()``.

    The refresh installs every lowering registry numba has (numpy, linalg, random, typed
    containers, cffi: about 200 modules, scipy among them), 0.4 CPU-s of each process's
    start-up, and a cache load uses none of them: it links machine code, which needs only
    the runtime's symbols (``rtsys.initialize``, called first here as numba's refresh would).
    A miss still compiles with the registries, because numba's compiler refreshes the
    contexts itself (``numba/core/compiler.py`` ``CompilerBase.__init__``).
    """
    rtsys.initialize(target_context)
    with self._guard_against_spurious_io_errors():
        return self._load_overload(sig, target_context)


caching.Cache.load_overload = _load_overload


class _LazyCache:
    """numba's ``FunctionCache`` of one function, made when the dispatcher first uses it.

    ``cache=True`` makes it at decoration: it locates the cache directory, creates and
    removes a temporary file there to prove it writable, and stats and hashes the source,
    for each of the engine's ~240 functions at import (0.02-0.03 CPU-s of every process),
    although a run calls about a dozen of them from Python (the rest are inside the loaded
    machine code). The dispatcher reaches its cache only through attributes, so this stands
    in until one is read."""

    def __init__(self, py_func) -> None:
        self._py_func = py_func
        self._real = None

    def __getattr__(self, name: str):
        if self._real is None:
            self._real = caching.FunctionCache(self._py_func)
        return getattr(self._real, name)


_OPTIONS = {"error_model": "numpy", "_nrt": False}  # cached: see _cached
# helpers called only from compiled code need no CPython or C-function wrapper, and
# generating those is a good part of the compile time
_INTERNAL = {**_OPTIONS, "no_cpython_wrapper": True, "no_cfunc_wrapper": True}


def _cached(options: dict):
    """``njit(cache=True, **options)`` whose cache is made on first use (``_LazyCache``)."""
    compile_ = njit(**options)

    def decorate(fn):
        dispatcher = compile_(fn)
        if isinstance(dispatcher, registry.CPUDispatcher):  # not under NUMBA_DISABLE_JIT
            dispatcher._cache = _LazyCache(dispatcher.py_func)
        return dispatcher

    return decorate


jit = _cached(_INTERNAL)
entry = _cached(_OPTIONS)  # also called from Python


class _Fixed(registry.CPUDispatcher):
    """A dispatcher with one fixed signature that compiles (or loads from the cache) when
    first needed, not when decorated: numba's eager ``njit(signature)`` loads every such
    helper at import, most of the fixed start-up cost of a process, although a run loop
    loaded from the cache already holds their code. Once compiled it is closed to other
    signatures, as ``njit(signature)`` is (arguments convert to the fixed types)."""

    _signature = ""

    def _fix(self) -> None:
        if self._can_compile:
            with typeinfer.register_dispatcher(self):
                self.compile(self._signature)
            self.disable_compile()

    def get_call_template(self, args, kws):  # typing a call from compiled code
        self._fix()
        return super().get_call_template(args, kws)

    def _compile_for_args(self, *args, **kws):  # a call from Python
        if self._can_compile:
            self._fix()  # numba then calls the one overload (its wrapper converts the args)
            return next(iter(self.overloads.values())).entry_point
        return super()._compile_for_args(*args, **kws)


def _fixed(signature: str, options: dict):
    def decorate(fn):
        dispatcher = _cached(options)(fn)
        if isinstance(dispatcher, registry.CPUDispatcher):  # not under NUMBA_DISABLE_JIT
            dispatcher.__class__ = _Fixed
            dispatcher._signature = signature
        return dispatcher

    return decorate


def sig(signature: str):
    """``jit`` with a fixed signature."""
    return _fixed(signature, _INTERNAL)


def entry_sig(signature: str):
    """``entry`` with a fixed signature."""
    return _fixed(signature, _OPTIONS)
