"""Start-up of the command line: `--help` imports none of the heavy libraries, and the
lazily imported ``rich.markdown`` and ``rich.traceback`` still work when something uses
them."""

from __future__ import annotations

import subprocess
import sys

_HEAVY = ("numpy", "polars", "numba", "plotnine", "scipy", "markdown_it", "prefixbench.engine",
          "pygments", "rich.pretty", "pydantic")  # fmt: skip

_PROBE = """
import sys
sys.argv = ["prefixbench", *sys.argv[1:]]
from prefixbench.cli import main
try:
    main()
except SystemExit:
    pass
print(sorted(m for m in {heavy!r} if m in sys.modules), file=sys.stderr)
"""


def _imported(*argv: str) -> str:
    p = subprocess.run(
        [sys.executable, "-c", _PROBE.format(heavy=_HEAVY), *argv],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return p.stderr.strip().splitlines()[-1]


def test_help_imports_no_heavy_library():
    assert _imported("--help") == "[]"
    assert _imported("run", "--help") == "[]"


def _printed(code: str) -> list[str]:
    """The words ``code`` prints in a fresh interpreter."""
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.split()


def test_the_deferred_markdown_module_is_the_real_one_when_used():
    code = (
        "import sys\nfrom prefixbench.cli import app\n"
        "from rich.markdown import Markdown\n"
        "assert 'markdown_it' not in sys.modules\n"
        "from rich.console import Console\n"
        "Console(width=30, file=sys.stdout).print(Markdown('# Title'))\n"
        "import rich.markdown as m\n"
        "print(type(Markdown('x')).__module__, m.Heading.__name__)\n"
    )
    out = _printed(code)
    assert out[0] == "Title" and out[-2:] == ["rich.markdown", "Heading"]


def test_the_deferred_traceback_module_is_the_real_one_when_used():
    code = (
        "import sys\nfrom prefixbench.cli import app\n"
        "from rich.traceback import Traceback\n"
        "assert 'pygments' not in sys.modules\n"
        "from rich.console import Console\n"
        "try:\n"
        "    1 / 0\n"
        "except ZeroDivisionError:\n"
        "    tb = Traceback()\n"
        "Console(width=60, file=sys.stdout).print(tb)\n"
        "import rich.traceback as m\n"
        "assert isinstance(tb, Traceback) and Traceback.from_exception\n"
        "print(type(tb).__module__, m.Frame.__name__)\n"
    )
    out = _printed(code)
    assert "ZeroDivisionError:" in out and out[-2:] == ["rich.traceback", "Frame"]


def test_the_cli_modules_annotations_are_objects_not_strings():
    """With ``from __future__ import annotations`` Typer's get_type_hints compiles every
    option's annotation string (about 600) to build the command tree: 0.02-0.04 CPU-s of
    every `--help` (docs/performance.md "The warm server")."""
    from pathlib import Path

    import prefixbench.cli

    folder = Path(prefixbench.cli.__file__).parent
    lazy = [
        p.name for p in folder.glob("*.py") if "from __future__ import annotations" in p.read_text()
    ]
    assert lazy == []


def test_the_warm_server_check_imports_only_the_standard_librarys_basics():
    code = (
        "import sys\n"
        "before = set(sys.modules)\n"
        "from prefixbench.support.warm import run_through_server\n"
        "assert run_through_server() is None\n"
        "new = sorted(m for m in set(sys.modules) - before if not m.startswith('prefixbench'))\n"
        "print(new)\n"
    )
    import os

    env = {**os.environ, "XDG_RUNTIME_DIR": "/nonexistent-runtime-dir"}
    env.pop("PREFIXBENCH_SERVER", None)
    p = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env
    )
    assert p.stdout.strip() in ("[]", "['_blake2']"), p.stdout


_ARRAYS = "numba.np.arrayobj"


def _run_imports_arrays(out) -> bool:
    argv = ("run", "-p", "transfer_per_request", "--set", "run.requests=20",
            "--set", "run.warmup_requests=2", "--out", str(out))  # fmt: skip
    p = subprocess.run(
        [sys.executable, "-c", _PROBE.format(heavy=(_ARRAYS,)), *argv],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return _ARRAYS in p.stderr.strip().splitlines()[-1]


def test_a_run_from_the_cache_loads_no_numba_array_module(tmp_path):
    """The compiled passes a run calls (workload/dense.py, metrics/bound.py, the engine)
    allocate nothing, so loading their cached code does not import ``numba.np.arrayobj``
    and its 12 modules (about 0.07 CPU-s of every process). A cold cache compiles, which
    imports it; the second run then loads."""
    assert not _run_imports_arrays(tmp_path / "a") or not _run_imports_arrays(tmp_path / "b")
