"""The command-line adapter: parse options, call one library function, render.

Heavy imports (numpy, polars, the engine) happen inside commands so `--help` stays fast.
Errors from the library print one line to stderr and exit non-zero; `--debug` shows the
traceback instead. Importing the command modules registers their commands on ``app``.
"""

from . import catalog, cost, launch, map, simulate, study  # noqa: F401 - registers the commands
from .app import app, main

__all__ = ["app", "main"]
