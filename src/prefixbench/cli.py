"""The command-line adapter: parse options, call one library function, render.

Heavy imports (numpy, polars, the engine) happen inside commands so `--help` stays fast.
Errors from the library print one line to stderr and exit non-zero; `--debug` shows the
traceback instead.
"""

from __future__ import annotations

import functools
import json
from enum import Enum
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from .errors import PrefixbenchError

app = typer.Typer(
    name="prefixbench",
    help="Simulate disaggregated LLM serving and decide how the decode node should get a shared "
    "prefix's KV: transfer it, recompute it, or keep replicas.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
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


def guarded(fn):
    """Turn library errors into one stderr line and a non-zero exit (traceback with --debug)."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except PrefixbenchError as e:
            if _state["debug"]:
                raise
            err.print(f"[bold red]error:[/] {e.line()}", markup=True, highlight=False, soft_wrap=True)
            raise typer.Exit(e.exit_code) from None
        except KeyboardInterrupt:
            err.print("interrupted", highlight=False)
            raise typer.Exit(130) from None

    return wrapper


def _version(value: bool) -> None:
    if value:
        from . import __version__

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


Overrides = Annotated[
    list[str] | None,
    typer.Option("--set", help="Override a scenario field: path.to.field=value (repeatable)."),
]


# ------------------------------------------------------------------ catalog


@catalog_app.callback(invoke_without_command=True)
@guarded
def catalog_list(
    ctx: typer.Context,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")] = False,
) -> None:
    """List models, accelerators, links and workloads."""
    if ctx.invoked_subcommand is not None:
        return
    from .catalog.describe import list_entries
    from .render import print_rows

    entries = list_entries()
    if as_json:
        out.print_json(json.dumps(entries))
        return
    for kind, rows in entries.items():
        print_rows(out, rows, kind)


@catalog_app.command("show")
@guarded
def catalog_show(
    name: Annotated[str, typer.Argument(help="A model, accelerator or link name, or a config.json path.")],
    accelerator: Annotated[
        str, typer.Option("--accelerator", "-a", help="Accelerator for a model's ridge point.")
    ] = "h100-sxm",
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Derived figures of one entry: KV bytes/token, parameters, FLOPs/token, ridge point…"""
    from .catalog.describe import show
    from .render import kv_table

    info = show(name, accelerator)
    if as_json:
        out.print_json(json.dumps(info))
        return
    rows = [{"field": k, "value": f"{v:,}" if isinstance(v, int) and not isinstance(v, bool) else
             (f"{v:,.4g}" if isinstance(v, float) else str(v))} for k, v in info.items()]
    out.print(kv_table(f"{info['kind']}: {info.get('name', name)}", rows))


# ------------------------------------------------------------------ run


@app.command()
@guarded
def run(
    scenario: Annotated[
        str | None, typer.Argument(help="A scenario YAML file or a built-in name (default: enterprise_hotset).")
    ] = None,
    policy: Annotated[PolicyChoice, typer.Option("--policy", "-p", help="One policy, or all side by side.")] = PolicyChoice.all,
    seed: Annotated[int | None, typer.Option("--seed", help="Random seed (overrides the scenario's).")] = None,
    overrides: Overrides = None,
    out_dir: Annotated[Path, typer.Option("--out", help="Directory for requests/summary Parquet.")] = Path("results/run"),
    as_json: Annotated[bool, typer.Option("--json", help="Print the summary as JSON.")] = False,
) -> None:
    """Simulate one scenario under the four policies (or one) and compare them."""
    from .loader import load_scenario
    from .render import run_table
    from .scenario import POLICIES
    from .study.runs import run_scenario, write_run

    sets = list(overrides or [])
    if seed is not None:
        sets.append(f"seed={seed}")
    s = load_scenario(scenario, sets)
    policies = list(POLICIES) if policy == PolicyChoice.all else [policy.value]
    tables = run_scenario(s, policies)
    paths = write_run(tables, out_dir)
    rows = tables.summary.to_dicts()
    if as_json:
        out.print_json(json.dumps(rows))
        return
    prep = tables.prepared
    title = (
        f"{s.name}: {prep.model.name}, {s.cluster.prefill_instances}P{s.cluster.decode_instances}D "
        f"{s.cluster.prefill.accelerator}/{s.cluster.decode.accelerator} over {s.cluster.link.name}, "
        f"budget {prep.base.budget_tokens * prep.kv_bpt / 1e9:.2f} GB per decode instance, "
        f"{len(prep.requests):,} requests (seed {s.seed})"
    )
    out.print(run_table(rows, title))
    err.print(f"wrote {', '.join(str(p) for p in paths)}", highlight=False)


def main() -> None:
    app()
