"""The Typer app, its consoles and the one error path every command shares.

Heavy imports (numpy, polars, the engine) happen inside commands so `--help` stays fast.
Errors from the library print one line to stderr and exit non-zero; `--debug` shows the
traceback instead.
"""

from __future__ import annotations

import functools
from enum import Enum
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape

from ..errors import PrefixbenchError, one_line


class _OneLineUsageErrors(typer.core.TyperGroup):
    """Command-line usage errors (unknown option, bad choice, missing value) as one stderr
    line, like library errors, instead of a multi-line usage panel."""

    def main(self, *args, standalone_mode: bool = True, **kwargs):
        import sys

        if not standalone_mode:
            return super().main(*args, standalone_mode=False, **kwargs)
        try:
            rv = super().main(*args, standalone_mode=False, **kwargs)
        except typer.TyperException as e:  # click's ClickException family
            if type(e).__name__ == "NoArgsIsHelpError":  # bare `prefixbench`: the help text
                e.show()
                sys.exit(0)
            ctx = getattr(e, "ctx", None)
            path = ctx.command_path if ctx is not None else "prefixbench"
            what = e.format_message().replace("Value error, ", "").rstrip(". ")
            line = f"{path}: {what}; see '{path} --help'"
            err.print(
                f"[bold red]error:[/] {escape(one_line(line))}",
                markup=True,
                highlight=False,
                soft_wrap=True,
            )
            sys.exit(e.exit_code)
        except typer.Abort:
            err.print("aborted", highlight=False)
            sys.exit(1)
        sys.exit(rv if isinstance(rv, int) else 0)


app = typer.Typer(
    name="prefixbench",
    help="Simulate disaggregated LLM serving and decide how the decode node should get a shared "
    "prefix's KV: transfer it, recompute it, or keep replicas.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    cls=_OneLineUsageErrors,
)
catalog_app = typer.Typer(help="What prefixbench knows: models, accelerators, links, workloads.")
app.add_typer(catalog_app, name="catalog")

out = Console()
err = Console(stderr=True)
_state = {"debug": False}


class PolicyChoice(str, Enum):
    all = "all"
    transfer_per_request = "transfer_per_request"
    recompute_on_decode = "recompute_on_decode"
    replicate_hotset = "replicate_hotset"
    replicate_all_lru = "replicate_all_lru"


class _Study(str, Enum):
    reference = "reference"
    disagg = "disagg"


Study = _Study | None


class _TraceFormat(str, Enum):
    mooncake = "mooncake"
    azure = "azure"


TraceFormat = _TraceFormat | None


def guarded(fn):
    """Turn library errors into one stderr line and a non-zero exit (traceback with --debug)."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        import warnings

        try:
            with warnings.catch_warnings():
                # numpy's "Mean of empty slice" / "invalid value" warnings would be raw extra
                # stderr lines; the library reports what matters (NaN shows as n/a or –)
                if not _state["debug"]:
                    warnings.simplefilter("ignore", RuntimeWarning)
                return fn(*args, **kwargs)
        except PrefixbenchError as e:
            if _state["debug"]:
                raise
            err.print(
                f"[bold red]error:[/] {escape(e.line())}",
                markup=True,
                highlight=False,
                soft_wrap=True,
            )
            raise typer.Exit(e.exit_code) from None
        except KeyboardInterrupt:
            err.print("interrupted", highlight=False)
            raise typer.Exit(130) from None

    return wrapper


def _version(value: bool) -> None:
    if value:
        from .. import __version__

        out.print(f"prefixbench {__version__}")
        raise typer.Exit()


@app.callback()
def _main(
    debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks on errors.")] = False,
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version.")
    ] = False,
) -> None:
    _state["debug"] = debug


TraceOpt = Annotated[
    str | None,
    typer.Option(
        "--trace", help="Replay this trace (Mooncake .jsonl or Azure .csv) as the workload."
    ),
]
TraceFormatOpt = Annotated[TraceFormat, typer.Option("--trace-format", help="Trace format.")]
Overrides = Annotated[
    list[str] | None,
    typer.Option("--set", help="Override a scenario field: path.to.field=value (repeatable)."),
]


def _csv(values: list[str] | None) -> list[str] | None:
    """Accept both repeated options and comma-separated lists."""
    if not values:
        return None
    return [v.strip() for item in values for v in item.split(",") if v.strip()]


class _Progress:
    """A Rich progress bar with ETA fed by the library's callbacks."""

    def __init__(self, label: str) -> None:
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeRemainingColumn,
        )

        self.bar = Progress(
            TextColumn(label),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("points"),
            TimeRemainingColumn(),
            console=err,
            transient=False,
        )
        self.task = None

    def start(self, total: int, done: int) -> None:
        if done:
            err.print(f"resuming: {done} of {total} points already finished", highlight=False)
        self.bar.start()
        self.task = self.bar.add_task("points", total=total, completed=done)

    def point(self, _p) -> None:
        self.bar.advance(self.task)

    def stop(self) -> None:
        self.bar.stop()


def check_policy(policy: str) -> str:
    """A hand-off policy name typed by the user, or a one-line error with a suggestion."""
    from ..scenario import POLICIES
    from ..suggest import did_you_mean

    if policy not in POLICIES:
        raise PrefixbenchError(
            f"unknown policy '{policy}'", where="--policy", fix=did_you_mean(policy, POLICIES)
        )
    return policy


def main() -> None:
    app()
