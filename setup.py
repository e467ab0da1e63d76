"""The package build also compiles the event engine and ships numba's cache inside the
package, so the first simulation after ``pip install`` loads machine code instead of
compiling it (docs/design.md "The compiled engine ships with the package").

The cache is built for LLVM's generic CPU of the architecture (``NUMBA_CPU_NAME=generic``,
the engine's choice at run time too), so it is valid on any machine of the architecture; it
is valid only for the numba that built it, so the wheel pins that numba, and only for this
Python, so the wheel is tagged for this interpreter and platform. Everything else about the
package is in pyproject.toml.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import time
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

DEPENDENCIES = [
    "typer>=0.12",
    "rich>=13",
    "numpy>=1.26",
    "polars>=1.10",  # polars.io.plugins.register_io_source (io/stream.py)
    "plotnine>=0.13",
    "scipy>=1.8",  # Student-t quantiles in study/decision_map.py (plotnine needs it too)
    "pydantic>=2.6",
    "pyyaml>=6.0",
]

# Run in a fresh interpreter on the built tree: compile every engine function (a tiny run
# reaching every entry point) and the hindsight bound's (metrics/bound.py), and check that
# each engine function has its cache entry.
_COMPILE = """
import sys, time
from prefixbench.support.firstrun import counting_compiles, engine_compiled
def show(done, total):
    if done % 20 == 0 or done == total:
        print(f"  compiled {done} of {total} engine functions", file=sys.stderr, flush=True)
with counting_compiles(show):
    from prefixbench.engine import warm_up
    warm_up(colocated=True)
from prefixbench.metrics.bound import belady_resident  # the hindsight bound's heap
belady_resident([0, 2, 3], [5, 6, 5], [4, 4, 4], 4.0)
from prefixbench.workload.dense import warm_up as dense_warm_up  # linear-time block ids
dense_warm_up()
from prefixbench.workload.reuse import warm_up as reuse_warm_up  # the chains' leading runs
reuse_warm_up()
from prefixbench.metrics.prefixes import warm_up as prefixes_warm_up  # the sweep's per-prefix pass
prefixes_warm_up()
from prefixbench.metrics.stability import warm_up as stability_warm_up  # the queue sweeps
stability_warm_up()
sys.exit(0 if engine_compiled() else 3)
"""


def _numba() -> str:
    """The numba requirement: exactly the build's numba (its cache is valid for no other)."""
    try:
        import numba
    except ImportError:  # a build without numba ships no cache; the first run compiles
        return "numba>=0.68"
    return f"numba=={numba.__version__}"


def _drop_stale_cache(engine: Path) -> None:
    """Keep a cache left by an earlier build (in-tree builds reuse build/) only when no
    engine source changed: numba checks each function's own file, but the helpers read
    engine/layout.py's constants as frozen globals, so one edit can stale other files' code."""
    digest = hashlib.sha256(
        b"".join(p.read_bytes() for p in sorted(engine.glob("*.py")))
    ).hexdigest()
    stamp = engine / "__pycache__" / "prefixbench-sources.sha256"
    if stamp.is_file() and stamp.read_text() == digest:
        return
    for cached in engine.glob("__pycache__/*.nb[ic]"):
        cached.unlink()
    stamp.parent.mkdir(exist_ok=True)
    stamp.write_text(digest)


class BuildWithEngine(build_py):
    """``build_py`` that also compiles the engine into the built package's ``__pycache__``."""

    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False) or os.environ.get("PREFIXBENCH_NO_PRECOMPILE"):
            return  # an editable install compiles in the source tree at its first run
        _drop_stale_cache(Path(self.build_lib) / "prefixbench" / "engine")
        env = {
            k: v for k, v in os.environ.items() if k not in ("NUMBA_CACHE_DIR", "NUMBA_DISABLE_JIT")
        }
        env.update(NUMBA_CPU_NAME="generic", PYTHONDONTWRITEBYTECODE="1")
        env["PYTHONPATH"] = os.pathsep.join(
            [os.path.abspath(self.build_lib), env.get("PYTHONPATH", "")]
        )
        print(
            "prefixbench: compiling the event engine for the package (generic CPU)", file=sys.stderr
        )
        t0 = time.monotonic()
        done = subprocess.run([sys.executable, "-c", _COMPILE], env=env, check=False)
        took = time.monotonic() - t0
        if done.returncode:
            print(
                f"prefixbench: WARNING the engine did not compile ({done.returncode}); "
                "the first run will compile it",
                file=sys.stderr,
            )
        else:
            print(f"prefixbench: engine compiled in {took:.0f} s", file=sys.stderr)


class PlatformDistribution(Distribution):
    """The wheel holds machine code (the engine's cache): tag it for this Python and platform."""

    def has_ext_modules(self) -> bool:
        return True


setup(
    install_requires=[*DEPENDENCIES, _numba()],
    cmdclass={"build_py": BuildWithEngine},
    distclass=PlatformDistribution,
)
