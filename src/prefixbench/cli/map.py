"""`map`: the winning policy over a grid of two axes, as text, Parquet, PNG or JSON."""

import json
import math
from pathlib import Path
from typing import Annotated

import typer

from ..errors import ScenarioError
from .app import Overrides, _csv, _Progress, app, err, guarded

PROGRESS_AFTER_S = 2.0  # a quick map draws no bar
# study/decision_map.py's defaults (not imported here: --help must not load polars)
DEFAULT_REQUESTS, DEFAULT_WARMUP = 300, 60


def _range(text: str | None, opt: str) -> tuple[float, float] | None:
    if not text:
        return None
    try:
        lo, hi = (float(v) for v in text.split(","))
    except ValueError:
        raise ScenarioError(
            f"cannot read the range '{text}'",
            where=opt,
            fix="give two numbers: LO,HI (e.g. 0.1,100)",
        ) from None
    return lo, hi


def _strict(v):
    """JSON-safe: non-finite floats become null."""
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, dict):
        return {k: _strict(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_strict(x) for x in v]
    return v


_XRange = Annotated[str | None, typer.Option("--x-range", help="X axis LO,HI (default per axis).")]
_YRange = Annotated[str | None, typer.Option("--y-range", help="Y axis LO,HI (default per axis).")]


@app.command("map")
@guarded
def map_cmd(
    model: Annotated[str, typer.Argument(help="Catalog model name (or a config.json path).")],
    workload: Annotated[
        str, typer.Option("--workload", "-w", help="Built-in scenario name or YAML path.")
    ] = "tool_call",
    x: Annotated[
        str, typer.Option("--x", help="X axis: bandwidth, budget, prefix or rate.")
    ] = "bandwidth",
    y: Annotated[
        str, typer.Option("--y", help="Y axis: bandwidth, budget, prefix or rate.")
    ] = "budget",
    points: Annotated[int, typer.Option("--points", help="Grid points per axis.")] = 24,
    x_range: _XRange = None,
    y_range: _YRange = None,
    policies: Annotated[
        list[str] | None, typer.Option("--policy", "-p", help="Policies to compare (default: all).")
    ] = None,
    seeds: Annotated[int, typer.Option("--seeds", help="Seeds per cell (at least 2).")] = 2,
    requests: Annotated[
        int, typer.Option("--requests", help="Requests per cell and seed.")
    ] = DEFAULT_REQUESTS,
    warmup: Annotated[
        int, typer.Option("--warmup", help="Warm-up requests not measured.")
    ] = DEFAULT_WARMUP,
    metric: Annotated[
        str, typer.Option("--metric", help="Decide by: ttft (mean), ttft_p99 or goodput.")
    ] = "ttft",
    accelerator: Annotated[
        str | None, typer.Option("--accelerator", help="Prefill and decode accelerator.")
    ] = None,
    overrides: Overrides = None,
    out_dir: Annotated[Path, typer.Option("--out", help="Directory for Parquet and PNG.")] = Path(
        "results/map"
    ),
    jobs: Annotated[int | None, typer.Option("--jobs", "-j", help="Worker processes.")] = None,
    max_runs: Annotated[
        int | None, typer.Option("--max-runs", help="Allow a grid of more runs than 20,000.")
    ] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the cells as strict JSON.")
    ] = False,
) -> None:
    """Which policy wins where over two axes (default: link bandwidth × KV budget).

    Every policy runs on the same requests per cell; ties and unstable cells are marked."""
    from ..study.decision_map import run_map
    from ..study.map_render import text_map, write_map

    spec = _map_spec(
        model, workload, (x, y), points, (x_range, y_range), policies, seeds,
        (requests, warmup), metric, accelerator, overrides, max_runs,
    )  # fmt: skip
    bar = _Progress("map", "rows", after_s=PROGRESS_AFTER_S)
    try:
        result = run_map(spec, jobs=jobs, on_start=bar.start, on_point=bar.point)
    finally:
        bar.stop()
    paths = write_map(result, out_dir)
    if as_json:
        typer.echo(json.dumps(_strict(_map_doc(spec, result, paths)), allow_nan=False))
        return
    for line in _map_system(spec):
        typer.echo(line)
    typer.echo(text_map(result, 80))
    err.print(f"wrote {', '.join(str(p) for p in paths)}", highlight=False, soft_wrap=True)


def _map_spec(model, workload, axes, points, ranges, policies, seeds, sizes, metric,
              accelerator, overrides, max_runs):  # fmt: skip
    """The grid `map` runs: two axes of ``points`` each, the accelerator as overrides."""
    from ..study.decision_map import MapSpec

    sets = list(overrides or [])
    if accelerator:
        sets += [
            f"cluster.prefill.accelerator={accelerator}",
            f"cluster.decode.accelerator={accelerator}",
        ]
    return MapSpec(
        model=model,
        workload=workload,
        x=axes[0],
        y=axes[1],
        nx=points,
        ny=points,
        x_range=_range(ranges[0], "--x-range"),
        y_range=_range(ranges[1], "--y-range"),
        policies=_csv(policies) or [],
        seeds=seeds,
        requests=sizes[0],
        warmup=sizes[1],
        overrides=sets,
        metric=metric,
        max_runs=max_runs,
    )


def _map_doc(spec, result, paths) -> dict:
    return {
        "model": spec.model,
        "workload": spec.workload,
        "metric": spec.metric,
        "x": {"axis": spec.x, "values": spec.xs()},
        "y": {"axis": spec.y, "values": spec.ys()},
        "policies": spec.policies,
        "seeds": spec.seeds,
        "requests": spec.requests,
        "cells": result.cells.to_dicts(),
        "files": [str(p) for p in paths],
    }


def _map_system(spec) -> list[str]:
    """The map's system line: its scenario, with what an axis varies said per cell."""
    from prefixbench.scenario.loader import load_scenario
    from prefixbench.study.systemline import scenario_parts, wrap
    from prefixbench.system.runner import prepare

    s = load_scenario(
        spec.workload,
        [*spec.overrides, f"model={spec.model}", f"run.requests={spec.requests}",
         f"run.warmup_requests={spec.warmup}"],
    )  # fmt: skip
    axes = (spec.x, spec.y)
    if "budget" in axes:
        kv = "KV per cell (budget axis)"
    else:
        prep = prepare(s)
        kv = prep.base.budget_tokens * prep.kv_bpt / 1e9
    rate = "rate per cell (rate axis)" if "rate" in axes else "scenario"
    parts = scenario_parts(s, kv, rate)
    if "bandwidth" in axes:
        parts[5] = "link bandwidth per cell (bandwidth axis)"
    return wrap(parts)
