"""engine/jit.py: fixed-signature helpers load when first used, not at import, and stay
closed to other signatures once loaded (as numba's eager ``njit(signature)`` is)."""

from __future__ import annotations

import subprocess
import sys

import pytest

_PROBE = """
import numpy as np
from prefixbench.engine import jit, queues
fixed = [v for m in (queues,) for v in vars(m).values() if isinstance(v, jit._Fixed)]
print(len(fixed), sum(bool(f.overloads) for f in fixed))
"""


def test_importing_the_engine_loads_no_fixed_signature_helper():
    out = subprocess.run(
        [sys.executable, "-c", _PROBE], capture_output=True, text=True, check=True
    ).stdout.split()
    assert int(out[0]) > 5  # queues.py's helpers are fixed-signature
    assert out[1] == "0"  # none compiled or loaded by the import


def test_a_fixed_helper_has_one_signature_and_converts_arguments():
    import numpy as np

    from prefixbench.engine import layout as L
    from prefixbench.engine import queues

    EHT, EHI = np.empty(8), np.empty(24, dtype=np.int64)
    IS = np.zeros(256, dtype=np.int64)  # the global slots the heap uses (GI_SEQ, GI_HSZ)
    queues.push(EHT, EHI, IS, 1, L.EV_ARRIVAL, 0, 0)  # an int time converts to float64
    assert len(queues.push.overloads) == 1
    assert IS[L.GI_HSZ] == 1 and EHT[0] == 1.0
    with pytest.raises(TypeError):
        queues.push(EHT.astype(np.float32), EHI, IS, 1.0, L.EV_ARRIVAL, 0, 0)


_LEAN = """
import sys
from prefixbench.engine.api import warm_up
warm_up()  # every entry point of the disaggregated mode, loaded from the cache
print(sorted(m for m in ("numba.np.arraymath", "numba.np.linalg", "numba.typed.typeddict")
             if m in sys.modules))
"""


def test_a_cache_load_installs_none_of_numbas_lowering_registries():
    """Loading the engine's machine code imports none of the ~200 modules a compile needs
    (numba's refresh of its lowering registries: 0.4 CPU-s of every process's start-up)."""
    from prefixbench.engine.api import warm_up

    warm_up()  # the cache is filled (here, not in the probe)
    out = subprocess.run(
        [sys.executable, "-c", _LEAN], capture_output=True, text=True, check=True
    ).stdout.split("\n")
    assert out[-2] == "[]"


def test_a_cache_miss_still_compiles_with_the_registries(tmp_path):
    """A function with no cache entry compiles (numba's compiler refreshes the contexts
    itself), and numpy's lowering is there when the function needs it."""
    (tmp_path / "probe_mod.py").write_text(
        "import prefixbench.engine.jit\n"
        "import numpy as np\nfrom numba import njit\n"
        "@njit(cache=True)\ndef f(a):\n    return np.sort(a)[-1] + np.linalg.norm(a)\n"
    )
    code = "import numpy as np, probe_mod; print(probe_mod.f(np.array([3.0, 4.0])))"
    for _ in range(2):  # a compile, then a load from the cache just written
        out = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True,
            cwd=tmp_path,
        ).stdout  # fmt: skip
        assert out.strip() == "9.0"


_LAZY = """
import sys
from numba.core.registry import CPUDispatcher
from prefixbench.engine import api, jit

def made():
    mods = [m for n, m in sys.modules.items() if n.startswith("prefixbench.engine.")]
    ds = {id(v): v for m in mods for v in vars(m).values() if isinstance(v, CPUDispatcher)}
    return len(ds), sum(d._cache._real is not None for d in ds.values())

print(*made())
api.warm_up()
s = api._run_disaggregated.stats
print(*made(), sum(s.cache_hits.values()), sum(s.cache_misses.values()))
"""


def test_the_engines_function_caches_are_made_when_first_used():
    """Importing the engine makes none of its ~240 numba function caches (each proves its
    directory writable with a temporary file and hashes the source); a run from Python
    makes only those of the functions it calls, which still load from the cache."""
    from prefixbench.engine.api import warm_up

    warm_up()  # the cache is filled (here, not in the probe)
    out = subprocess.run(
        [sys.executable, "-c", _LAZY], capture_output=True, text=True, check=True
    ).stdout.split("\n")
    n, made = map(int, out[0].split())
    assert n > 200 and made == 0
    n_after, made, hits, misses = map(int, out[1].split())
    assert 0 < made < n_after / 4
    assert hits == 1 and misses == 0
