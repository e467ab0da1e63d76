"""The study pipeline: `sweep`, `crossover`, `recommend`, `plot`, `report`."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated

import typer

from ..errors import PrefixbenchError, ScenarioError
from .app import (
    Overrides,
    Study,
    TraceFormatOpt,
    TraceOpt,
    _csv,
    _Progress,
    app,
    echo_json,
    err,
    guarded,
    out,
)

# ------------------------------------------------------------------ study pipeline


class SweepBackend(str, Enum):
    local = "local"
    ray = "ray"


@app.command()
@guarded
def sweep(
    grid: Annotated[
        Path | None,
        typer.Argument(
            help="A sweep YAML file (models, workloads, budgets, policies, seeds, set)."
        ),
    ] = None,
    models: Annotated[
        list[str] | None, typer.Option("--models", help="Models (comma-separated or repeated).")
    ] = None,
    workloads: Annotated[
        list[str] | None, typer.Option("--workloads", help="Workload presets or YAML paths.")
    ] = None,
    budgets: Annotated[
        list[str] | None, typer.Option("--budgets", help="Budget factors, e.g. 0.35,0.5,1.0.")
    ] = None,
    policies: Annotated[
        list[str] | None, typer.Option("--policies", help="Policies to compare.")
    ] = None,
    seeds: Annotated[list[str] | None, typer.Option("--seeds", help="Seeds, e.g. 0,1,2.")] = None,
    admissions: Annotated[
        list[str] | None,
        typer.Option(
            "--admissions",
            help="Decode KV admission modes, e.g. reserve,paged (default: reserve, the seed's).",
        ),
    ] = None,
    overrides: Overrides = None,
    quick: Annotated[bool, typer.Option("--quick", help="A seconds-long smoke grid (CI).")] = False,
    jobs: Annotated[
        int | None, typer.Option("--jobs", "-j", help="Worker processes (default: all cores).")
    ] = None,
    max_runs: Annotated[
        int | None, typer.Option("--max-runs", help="Allow a grid of more runs than 20,000.")
    ] = None,
    events: Annotated[
        bool, typer.Option("--events", help="Also keep per-request tables (events/).")
    ] = False,
    force: Annotated[
        bool, typer.Option("--force", help="Add to a results folder holding another grid.")
    ] = False,
    out_dir: Annotated[
        Path | None,
        typer.Option(
            "--out", help="Results folder (default: results/; results-quick/ with --quick)."
        ),
    ] = None,
    as_json: Annotated[
        bool,
        typer.Option(
            "--json", help="Print the grid, the files written and the aggregated rows as JSON."
        ),
    ] = False,
    study: Annotated[
        Study,
        typer.Option(
            "--study",
            help="reference: the prefix study (576 runs: seed 000's 384 + replicate_tiered "
            "and cost_aware); disagg: seed 001's 540 coupled-vs-disaggregated configurations.",
        ),
    ] = None,
    backend: Annotated[
        SweepBackend,
        typer.Option(
            "--backend",
            help="Where points run: a local process pool, or Ray (needs the ray extra; see docs/scaling.md).",
        ),
    ] = SweepBackend.local,
    address: Annotated[
        str | None,
        typer.Option(
            "--address",
            envvar="RAY_ADDRESS",
            help="With --backend ray: an existing cluster (HOST:6379, ray://HOST:10001 or auto); default: a private local Ray instance of --jobs CPUs.",
        ),
    ] = None,
    trace: TraceOpt = None,
    trace_format: TraceFormatOpt = None,
    links: Annotated[
        list[str] | None,
        typer.Option(
            "--links",
            help="Repeat the grid over these links (e.g. eth-10g,eth-25g,roce-200g) and write "
            "decision.parquet, the winner per budget × link (the decision map of `plot`).",
        ),
    ] = None,
) -> None:
    """Run a grid (default: the reference study, 576 runs, all six policies), resumably, on a process pool or Ray."""
    from ..study.backends import make_backend
    from ..study.grid import build_spec, sweep_base
    from ..study.sweep import run_sweep

    if out_dir is None:
        # the smoke grid differs from the reference grid: its own folder, so a later full
        # `sweep` (or a `--quick` after one) never meets "a different sweep grid"
        out_dir = Path("results-quick") if quick else Path("results")
    if study is not None and study.value == "disagg":
        given = {
            "GRID": grid, "--models": models, "--workloads": workloads, "--budgets": budgets,
            "--policies": policies, "--seeds": seeds, "--set": overrides, "--trace": trace,
            "--admissions": admissions,
        }  # fmt: skip
        unused = [name for name, value in given.items() if value]
        if unused:
            raise PrefixbenchError(
                f"runs its own fixed grid and does not use {', '.join(unused)}",
                where="--study disagg",
                fix="drop those options (only --out, --jobs and --quick apply), or run a grid without --study",
            )
        _disagg_study(out_dir, jobs, quick, as_json)
        return

    base = sweep_base(grid, quick)
    try:
        num_budgets = [float(b) for b in _csv(budgets) or []]
        num_seeds = [int(x) for x in _csv(seeds) or []]
    except ValueError as e:
        raise PrefixbenchError(f"not a number: {e}", where="--budgets/--seeds") from None
    spec = build_spec(
        base,
        max_runs=max_runs,
        models=_csv(models),
        # a trace replays on the trace_replay system unless other scenarios are named
        workloads=_csv(workloads) or (["trace_replay"] if trace else None),
        budgets=num_budgets,
        policies=_csv(policies),
        seeds=num_seeds,
        admissions=_csv(admissions),
        set=list(base.get("set", [])) + list(overrides or []),
        trace=trace,
        trace_format=trace_format.value if trace_format else None,
    )
    runner = make_backend(backend.value, jobs=jobs, address=address)
    bar = _Progress("sweep")
    try:
        if links:
            from ..study.decision import run_link_sweep

            paths = run_link_sweep(
                spec,
                _csv(links),
                out_dir,
                jobs=jobs,
                force=force,
                backend=runner,
                on_start=bar.start,
                on_point=bar.point,
            )
        else:
            paths = run_sweep(
                spec,
                out_dir,
                jobs=jobs,
                events=events,
                force=force,
                backend=runner,
                on_start=bar.start,
                on_point=bar.point,
            )
    except KeyboardInterrupt:
        bar.stop()
        err.print(
            f"interrupted: every finished point is kept in {out_dir}/parts; run the same command again to resume",
            highlight=False,
            soft_wrap=True,  # one line, however long the path
        )
        raise typer.Exit(130) from None
    finally:
        bar.stop()
    n = len(spec.points()) * len(spec.policies) * len(_csv(links) or [None])
    if "agg" in paths:
        _warn_unstable_points(paths["agg"])
    if as_json:
        from prefixbench.io.artifacts import read_artifact
        from prefixbench.io.export import renamed

        if links:
            rows = read_artifact(paths["decision"], "decision").to_dicts()
            echo_json(
                {
                    "grid": spec.fingerprint(),
                    "links": _csv(links),
                    "runs": n,
                    "files": {k: str(v) for k, v in paths.items()},
                    "decision": rows,
                }
            )
            return
        agg = read_artifact(paths["agg"], "agg").to_dicts()
        echo_json(
            {
                "grid": spec.fingerprint(),
                "runs": n,
                "files": {k: str(v) for k, v in paths.items()},
                "agg": [renamed(r) for r in agg],
            }
        )
        return
    out.print(
        f"{n} runs → " + ", ".join(str(p) for p in paths.values()),
        markup=False,
        highlight=False,
        soft_wrap=True,
    )


def _warn_unstable_points(agg_path: Path) -> None:
    from prefixbench.io.artifacts import read_artifact
    from prefixbench.metrics.stability import sweep_warning

    line = sweep_warning(read_artifact(agg_path, "agg"))
    if line:
        err.print(line, highlight=False, soft_wrap=True)


@app.command()
@guarded
def crossover(
    results: Annotated[
        Path, typer.Argument(help="Results folder (reads agg.parquet if present).")
    ] = Path("results"),
    models: Annotated[
        list[str] | None, typer.Option("--models", help="Models (default: those in the results).")
    ] = None,
    accelerators: Annotated[
        list[str] | None, typer.Option("--accelerators", help="Decode accelerators.")
    ] = None,
    links: Annotated[
        list[str] | None, typer.Option("--links", help="Links (default: all).")
    ] = None,
    accelerator: Annotated[
        str, typer.Option("--accelerator", help="Accelerator the verdict is for.")
    ] = "l4",
    link: Annotated[str, typer.Option("--link", help="Link the verdict is for.")] = "eth-25g",
    kv_dtype: Annotated[
        str | None,
        typer.Option("--kv-dtype", help="KV dtype of the analytic figures: bf16, fp16, fp8, int8."),
    ] = None,
    streaming: Annotated[
        str,
        typer.Option(
            "--streaming",
            help="after_prefill, or layerwise: charge both options only past the "
            "suffix's prefill, which a layer-wise stream overlaps.",
        ),
    ] = "after_prefill",
    as_json: Annotated[bool, typer.Option("--json", help="Print the table as JSON.")] = False,
) -> None:
    """Transfer vs recompute: analytic break-even per model × accelerator × link."""
    from ..study.crossover import STREAMING, run_crossover, verdicts

    if streaming not in STREAMING:
        raise ScenarioError(
            f"unknown streaming mode '{streaming}'",
            where="--streaming",
            fix="use " + " or ".join(STREAMING),
        )
    table, path = run_crossover(
        results, _csv(models), _csv(accelerators), _csv(links), kv_dtype, streaming
    )
    if as_json:
        echo_json(table.to_dicts())
        return
    from ..catalog import hardware_label

    for line in verdicts(table, hardware_label(accelerator), hardware_label(link)):
        out.print(f"• {line}", highlight=False)
    err.print(f"wrote {path}", highlight=False)


def _disagg_study(out_dir: Path, jobs: int | None, quick: bool, as_json: bool = False) -> None:
    import polars as pl

    from ..study.disagg import headline, heatmaps, run_study

    bar = _Progress("disagg study")
    try:
        path = run_study(
            out_dir,
            jobs=jobs,
            limit=12 if quick else None,
            requests=600 if quick else 2000,
            on_start=bar.start,
            on_point=bar.point,
        )
    finally:
        bar.stop()
    df = pl.read_parquet(path)
    h = headline(df)
    pngs = heatmaps(df, out_dir / "plots")
    if as_json:
        echo_json({"headline": h, "files": [str(path), *map(str, pngs)]})
        return
    for key, label in (("throughput_gain", "throughput gain"), ("ttft_speedup", "TTFT speedup")):
        v = h[key]
        out.print(
            f"{label} (disaggregated over coupled): mean {v['mean']:.2f}x, median {v['median']:.2f}x, max {v['max']:.2f}x",
            highlight=False,
        )
    out.print(
        f"mean transfer {h['transfer_ms_mean']:.2f} ms = {h['transfer_share_of_e2e_mean']:.2%} of E2E",
        highlight=False,
    )
    err.print(f"wrote {path}, " + ", ".join(str(p) for p in pngs), highlight=False)


class Objective(str, Enum):
    balanced = "balanced"
    latency = "latency"
    memory = "memory"


@app.command()
@guarded
def recommend(
    model: Annotated[str, typer.Option("--model", "-m", help="Catalog model.")] = "qwen2-1.5b",
    budget: Annotated[float, typer.Option("--budget", "-b", help="Decode KV budget factor.")] = 0.5,
    workload: Annotated[
        list[str] | None,
        typer.Option("--workload", "-w", help="Workload(s) (default: the four presets)."),
    ] = None,
    objective: Annotated[
        Objective, typer.Option("--objective", help="What to optimise (rule in docs/study.md).")
    ] = Objective.balanced,
    results: Annotated[
        Path | None,
        typer.Option("--results", help="Use this results folder if it covers the question."),
    ] = None,
    jobs: Annotated[
        int | None, typer.Option("--jobs", "-j", help="Worker processes when runs are needed.")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Recommend a policy per workload for a model and budget, with its margin."""
    from prefixbench.render.tables import recommend_table

    from ..study.recommend import run_recommend

    if budget <= 0:
        raise PrefixbenchError(f"budget must be > 0 (got {budget})", where="--budget")
    bar = _Progress("simulating")
    try:
        sel, path = run_recommend(
            model,
            budget,
            workloads=_csv(workload),
            objective=objective.value,
            results=results,
            jobs=jobs,
            on_start=bar.start,
            on_point=bar.point,
        )
    finally:
        bar.stop()
    rows = sel.to_dicts()
    for r in rows:
        if r["recommended"] is None:
            err.print(f"warning: {r['workload']}: {r['reason']}", highlight=False, soft_wrap=True)
    if as_json:
        echo_json(rows)
        return
    out.print(recommend_table(rows, f"{model} at budget {budget:g} ({objective.value})"))
    err.print(f"wrote {path}", highlight=False)


