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
from rich.markup import escape

from .errors import PrefixbenchError, one_line


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
        try:
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
    name: Annotated[
        str, typer.Argument(help="A model, accelerator or link name, or a config.json path.")
    ],
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
    rows = [
        {
            "field": k,
            "value": f"{v:,}"
            if isinstance(v, int) and not isinstance(v, bool)
            else (f"{v:,.4g}" if isinstance(v, float) else str(v)),
        }
        for k, v in info.items()
    ]
    out.print(kv_table(f"{info['kind']}: {info.get('name', name)}", rows))


# ------------------------------------------------------------------ run


@app.command()
@guarded
def run(
    scenario: Annotated[
        str | None,
        typer.Argument(
            help="A scenario YAML file or a built-in name (default: enterprise_hotset; trace_replay with --trace)."
        ),
    ] = None,
    policy: Annotated[
        PolicyChoice, typer.Option("--policy", "-p", help="One policy, or all side by side.")
    ] = PolicyChoice.all,
    seed: Annotated[
        int | None, typer.Option("--seed", help="Random seed (overrides the scenario's).")
    ] = None,
    overrides: Overrides = None,
    out_dir: Annotated[
        Path, typer.Option("--out", help="Directory for requests/summary Parquet.")
    ] = Path("results/run"),
    as_json: Annotated[bool, typer.Option("--json", help="Print the summary as JSON.")] = False,
    trace: Annotated[
        str | None,
        typer.Option(
            "--trace", help="Replay this trace (Mooncake .jsonl or Azure .csv) as the workload."
        ),
    ] = None,
    trace_format: Annotated[
        TraceFormat, typer.Option("--trace-format", help="Trace format.")
    ] = None,
    skip_bad: Annotated[
        bool, typer.Option("--skip-bad", help="Skip and count malformed trace records.")
    ] = False,
    timeline: Annotated[
        Path | None,
        typer.Option("--timeline", help="Write a Chrome/Perfetto trace (open in ui.perfetto.dev)."),
    ] = None,
) -> None:
    """Simulate one scenario under the four policies (or one) and compare them."""
    from .loader import load_scenario
    from .render import run_table
    from .scenario import POLICIES
    from .study.runs import run_scenario, write_run

    sets = list(overrides or [])
    if seed is not None:
        sets.append(f"seed={seed}")
    if scenario is None and trace is not None:
        scenario = "trace_replay"
    s = load_scenario(
        scenario,
        sets,
        trace=trace,
        trace_format=trace_format.value if trace_format else None,
        skip_bad=skip_bad,
    )
    policies = list(POLICIES) if policy == PolicyChoice.all else [policy.value]
    tables = run_scenario(s, policies, timeline=timeline)
    paths = write_run(tables, out_dir)
    rows = tables.summary.to_dicts()
    for note in tables.prepared.notes:
        err.print(f"note: {note}", highlight=False)
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


# ------------------------------------------------------------------ study pipeline


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
    overrides: Overrides = None,
    quick: Annotated[bool, typer.Option("--quick", help="A seconds-long smoke grid (CI).")] = False,
    jobs: Annotated[
        int | None, typer.Option("--jobs", "-j", help="Worker processes (default: all cores).")
    ] = None,
    events: Annotated[
        bool, typer.Option("--events", help="Also keep per-request tables (events/).")
    ] = False,
    force: Annotated[
        bool, typer.Option("--force", help="Add to a results folder holding another grid.")
    ] = False,
    out_dir: Annotated[Path, typer.Option("--out", help="Results folder.")] = Path("results"),
    study: Annotated[
        Study,
        typer.Option(
            "--study",
            help="reference: the 384-run prefix study; disagg: seed 001's 540 coupled-vs-disaggregated configurations.",
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
    trace: Annotated[
        str | None,
        typer.Option(
            "--trace", help="Replay this trace (Mooncake .jsonl / Azure .csv) at every grid point."
        ),
    ] = None,
    trace_format: Annotated[
        TraceFormat, typer.Option("--trace-format", help="Trace format.")
    ] = None,
) -> None:
    """Run a grid (default: the 384-run reference study), resumably, on a process pool or Ray."""
    from .study.backends import make_backend
    from .study.grid import QUICK, build_spec, load_sweep_file
    from .study.sweep import run_sweep

    if study is not None and study.value == "disagg":
        _disagg_study(out_dir, jobs, quick)
        return

    base = load_sweep_file(grid) if grid else (dict(QUICK) if quick else {})
    try:
        num_budgets = [float(b) for b in _csv(budgets) or []]
        num_seeds = [int(x) for x in _csv(seeds) or []]
    except ValueError as e:
        raise PrefixbenchError(f"not a number: {e}", where="--budgets/--seeds") from None
    spec = build_spec(
        base,
        models=_csv(models),
        # a trace replays on the trace_replay system unless other scenarios are named
        workloads=_csv(workloads) or (["trace_replay"] if trace else None),
        budgets=num_budgets,
        policies=_csv(policies),
        seeds=num_seeds,
        set=list(base.get("set", [])) + list(overrides or []),
        trace=trace,
        trace_format=trace_format.value if trace_format else None,
    )
    runner = make_backend(
        backend.value, jobs=jobs, address=address if backend == SweepBackend.ray else None
    )
    bar = _Progress("sweep")
    try:
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
    n = len(spec.points()) * len(spec.policies)
    out.print(f"{n} runs → " + ", ".join(str(p) for p in paths.values()), highlight=False)


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
    as_json: Annotated[bool, typer.Option("--json", help="Print the table as JSON.")] = False,
) -> None:
    """Transfer vs recompute: analytic break-even per model × accelerator × link."""
    from .study.crossover import run_crossover, verdicts

    table, path = run_crossover(results, _csv(models), _csv(accelerators), _csv(links))
    if as_json:
        out.print_json(json.dumps(table.to_dicts()))
        return
    for line in verdicts(table, accelerator, link):
        out.print(f"• {line}", highlight=False)
    err.print(f"wrote {path}", highlight=False)


