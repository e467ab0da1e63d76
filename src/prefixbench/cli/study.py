"""The study pipeline: `sweep`, `crossover`, `recommend`, `plot`, `report`."""

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
from .launch import EmitOpt, print_policy_answer

# ------------------------------------------------------------------ study pipeline


class SweepBackend(str, Enum):
    local = "local"
    ray = "ray"


_SweepAdmissions = Annotated[
    list[str] | None,
    typer.Option(
        "--admissions",
        "--admission",
        help="Decode KV admission modes, e.g. reserve,paged (default: paged, as vLLM and "
        "SGLang; reserve reproduces the first published grid).",
    ),
]

_SweepStudy = Annotated[
    Study,
    typer.Option(
        "--study",
        help="reference: the prefix study (96 grid points, 672 runs: four workloads, two "
        "models, four budgets, three seeds, seven policies); disagg: 540 coupled-vs-"
        "disaggregated configurations.",
    ),
]

_SweepBackend = Annotated[
    SweepBackend,
    typer.Option(
        "--backend",
        help="Where grid points run: a local process pool, or Ray (needs the ray extra; see docs/scaling.md).",
    ),
]

_SweepAddress = Annotated[
    str | None,
    typer.Option(
        "--address",
        envvar="RAY_ADDRESS",
        help="With --backend ray: an existing cluster (HOST:6379, ray://HOST:10001 or auto); default: a private local Ray instance of --jobs CPUs.",
    ),
]

_SweepLinks = Annotated[
    list[str] | None,
    typer.Option(
        "--links",
        help="Repeat the grid over these links (e.g. eth-10g,eth-25g,roce-200g) and write "
        "decision.parquet, the winner per budget × link (the decision map of `plot`).",
    ),
]

_SweepOutDir = Annotated[
    Path | None,
    typer.Option(
        "--out",
        help="Results folder (default: results/; results-quick/ with --quick; "
        "results-disagg/ with --study disagg).",
    ),
]

_SweepAsJson = Annotated[
    bool,
    typer.Option(
        "--json", help="Print the grid, the files written and the aggregated rows as JSON."
    ),
]


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
        list[str] | None,
        typer.Option("--policies", "--policy", "-p", help="Policies to compare."),
    ] = None,
    seeds: Annotated[list[str] | None, typer.Option("--seeds", help="Seeds, e.g. 0,1,2.")] = None,
    admissions: _SweepAdmissions = None,
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
    out_dir: _SweepOutDir = None,
    as_json: _SweepAsJson = False,
    study: _SweepStudy = None,
    backend: _SweepBackend = SweepBackend.local,
    address: _SweepAddress = None,
    trace: TraceOpt = None,
    trace_format: TraceFormatOpt = None,
    links: _SweepLinks = None,
) -> None:
    """Run a grid (default: the reference study, 672 runs, all seven policies), resumably, on a process pool or Ray."""
    flags = {
        "GRID": grid, "--models": models, "--workloads": workloads, "--budgets": budgets,
        "--policies": policies, "--seeds": seeds, "--set": overrides, "--trace": trace,
        "--admissions": admissions,
    }  # fmt: skip
    if study is not None and study.value == "disagg":
        _refuse_grid_flags(flags)
        _disagg_study(out_dir or Path("results-disagg"), jobs, quick, as_json)
        return
    if out_dir is None:
        # the smoke grid differs from the reference grid: its own folder, so a later full
        # `sweep` (or a `--quick` after one) never meets "a different sweep grid"
        out_dir = Path("results-quick") if quick else Path("results")
    spec = _sweep_spec(flags, quick, trace_format, max_runs)
    paths = _run_grid(spec, out_dir, jobs, events, force, backend, address, _csv(links))
    n = len(spec.points()) * len(spec.policies) * len(_csv(links) or [None])
    if "agg" in paths:
        _warn_unstable_points(paths["agg"])
    if as_json:
        _sweep_json(spec, paths, n, _csv(links))
        return
    points = len(spec.points()) * len(_csv(links) or [None])
    out.print(
        f"{points} grid point{'s' * (points != 1)}, {n} run{'s' * (n != 1)} → "
        + ", ".join(str(p) for p in paths.values()),
        markup=False,
        highlight=False,
        soft_wrap=True,
    )


def _refuse_grid_flags(flags: dict) -> None:
    unused = [name for name, value in flags.items() if value]
    if unused:
        raise PrefixbenchError(
            f"runs its own fixed grid and does not use {', '.join(unused)}",
            where="--study disagg",
            fix="drop those options (only --out, --jobs and --quick apply), or run a grid without --study",
        )