# ------------------------------------------------------------------ plots and report


@app.command()
@guarded
def plot(
    results: Annotated[
        Path, typer.Argument(help="Results folder (agg, runs and crossover Parquet).")
    ] = Path("results"),
    out_dir: Annotated[Path, typer.Option("--out", help="Folder for the PNGs.")] = Path("plots"),
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the files written as JSON.")
    ] = False,
) -> None:
    """Draw the study's figures (PNG, 150 dpi) from a results folder."""
    from ..study.plots import render_plots

    paths = render_plots(results, out_dir)
    if as_json:
        echo_json({"figures": [str(p) for p in paths]})
        return
    for path in paths:
        out.print(str(path), markup=False, highlight=False, soft_wrap=True)


@app.command()
@guarded
def report(
    results: Annotated[
        Path, typer.Argument(help="Results folder (agg, runs and crossover Parquet).")
    ] = Path("results"),
    out_file: Annotated[
        Path | None, typer.Option("--out", help="Report file (default: RESULTS/report.md).")
    ] = None,
    plots: Annotated[
        Path | None,
        typer.Option(
            "--plots",
            help="Embed the PNGs already in this folder (from `plot`) instead of drawing them "
            "into RESULTS/plots.",
        ),
    ] = None,
    figures: Annotated[
        bool,
        typer.Option("--figures/--no-figures", help="Draw and embed the figures (default: yes)."),
    ] = True,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the files written as JSON.")
    ] = False,
) -> None:
    """Write the study's findings as Markdown and as a self-contained report.html (figures
    inline, sortable tables); every number comes from the Parquet files."""
    from ..study.plots import render_plots
    from ..study.report import write_report

    drawn: list[Path] = []
    if figures and plots is None:
        plots = (Path(out_file).parent if out_file else Path(results)) / "plots"
        drawn = render_plots(results, plots)
    path = write_report(results, out_file, plots if figures else None, html=True)
    html_path = path.with_suffix(".html")
    if as_json:
        echo_json({"report": str(path), "html": str(html_path), "figures": [str(p) for p in drawn]})
        return
    out.print(str(path), markup=False, highlight=False, soft_wrap=True)
    err.print(
        f"wrote {html_path}" + (f" and {len(drawn)} figures in {plots}" if drawn else ""),
        markup=False,
        highlight=False,
        soft_wrap=True,
    )
