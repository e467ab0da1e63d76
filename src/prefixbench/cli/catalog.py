"""`prefixbench catalog`: what prefixbench knows."""

from typing import Annotated

import typer

from .app import (
    catalog_app,
    echo_json,
    guarded,
    out,
)

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
    from prefixbench.render.tables import print_rows, unit_names
    from prefixbench.scenario.describe import list_entries

    entries = unit_names(list_entries())
    if as_json:
        echo_json(entries)
        return
    for kind, rows in entries.items():
        print_rows(out, rows, kind)


@catalog_app.command("show")
@guarded
def catalog_show(
    name: Annotated[
        str, typer.Argument(help="A model, accelerator or link name, or a config.json path.")
    ],
    accelerator: Annotated[
        str, typer.Option("--accelerator", "-a", help="Accelerator for a model's ridge point.")
    ] = "h100-sxm",
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Derived figures of one entry: KV bytes/token, parameters, FLOPs/token, ridge point…"""
    from prefixbench.render.tables import kv_table, safe_text, unit_names
    from prefixbench.scenario.describe import show

    info = unit_names(show(name, accelerator))
    if as_json:
        echo_json(info)
        return
    # long links go under the table, unwrapped, so they stay whole and clickable
    links = {k: v for k, v in info.items() if isinstance(v, str) and "://" in v}
    rows = [
        {
            "field": k,
            "value": f"{v:,}"
            if isinstance(v, int) and not isinstance(v, bool)
            else (f"{v:,.4g}" if isinstance(v, float) else str(v)),
        }
        for k, v in info.items()
        if k not in links
    ]
    out.print(kv_table(f"{info['kind']}: {info.get('name', name)}", rows))
    import textwrap

    for k, v in links.items():
        # wrap at spaces only: a URL is never broken, and stays whole on a line of its own
        text = textwrap.wrap(
            f"{k}: {safe_text(v)}",
            width=max(out.width, 40),
            break_long_words=False,
            break_on_hyphens=False,
            subsequent_indent="  ",
        )
        for line in text:
            out.print(line, markup=False, highlight=False, soft_wrap=True)