def _sweep_spec(flags: dict, quick: bool, trace_format, max_runs: int | None):
    """The grid: a sweep file's mapping (or the quick grid) with the flags on top."""
    from ..study.grid import build_spec, sweep_base

    grid, trace = flags["GRID"], flags["--trace"]
    base = sweep_base(grid, quick)
    try:
        num_budgets = [float(b) for b in _csv(flags["--budgets"]) or []]
        num_seeds = [int(x) for x in _csv(flags["--seeds"]) or []]
    except ValueError as e:
        raise PrefixbenchError(f"not a number: {e}", where="--budgets/--seeds") from None
    return build_spec(
        base,
        max_runs=max_runs,
        models=_csv(flags["--models"]),
        # a trace replays on the trace_replay system unless other scenarios are named
        workloads=_csv(flags["--workloads"]) or (["trace_replay"] if trace else None),
        budgets=num_budgets,
        policies=_csv(flags["--policies"]),
        seeds=num_seeds,
        admissions=_csv(flags["--admissions"]),
        set=list(base.get("set", [])) + list(flags["--set"] or []),
        trace=trace,
        trace_format=trace_format.value if trace_format else None,
    )


def _run_grid(spec, out_dir, jobs, events, force, backend, address, links) -> dict:
    """Run the grid (over each link with ``links``), with a progress bar; Ctrl-C keeps
    every finished grid point."""
    from ..study.backends import make_backend
    from ..study.sweep import run_sweep

    runner = make_backend(backend.value, jobs=jobs, address=address)
    bar = _Progress("sweep")
    common = {"jobs": jobs, "force": force, "backend": runner}
    try:
        if links:
            from ..study.decision import run_link_sweep

            return run_link_sweep(
                spec, links, out_dir, **common, on_start=bar.start, on_point=bar.point
            )
        return run_sweep(
            spec, out_dir, events=events, **common, on_start=bar.start, on_point=bar.point
        )
    except KeyboardInterrupt:
        bar.stop()
        err.print(
            f"interrupted: every finished grid point is kept in {out_dir}/parts; run the same command again to resume",
            highlight=False,
            soft_wrap=True,  # one line, however long the path
        )
        raise typer.Exit(130) from None
    finally:
        bar.stop()


def _sweep_json(spec, paths: dict, n: int, links: list[str] | None) -> None:
    from prefixbench.io.artifacts import read_artifact
    from prefixbench.io.export import renamed

    doc = {"grid": spec.fingerprint()}
    if links:
        doc["links"] = links
    doc |= {"runs": n, "files": {k: str(v) for k, v in paths.items()}}
    if links:
        doc["decision"] = read_artifact(paths["decision"], "decision").to_dicts()
    else:
        doc["agg"] = [renamed(r) for r in read_artifact(paths["agg"], "agg").to_dicts()]
    echo_json(doc)


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
        str | None,
        typer.Option(
            "--accelerator",
            help="Accelerator the verdict is for (default: the sweep's decode accelerator).",
        ),
    ] = None,
    link: Annotated[
        str | None, typer.Option("--link", help="Link the verdict is for (default: the sweep's).")
    ] = None,
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
    from ..study.crossover import (
        DEFAULT_ACCELERATOR,
        DEFAULT_LINK,
        STREAMING,
        run_crossover,
        swept_hardware,
        verdicts,
    )

    existing_results(results)

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

    swept = swept_hardware(results) or (DEFAULT_ACCELERATOR, DEFAULT_LINK)
    accelerator, link = accelerator or swept[0], link or swept[1]
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
    model: Annotated[
        str, typer.Option("--model", "-m", help="Catalog model, or a config.json path.")
    ] = "qwen2-1.5b",
    budget: Annotated[
        float,
        typer.Option(
            "--budget",
            "-b",
            help="Decode KV budget factor (× the reference demand; state memory in GB with "
            "--set memory.gpu_memory_utilization=0.9 or memory.kv_budget_gb=N).",
        ),
    ] = 0.5,
    workload: Annotated[
        list[str] | None,
        typer.Option("--workload", "-w", help="Workload(s) (default: the four presets)."),
    ] = None,
    objective: Annotated[
        Objective, typer.Option("--objective", help="What to optimise (rule in docs/study.md).")
    ] = Objective.balanced,
    overrides: Overrides = None,
    accelerator: Annotated[
        str | None,
        typer.Option("--accelerator", help="Accelerator of both pools (e.g. h100-sxm)."),
    ] = None,
    devices: Annotated[
        int | None, typer.Option("--devices", help="Devices per instance, both pools.")
    ] = None,
    admission: Annotated[
        str, typer.Option("--admission", help="Decode KV admission: paged or reserve.")
    ] = "paged",
    results: Annotated[
        Path | None,
        typer.Option("--results", help="Use this results folder if it covers the question."),
    ] = None,
    jobs: Annotated[
        int | None, typer.Option("--jobs", "-j", help="Worker processes when runs are needed.")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    emit: EmitOpt = None,
) -> None:
    """Recommend a policy per workload for a model and memory, with its latencies, SLOs and margin."""
    from ..study.recommend import run_recommend

    if budget <= 0:
        raise PrefixbenchError(f"budget must be > 0 (got {budget})", where="--budget")
    if admission not in ("paged", "reserve"):
        raise PrefixbenchError(
            f"unknown admission '{admission}'", where="--admission", fix="use paged or reserve"
        )
    if results is not None:
        existing_results(results)
    sets = hardware_sets(accelerator, devices) + list(overrides or [])
    bar = _Progress("simulating")
    try:
        sel, path = run_recommend(
            model, budget, workloads=_csv(workload), objective=objective.value,
            results=results, jobs=jobs, overrides=sets, admission=admission,
            on_start=bar.start, on_point=bar.point,
        )  # fmt: skip
    finally:
        bar.stop()
    rows = sel.to_dicts()
    for r in rows:
        if r["recommended"] is None:
            err.print(f"warning: {r['workload']}: {r['reason']}", highlight=False, soft_wrap=True)
    if as_json:
        echo_json(rows)
        return
    if emit is not None:
        print_policy_answer(rows, emit)
        return
    _print_recommend(sel, path, sets, admission, f"{objective.value} objective")
    print_policy_answer(rows, None)
    err.print(f"wrote {path}", highlight=False)


