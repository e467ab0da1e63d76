"""The command-line adapter: parse options, call one library function, render.

Heavy imports (numpy, polars, the engine) happen inside commands so `--help` stays fast.
Errors from the library print one line to stderr and exit non-zero; `--debug` shows the
traceback instead. The console script ``main`` first asks a live warm server to run the
command (``support/warm.py``, standard library only); importing ``app`` (the Typer app)
imports Typer and the command modules, which register their commands on it.
"""

import sys
import types

_COMMANDS = ("catalog", "cost", "launch", "map", "simulate", "study", "server")


def main() -> None:
    """The console script: in a live warm server when there is one for this environment
    (docs/design.md "The warm server"), else in this process."""
    from prefixbench.support.warm import run_through_server

    code = run_through_server()
    if code is not None:
        raise SystemExit(code)
    __getattr__("app")  # every command registered
    from .app import main as run_here

    run_here()


def __getattr__(name: str):
    if name != "app":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    for command in _COMMANDS:
        importlib.import_module(f"{__name__}.{command}")
    app = sys.modules[f"{__name__}.app"].app
    globals()["app"] = app
    return app


class _Package(types.ModuleType):
    """``prefixbench.cli.app`` is the Typer app, though ``app`` also names the module that
    defines it: importing that module does not rebind the package's ``app`` to it."""

    def __setattr__(self, name: str, value) -> None:
        if name == "app" and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
__all__ = ["app", "main"]
