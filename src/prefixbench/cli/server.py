"""`prefixbench server start|stop|status`: the opt-in warm server (docs/design.md "The warm
server"). While one runs, every `prefixbench` command started in the same environment runs
in a process forked from it, with numpy, numba, pydantic, the engine and polars already
loaded; `support/warm.py` is the client, `support/warmserve.py` the server."""

import os
import sys
import time
from typing import Annotated

import typer

from .app import app, echo_json, err, guarded, out

server_app = typer.Typer()
app.add_typer(server_app, name="server")

DEFAULT_IDLE_S = 900.0
# what `run`, `sweep` and the tables import past the engine; they import polars, so the
# spare imports them after its fork (support/warmserve.py)
_SPARE_MODULES = (
    "polars", "prefixbench.metrics.summary", "prefixbench.metrics.bound",
    "prefixbench.metrics.stability", "prefixbench.io.stream", "prefixbench.io.artifacts",
    "prefixbench.io.export", "prefixbench.render.tables", "prefixbench.study.sweep",
    "prefixbench.study.runs", "prefixbench.study.recommend",
)  # fmt: skip


def _preload() -> None:
    """The server's imports: everything that starts no thread (so it can fork safely)."""
    import numpy  # noqa: F401
    import pydantic  # noqa: F401

    import prefixbench.system.preload  # noqa: F401 - the engine's disaggregated entry points
    from prefixbench.cli import app  # noqa: F401 - every command registered
    from prefixbench.engine import warm_up

    warm_up(colocated=True)
    sys.modules["prefixbench.cli.app"]._state["engine_ready"] = True
    _first_calls()
    if "polars" in sys.modules:  # a thread pool here would be unsafe to fork
        raise RuntimeError("the warm server's preload imported polars")


def _first_calls() -> None:
    """A 60-request scenario prepared and simulated under every policy, with its bound: the
    first call of each compiled function outside the engine (``workload/dense.py``,
    ``metrics/bound.py``) loads its machine code, here once rather than in every command."""
    from prefixbench.metrics import bound
    from prefixbench.scenario.loader import load_scenario
    from prefixbench.scenario.models import POLICIES
    from prefixbench.system.runner import prepare, simulate_policy

    prep = prepare(load_scenario(None, ["run.requests=60", "run.warmup_requests=5"]))
    for policy in POLICIES:
        simulate_policy(prep, policy)
    bound._resident(prep)
    bound._PER_PREP.clear()


def _spare_setup() -> None:
    import importlib

    for name in _SPARE_MODULES:
        try:
            importlib.import_module(name)
        except ImportError:
            pass


def _run_command() -> None:
    """The console script's command, in a spare that has become the client's process."""
    app_module = sys.modules["prefixbench.cli.app"]  # (the package's ``app`` is the Typer app)
    for console, stderr in ((app_module.out, False), (app_module.err, True)):
        console.__init__(stderr=stderr)  # colour and width from the client's terminal
    app_module.main()


def serve_main() -> None:
    """Entry of the server process that `server start` launches (argv: idle seconds)."""
    idle = float(sys.argv[1]) if len(sys.argv) > 1 else _idle_default()
    from prefixbench.support.warmserve import serve

    sys.exit(serve(_run_command, _preload, _spare_setup, idle))


def _idle_default() -> float:
    try:
        return float(os.environ.get("PREFIXBENCH_SERVER_IDLE", DEFAULT_IDLE_S))
    except ValueError:
        return DEFAULT_IDLE_S


IdleOpt = Annotated[
    float | None,
    typer.Option("--idle", help="Stop after this many seconds without a command "
                 "(default: PREFIXBENCH_SERVER_IDLE, else 900)."),
]  # fmt: skip


def _wait(until, timeout_s: float) -> bool:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout_s:
        if until():
            return True
        time.sleep(0.05)
    return False


JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON.")]


def _said(as_json: bool, text: str, **fields) -> None:
    if as_json:
        echo_json(fields)
    else:
        out.print(text, highlight=False)


@server_app.command("start")
@guarded
def server_start(idle: IdleOpt = None, as_json: JsonOpt = False) -> None:
    """Start a warm server for this environment (Python, sources, NUMBA_* settings)."""
    from prefixbench.errors import PrefixbenchError
    from prefixbench.support.warm import start_in_background
    from prefixbench.support.warmserve import status

    if (st := status()) is not None and "pid" in st:
        _said(
            as_json,
            f"already running: pid {st['pid']}",
            **{**st, "running": True, "launched": False},
        )
        return
    start_in_background(idle if idle is not None else _idle_default())

    def ready() -> bool:
        st = status()
        return st is not None and "pid" in st

    if not _wait(ready, 180.0):  # a first start may compile the engine
        raise PrefixbenchError("the warm server did not start within 180 s", where="server start",
                               fix="see the log next to the socket, or run without a server")  # fmt: skip
    st = status()
    text = f"started: pid {st['pid']}, socket {st['socket']}"
    _said(as_json, text, **{**st, "running": True, "launched": True})


@server_app.command("stop")
@guarded
def server_stop(as_json: JsonOpt = False) -> None:
    """Stop this environment's warm server (commands it is running finish)."""
    import signal

    from prefixbench.support.warmserve import status

    st = status()
    if st is None or "pid" not in st:
        _said(as_json, "not running", running=False, stopped=None)
        return
    os.kill(st["pid"], signal.SIGTERM)
    if not _wait(lambda: status() is None, 10.0):
        err.print(f"pid {st['pid']} is still running after 10 s", highlight=False)
        raise typer.Exit(1)
    _said(as_json, f"stopped: pid {st['pid']}", running=False, stopped=st["pid"])


@server_app.callback(invoke_without_command=True)
@guarded
def server_group(ctx: typer.Context, as_json: JsonOpt = False) -> None:
    """An opt-in warm server that makes repeated commands start fast (alone: its status)."""
    if ctx.invoked_subcommand is None:
        server_status(as_json)


@server_app.command("status")
@guarded
def server_status(as_json: JsonOpt = False) -> None:
    """Whether a warm server serves this environment; exit status 1 when none does."""
    from prefixbench.support.warmserve import status

    st = status()
    if as_json:
        echo_json({"running": st is not None, **(st or {})})
    elif st is None:
        out.print("not running", highlight=False)
    else:
        served = st.get("served", 0)
        noun = "command" if served == 1 else "commands"
        out.print(f"running: pid {st.get('pid', '?')}, {served} {noun} served, "
                  f"idle timeout {st.get('idle_s', '?')} s, socket {st.get('socket', '?')}",
                  highlight=False)  # fmt: skip
    if st is None:
        raise typer.Exit(1)
