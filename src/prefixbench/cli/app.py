"""The Typer app, its consoles and the one error path every command shares.

Heavy imports (numpy, polars, the engine) happen inside commands so `--help` stays fast.
Errors from the library print one line to stderr and exit non-zero; `--debug` shows the
traceback instead.
"""

import functools
import os
import sys
from enum import Enum
from typing import Annotated


def _defer(module: str, name: str) -> None:
    """Until something builds a ``name`` (or reads another attribute), a stand-in holds
    ``module``'s place in ``sys.modules``; that first use imports the real module."""
    import sys
    import types

    if module in sys.modules:
        return

    def real():
        if sys.modules.get(module) is stand_in:
            del sys.modules[module]
        import importlib

        return importlib.import_module(module)

    class StandIn(types.ModuleType):
        def __getattr__(self, attr):
            if attr.startswith("__"):  # the import system's probes (__path__, …)
                raise AttributeError(attr)
            return getattr(real(), attr)

    class Lazy(type):  # the class's stand-in: building one, its class methods, isinstance
        def __call__(cls, *args, **kwargs):
            return getattr(real(), name)(*args, **kwargs)

        def __getattr__(cls, attr):
            return getattr(getattr(real(), name), attr)

        def __instancecheck__(cls, obj):
            return isinstance(obj, getattr(real(), name))

    stand_in = StandIn(module)
    setattr(stand_in, name, Lazy(name, (), {}))
    sys.modules[module] = stand_in


# Typer's help formatter imports two Rich modules prefixbench's help never uses: ``Markdown``
# (with markdown-it: about a tenth of `--help`'s CPU) for help written in Markdown (ours is
# Rich markup), and ``Traceback`` (with pygments and rich.pretty: about a fifth) for its
# pretty exceptions, which the app turns off (``pretty_exceptions_enable=False``).
_defer("rich.markdown", "Markdown")
_defer("rich.traceback", "Traceback")

import typer  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.markup import escape  # noqa: E402

from ..errors import PrefixbenchError, one_line  # noqa: E402
from ..registry import TRACE_FORMATS, policy_names  # noqa: E402


def _suggestion(e) -> str:
    """'; did you mean …?' for a mistyped choice (a policy, a format)."""
    import re

    from prefixbench.support.suggest import closest

    m = re.search(r"'([^']*)' is not one of (.*)", e.format_message())
    if not m:
        return ""
    best = closest(m.group(1), re.findall(r"'([^']*)'", m.group(2)))
    return f"; did you mean '{best}'?" if best else ""


class _OneLineUsageErrors(typer.core.TyperGroup):
    """Command-line usage errors (unknown option, bad choice, missing value) as one stderr
    line, like library errors, instead of a multi-line usage panel."""

    def main(self, *args, standalone_mode: bool = True, **kwargs):
        import sys

        tidy_help(self)
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
            line = f"{path}: {what}{_suggestion(e)}; see '{path} --help'"
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


_METAVARS = {"str": "TEXT", "int": "N", "float": "X", "Path": "PATH"}


def _metavar(param) -> str | None:
    """What a value of ``param`` looks like in help, instead of a Python type name."""
    desc = getattr(param, "type_descriptor", None)
    if desc is None:
        return None
    if desc.is_choice:
        label = param.name.replace("_", "-").upper()
        return f"{label},…" if desc.is_list else label
    base = getattr(desc.annotation, "__name__", "")
    if param.name == "overrides":
        return "FIELD=VALUE"
    if desc.is_list:
        args = getattr(desc.annotation, "__args__", ())
        base = getattr(args[0], "__name__", "") if args else ""
        return f"{_METAVARS.get(base, 'TEXT')},…"
    if desc.is_path:
        return "PATH"
    return _METAVARS.get(base, "VALUE")


def _help_option(cmd):
    """``cmd``'s --help option, defaulting to False: Typer coerces a flag's value through a
    pydantic adapter unless it is already a bool, so a group's --help left at None would
    import pydantic for `run --help`, which parses the group's options first."""
    option = cmd.get_help_option(cmd.context_class(cmd, info_name=cmd.name))
    if option is not None and option.default is None:
        option.default = False
    return option


def tidy_help(group) -> None:
    """Help lists choices in the help text, where words wrap whole, and shows a short
    placeholder (TEXT, N, PATH, nothing for a flag) instead of a Python type name."""
    # the command's own context class: recent Typer vendors click, so no ``import click``
    commands = [group]
    while commands:
        cmd = commands.pop()
        commands.extend(getattr(cmd, "commands", {}).values())
        params = list(cmd.params)
        if cmd.add_help_option:
            params.append(_help_option(cmd))
        for param in params:
            if param is None or getattr(param, "_tidied", False):
                continue
            param._tidied = True
            desc = getattr(param, "type_descriptor", None)
            mv = "" if getattr(param, "is_flag", False) else _metavar(param)
            if mv is None:
                continue
            if desc is not None and desc.is_choice and desc.choices:
                names = ", ".join(str(getattr(c, "value", c)) for c in desc.choices)
                param.help = f"{param.help or ''} One of: {names}.".strip()
            param.display_type_rich = lambda ctx, _mv=mv: _mv


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
# engine_ready: the warm server loaded the engine before forking this process (cli/server.py)
_state = {"debug": False, "engine_ready": False}


# The hand-off policies and trace formats, from the registry (pure data: importing it keeps
# numpy out of `--help`)
PolicyName = Enum("PolicyName", [(n, n) for n in policy_names()], type=str, module=__name__)
PolicyChoice = Enum(
    "PolicyChoice", [("all", "all"), *((n, n) for n in policy_names())], type=str, module=__name__
)