def hardware_sets(accelerator: str | None, devices: int | None) -> list[str]:
    """--accelerator / --devices as the --set overrides of both pools."""
    sets = []
    for role in ("prefill", "decode"):
        if accelerator:
            sets.append(f"cluster.{role}.accelerator={accelerator}")
        if devices is not None:
            sets.append(f"cluster.{role}.devices={devices}")
    return sets


def existing_results(folder: Path) -> Path:
    """A results folder given on the command line: refused when it does not exist."""
    if not Path(folder).is_dir():
        raise PrefixbenchError(
            "no such results folder",
            where=str(folder),
            fix="give the folder `prefixbench sweep --out` wrote, or run the sweep first",
        )
    return Path(folder)


def _print_recommend(sel, path: Path, sets, admission: str, title: str) -> None:
    """The system line, the table, and per workload its figures, SLO verdict and reason."""
    from prefixbench.io.artifacts import read_artifact
    from prefixbench.render.tables import recommend_table
    from prefixbench.study.systemline import offered_rate, rate_text, scenario_parts, wrap

    from ..study.recommend import scenarios_of, slo_sentence, tie_sentence

    rows = sel.to_dicts()
    if not rows:
        return
    scen = scenarios_of(sel, sets, admission)
    agg = read_artifact(path.parent / "agg.parquet", "agg").to_dicts()
    gbs = sorted({round(r["kv_budget_gb"] or 0.0, 2) for r in rows})
    kv = f"KV {gbs[0]:.2f} GB" if len(gbs) == 1 else f"KV {gbs[0]:.2f}–{gbs[-1]:.2f} GB"
    first = scen[rows[0]["workload"]]
    rate = rate_text(offered_rate(first)) if len(rows) == 1 else "rate per workload"
    for line in wrap(scenario_parts(first, kv + " per decode instance", rate)):
        out.print(line, markup=False, highlight=False, soft_wrap=True)
    extra = {}
    for r in rows:
        s = scen[r["workload"]]
        mine = [
            a
            for a in agg
            if a["workload"] == r["workload"]
            and a["model"] == r["model"]
            and a["budget_factor"] == r["budget_factor"]
            and a["admission"] == admission
        ]
        extra[r["workload"]] = {
            "rate": rate_text(offered_rate(s)),
            "slo": slo_sentence(r, mine, s),
            "tie": tie_sentence(r),
        }  # fmt: skip
    out.print(recommend_table(rows, title, extra))


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

    existing_results(results)
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
    """Write the study's findings as Markdown and a self-contained report.html.

    Figures inline, sortable tables; every number comes from the Parquet files."""
    from ..study.plots import render_plots
    from ..study.report import write_report

    existing_results(results)
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