def _disagg_study(out_dir: Path, jobs: int | None, quick: bool) -> None:
    import polars as pl

    from .study.disagg import headline, heatmaps, run_study

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
    from .render import recommend_table
    from .study.recommend import run_recommend

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
    if as_json:
        out.print_json(json.dumps(rows))
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
) -> None:
    """Draw the study's figures (PNG, 150 dpi) from a results folder."""
    from .study.plots import render_plots

    for path in render_plots(results, out_dir):
        out.print(str(path), highlight=False, soft_wrap=True)


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
        Path | None, typer.Option("--plots", help="Embed the PNGs in this folder (from `plot`).")
    ] = None,
) -> None:
    """Write the study's findings as Markdown; every number comes from the Parquet files."""
    from .study.report import write_report

    out.print(str(write_report(results, out_file, plots)), highlight=False, soft_wrap=True)


# ------------------------------------------------------------------ coupled vs disaggregated


@app.command()
@guarded
def compare(
    scenario: Annotated[str | None, typer.Argument(help="Scenario YAML or built-in name.")] = None,
    policy: Annotated[
        str, typer.Option("--policy", "-p", help="Hand-off policy of the disaggregated system.")
    ] = "transfer_per_request",
    overrides: Overrides = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Coupled (colocated) vs disaggregated on the same instance count, and where time goes."""
    from .loader import load_scenario
    from .render import kv_table, run_table
    from .scenario import POLICIES
    from .study.compare import compare as run_compare
    from .suggest import did_you_mean

    if policy not in POLICIES:
        raise PrefixbenchError(
            f"unknown policy '{policy}'", where="--policy", fix=did_you_mean(policy, POLICIES)
        )
    s = load_scenario(scenario, list(overrides or []))
    c = run_compare(s, policy)
    if as_json:
        out.print_json(
            json.dumps({"systems": c.rows, "ttft_breakdown": c.breakdown, "verdict": c.verdict})
        )
        return
    n = s.cluster.prefill_instances + s.cluster.decode_instances
    out.print(
        run_table(
            c.rows,
            f"{s.name}: {s.cluster.prefill_instances}P{s.cluster.decode_instances}D vs {n} colocated instances",
            label="system",
        )
    )
    rows = [
        {"stage": p["stage"], "mean ms": f"{p['ms']:.2f}", "share": f"{p['share']:.0%}"}
        for p in c.breakdown
    ]
    out.print(kv_table("disaggregated: where TTFT goes", rows))
    out.print(f"verdict: {c.verdict}", highlight=False)


@app.command()
@guarded
def capacity(
    scenario: Annotated[str | None, typer.Argument(help="Scenario YAML or built-in name.")] = None,
    policy: Annotated[
        str, typer.Option("--policy", "-p", help="Policy (disaggregated mode).")
    ] = "transfer_per_request",
    target: Annotated[float, typer.Option("--target", help="SLO attainment to hold (0-1).")] = 0.9,
    overrides: Overrides = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Highest arrival rate meeting the scenario's TTFT and TPOT SLOs for `target` of requests."""
    from dataclasses import asdict

    from .loader import load_scenario
    from .render import kv_table
    from .study.capacity import max_rate

    s = load_scenario(scenario, list(overrides or []))
    rate, probes = max_rate(
        s,
        policy,
        target,
        on_probe=lambda p: err.print(
            f"  rate {p.rate:.3g} req/s → attainment {p.attainment:.1%}", highlight=False
        ),
    )
    if as_json:
        out.print_json(
            json.dumps(
                {"max_rate_rps": rate, "target": target, "probes": [asdict(p) for p in probes]}
            )
        )
        return
    out.print(
        kv_table(
            "probes",
            [
                {
                    "rate req/s": f"{p.rate:.3g}",
                    "attainment": f"{p.attainment:.1%}",
                    "goodput req/s": f"{p.goodput_rps:.2f}",
                    "TTFT p99 ms": f"{p.ttft_p99_ms:.0f}",
                    "TPOT p99 ms": f"{p.tpot_p99_ms:.1f}",
                }
                for p in sorted(probes, key=lambda p: p.rate)
            ],
        )
    )
    out.print(
        f"{s.name} ({s.cluster.mode}, {policy}): at most {rate:.3g} req/s keep {target:.0%} of requests within "
        f"TTFT ≤ {s.slo.ttft_ms:g} ms and TPOT ≤ {s.slo.tpot_ms:g} ms",
        highlight=False,
    )


def main() -> None:
    app()