class _Study(str, Enum):
    reference = "reference"
    disagg = "disagg"


Study = _Study | None


_TraceFormat = Enum(
    "_TraceFormat", [(f.name, f.name) for f in TRACE_FORMATS], type=str, module=__name__
)
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


SIMULATING = frozenset({"run", "sweep", "compare", "capacity", "map"})


@app.callback()
def _main(
    ctx: typer.Context,
    debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks on errors.")] = False,
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version.")
    ] = False,
) -> None:
    _state["debug"] = debug
    if debug:  # an out-of-range figure raises (metrics/invariants.py), in workers too
        os.environ["PREFIXBENCH_STRICT"] = "1"
    # (the callback runs before the command parses its options: `run --help` compiles nothing)
    if ctx.invoked_subcommand in SIMULATING and not set(sys.argv[1:]) & set(ctx.help_option_names):
        _compile_engine()


def _compile_engine() -> None:
    """Compile the engine before the command, counting the functions compiled, when its
    cache does not match the installed numba, Python and CPU (a package build ships a
    matching one: docs/design.md "The compiled engine ships with the package")."""
    from prefixbench.support.firstrun import counting_compiles, engine_compiled

    if _state["engine_ready"] or engine_compiled():
        return
    if err.is_terminal:
        err.print(
            "compiling the simulation engine for this numba and Python (once)", highlight=False
        )
    bar = _Progress("compiling", "functions")

    def progress(done: int, total: int) -> None:
        if not bar.total:
            bar.start(total)
        while bar.done < done:
            bar.point()

    with bar, counting_compiles(progress):
        from prefixbench.engine import warm_up

        warm_up(colocated=True)


TraceOpt = Annotated[
    str | None,
    typer.Option(
        "--trace",
        help="Replay this trace as the workload: Mooncake or Qwen-Bailian .jsonl, Azure or "
        "BurstGPT .csv (see docs/traces.md).",
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
    out = [v.strip() for item in values for v in item.split(",") if v.strip()]
    if not out:  # `--budgets ,` must not fall back to the default grid silently
        raise PrefixbenchError(
            f"{','.join(values)!r} lists no values",
            where="a comma-separated option",
            fix="give at least one value, or leave the option out for its default",
        )
    return out


class _Progress:
    """A Rich progress bar with ETA on stderr, fed by the library's callbacks.

    It draws only when stderr is a terminal: a pipe or a log file (and `--json` stdout,
    which it never touches) gets no bar. With ``after_s`` the bar appears only once the work
    has taken that long (a quick `map` draws none)."""

    def __init__(self, label: str, unit: str = "grid points", after_s: float = 0.0) -> None:
        import time

        self.label, self.unit, self.after_s = label, unit, after_s
        self.t0 = time.monotonic()
        self.total, self.done = 0, 0
        self.bar = None
        self.task = None

    def start(self, total: int, done: int = 0) -> None:
        if done:
            err.print(f"resuming: {done} of {total} {self.unit} already finished", highlight=False)
        self.total, self.done = total, done
        if self.after_s <= 0:
            self._open()

    def _open(self) -> None:
        if not err.is_terminal:
            return
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeRemainingColumn,
        )

        self.bar = Progress(
            TextColumn(self.label),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn(self.unit),
            TimeRemainingColumn(),
            console=err,
            transient=True,
        )
        self.bar.start()
        self.task = self.bar.add_task(self.unit, total=self.total, completed=self.done)

    def point(self, _p=None) -> None:
        import time

        self.done += 1
        if self.bar is not None:
            self.bar.advance(self.task)
        elif self.after_s > 0 and time.monotonic() - self.t0 > self.after_s:
            self._open()

    def stop(self) -> None:
        if self.bar is not None:
            self.bar.stop()
            self.bar = None

    def __enter__(self) -> "_Progress":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def echo_json(obj) -> None:
    """Strict JSON on stdout (null for NaN/inf), unstyled and unwrapped."""
    from prefixbench.io.export import dumps

    typer.echo(dumps(obj))


def check_policy(policy: str) -> str:
    """A hand-off policy name typed by the user, or a one-line error with a suggestion."""
    from prefixbench.scenario.models import POLICIES
    from prefixbench.support.suggest import did_you_mean

    if policy not in POLICIES:
        raise PrefixbenchError(
            f"unknown policy '{policy}'", where="--policy", fix=did_you_mean(policy, POLICIES)
        )
    return policy


PolicyList = Annotated[
    list[str] | None,
    typer.Option(
        "--policy",
        "-p",
        "--policies",
        help="Policies (comma-separated or repeated; default: all). One of: "
        + ", ".join(p.value for p in PolicyName)
        + ".",
    ),
]


def policy_list(values: list[str] | None, default: list[str] | None = None) -> list[str]:
    """The policies given as ``-p a -p b`` or ``-p a,b`` (``all``: every one), checked, in
    the order given, each once; none given: ``default`` (every policy)."""
    from prefixbench.scenario.models import POLICIES

    names = _csv(values) or []
    if not names or "all" in names:
        return list(default or POLICIES) if not names else list(POLICIES)
    seen: list[str] = []
    for name in names:
        if check_policy(name) not in seen:
            seen.append(name)
    return seen


def main() -> None:
    """The console script. At exit CPython's last collections walk every object the run
    loaded (numba's, polars', pydantic's, the engine's machine code): 0.3-0.45 CPU-s of a
    2 CPU-s `run` (docs/performance.md "Against BLIS"). Freezing them first skips those
    walks; atexit handlers, stream flushing and module teardown still run as before."""
    import gc

    try:
        app()
    finally:
        gc.freeze()
