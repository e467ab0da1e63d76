"""`run`, `compare`, `capacity`: one scenario at a time."""

from pathlib import Path
from typing import Annotated

import typer

from .app import (
    Overrides,
    PolicyList,
    TraceFormatOpt,
    TraceOpt,
    _Progress,
    app,
    echo_json,
    err,
    guarded,
    out,
    policy_list,
)
from .launch import EmitOpt, ResultDirOpt, SaveResultOpt, print_run_answer, save_run_results

# ------------------------------------------------------------------ run

RunJobsOpt = Annotated[
    int | None,
    typer.Option(
        "--jobs",
        "-j",
        help="Worker processes simulating the policies side by side (1: in this process; "
        "default: one per core when the run is large enough to gain). --timeline runs in "
        "this process. The output is the same either way.",
    ),
]


def _warn_unstable(rows: list[dict], label: str = "policy") -> None:
    from prefixbench.metrics.stability import warnings

    for line in warnings(rows, label):
        err.print(line, highlight=False, soft_wrap=True)


@app.command()
@guarded
def run(
    scenario: Annotated[
        str | None,
        typer.Argument(
            help="A scenario YAML file or a built-in name (default: enterprise_hotset; trace_replay with --trace)."
        ),
    ] = None,
    policy: PolicyList = None,
    seed: Annotated[
        int | None, typer.Option("--seed", help="Random seed (overrides the scenario's).")
    ] = None,
    overrides: Overrides = None,
    out_dir: Annotated[
        Path, typer.Option("--out", help="Directory for requests/summary Parquet.")
    ] = Path("results/run"),
    as_json: Annotated[
        bool,
        typer.Option(
            "--json",
            help="Print the scenario and each policy's results as JSON, with vllm bench serve metric names.",
        ),
    ] = False,
    percentiles: Annotated[
        str | None,
        typer.Option(
            "--percentiles", help="Percentiles for --json, comma-separated (default 50,90,99)."
        ),
    ] = None,
    requests_out: Annotated[
        Path | None,
        typer.Option(
            "--requests-out",
            help="Also write the per-request table as JSONL (.jsonl) or CSV (.csv).",
        ),
    ] = None,
    trace: TraceOpt = None,
    trace_format: TraceFormatOpt = None,
    skip_bad: Annotated[
        bool, typer.Option("--skip-bad", help="Skip and count malformed trace records.")
    ] = False,
    timeline: Annotated[
        Path | None,
        typer.Option("--timeline", help="Write a Chrome/Perfetto trace (open in ui.perfetto.dev)."),
    ] = None,
    emit: EmitOpt = None,
    save_result: SaveResultOpt = False,
    result_dir: ResultDirOpt = Path("."),
    jobs: RunJobsOpt = None,
) -> None:
    """Simulate one scenario under every policy (or those given) and compare them."""
    from prefixbench.io.export import parse_percentiles, run_result, write_requests
    s, preset_for_trace = _run_scenario(scenario, seed, overrides, trace, trace_format, skip_bad)
    pcts = parse_percentiles(percentiles)
    policies = policy_list(policy)
    rows_needed = requests_out is not None or save_result or as_json
    tables, paths = _simulate(s, policies, out_dir, timeline, rows_needed, jobs)
    if requests_out is not None:
        paths.append(write_requests(tables.requests, requests_out))
    if save_result:
        paths += save_run_results(s, tables, result_dir, pcts)
    rows = tables.summary.to_dicts()
    if emit is not None:  # only the flags: the winner's launch commands
        print_run_answer(s, rows, emit)
        return
    _run_notes(s, tables.prepared, preset_for_trace, rows)
    if as_json:
        result = run_result(
            s.model_dump(mode="json"), tables.requests, rows, pcts, tables.prepared.notes,
            tables.stats,
        )  # fmt: skip
        echo_json(result)
    else:
        _print_run(s, tables.prepared, rows)
    err.print(f"wrote {', '.join(str(p) for p in paths)}", markup=False, highlight=False)


def _simulate(s, policies, out_dir, timeline, rows_needed: bool, jobs: int | None = None):
    """Run every policy with a progress bar, requests.parquet streamed to ``out_dir``; the
    request rows are read back only when an output needs them all."""
    from ..study.backends import check_jobs
    from ..study.runs import stream_run

    if jobs is not None:
        check_jobs(jobs)  # a bad count is one line before any work
    bar = _Progress("simulating", "policies")
    with bar:
        bar.start(len(policies))
        tables, paths = stream_run(
            s, policies, out_dir, track_gaps=True, timeline=timeline, on_policy=bar.point,
            jobs=jobs,
        )  # fmt: skip
    if rows_needed:  # --requests-out, --save-result and --json read every request row
        from prefixbench.io.artifacts import read_artifact

        tables.requests = read_artifact(paths[0], "requests")
    return tables, paths


def _run_scenario(scenario, seed, overrides, trace, trace_format, skip_bad):
    """The scenario `run` simulates, and whether --trace chose the trace_replay preset."""
    from prefixbench.scenario.loader import load_scenario

    sets = list(overrides or [])
    if seed is not None:
        sets.append(f"seed={seed}")
    preset_for_trace = scenario is None and trace is not None
    s = load_scenario(
        "trace_replay" if preset_for_trace else scenario,
        sets,
        trace=trace,
        trace_format=trace_format.value if trace_format else None,
        skip_bad=skip_bad,
    )
    return s, preset_for_trace


def _run_notes(s, prep, preset_for_trace: bool, rows: list[dict]) -> None:
    """What the user should know, on stderr (after the run: an impossible replay's error
    stays the only stderr line)."""
    from prefixbench.render.tables import safe_text

    if preset_for_trace:
        c = s.cluster
        err.print(
            f"note: --trace replays on the trace_replay preset's system: "
            f"{c.prefill_instances}P{c.decode_instances}D {c.prefill.accelerator}/"
            f"{c.decode.accelerator} over {c.link.name}, {s.model}; "
            f"`run SCENARIO --trace …` replays on that scenario's system instead",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )
    for note in prep.notes:
        err.print(f"note: {safe_text(note)}", markup=False, highlight=False, soft_wrap=True)
    _warn_unstable(rows)


def _print_system(lines: list[str]) -> None:
    for line in lines:
        out.print(line, markup=False, highlight=False, soft_wrap=True)


def _print_run(s, prep, rows: list[dict]) -> None:
    from prefixbench.render.tables import run_table
    from prefixbench.study.systemline import prepared_lines

    _print_system(prepared_lines(prep))
    title = f"{s.name}: {len(prep.requests):,} requests (seed {s.seed})"
    out.print(run_table(rows, title))
    print_run_answer(s, rows, None)
    energy = [(r["policy"], r.get("energy_per_token_j")) for r in rows]
    if any(e is not None for _, e in energy):  # --- power (compare has the table)
        out.print(
            "energy per output token (J; all figures in --json and summary.parquet): "
            + ", ".join(f"{p} {e:.3f}" for p, e in energy if e is not None),
            highlight=False,
        )


# ------------------------------------------------------------------ coupled vs disaggregated


@app.command()
@guarded
def compare(
    scenario: Annotated[str | None, typer.Argument(help="Scenario YAML or built-in name.")] = None,
    policy: PolicyList = None,
    overrides: Overrides = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Coupled (colocated) vs disaggregated on the same instances, and where TTFT goes.

    The disaggregated system's default policy is transfer_per_request."""
    from prefixbench.io.export import renamed
    from prefixbench.scenario.loader import load_scenario

    from ..study.compare import compare as run_compare

    s = load_scenario(scenario, list(overrides or []))
    docs = []
    for name in policy_list(policy, ["transfer_per_request"]):
        with _Progress("simulating", "systems") as bar:
            bar.start(3)
            c = run_compare(s, name, on_system=bar.point)
        _warn_unstable(c.rows, "system")
        if as_json:
            docs.append({
                "scenario": s.model_dump(mode="json"), "policy": name,
                "systems": [{**renamed(r), "prefixbench": r} for r in c.rows],
                "ttft_breakdown": c.breakdown, "verdict": c.verdict,
            })  # fmt: skip
        else:
            _print_compare(s, c, name)
    if as_json:
        echo_json(docs[0] if len(docs) == 1 else docs)


def _print_compare(s, c, policy: str) -> None:
    from prefixbench.metrics.stability import LABELS
    from prefixbench.render.tables import kv_table, run_table
    from prefixbench.study.systemline import system_lines

    _print_system(system_lines(s, c.rows[0].get("kv_budget_gb")))
    n = s.cluster.prefill_instances + s.cluster.decode_instances
    title = (
        f"{s.name} ({policy}): {s.cluster.prefill_instances}P{s.cluster.decode_instances}D "
        f"vs {n} colocated instances"
    )
    out.print(run_table(c.rows, title, label="system", energy=True))
    rows = [
        {"stage": p["stage"], "mean ms": f"{p['ms']:.2f}", "share": f"{p['share']:.0%}"}
        for p in c.breakdown
    ]
    out.print(kv_table("disaggregated: where TTFT goes", rows))
    out.print(f"verdict: {c.verdict}", highlight=False)
    stage = c.rows[0].get("bottleneck_stage")
    if stage:
        out.print(
            f"bottleneck (the most loaded stage, as the stability table): "
            f"{LABELS.get(stage, stage)}",
            highlight=False,
        )


@app.command()
@guarded
def capacity(
    scenario: Annotated[str | None, typer.Argument(help="Scenario YAML or built-in name.")] = None,
    policy: PolicyList = None,
    target: Annotated[float, typer.Option("--target", help="SLO attainment to hold (0-1).")] = 0.9,
    overrides: Overrides = None,
    out_dir: Annotated[
        Path | None,
        typer.Option(
            "--out",
            help="Also write the probes to OUT/capacity.parquet (`plot OUT` draws goodput "
            "against offered rate).",
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    per_watt: Annotated[
        bool,
        typer.Option(
            "--per-watt",
            help="Also name the probe with the most goodput per watt (req/s per kW) among "
            "those within the SLOs (docs/model.md §2.11).",
        ),
    ] = False,
) -> None:
    """Highest arrival rate meeting the TTFT and TPOT SLOs for a share of requests.

    Memory is held at the scenario's size; the default policy is transfer_per_request."""
    from prefixbench.scenario.loader import load_scenario

    s = load_scenario(scenario, list(overrides or []))
    docs = []
    for name in policy_list(policy, ["transfer_per_request"]):
        doc = _capacity_one(s, name, target, out_dir, per_watt, as_json)
        if doc is not None:
            docs.append(doc)
    if as_json:
        echo_json(docs[0] if len(docs) == 1 else docs)


def _capacity_one(s, policy, target, out_dir, per_watt, as_json) -> dict | None:
    """Search one policy's capacity; print it (or return its JSON document)."""
    from dataclasses import asdict

    from ..study.capacity import best_per_watt, max_rate

    max_probes = 24

    def on_probe(p) -> None:
        bar.point()
        err.print(
            f"  rate {p.rate:.3g} req/s → attainment {p.attainment:.1%}"
            + ("" if p.stable else f", unstable ({p.saturated_stage} saturates)"),
            highlight=False,
        )

    with _Progress("probing", f"rates (at most {max_probes})") as bar:
        bar.start(max_probes)
        rate, probes = max_rate(s, policy, target, max_probes=max_probes, on_probe=on_probe)
    if out_dir is not None:
        from ..study.capacity_table import write_probes

        path = write_probes(out_dir, s.name, policy, target, rate, probes)
        err.print(f"wrote {path}", markup=False, highlight=False, soft_wrap=True)
    best = best_per_watt(probes, target) if per_watt else None
    if as_json:
        doc = {
            "scenario": s.model_dump(mode="json"),
            "policy": policy,
            "max_rate_rps": rate,
            "target": target,
            "probes": [{**asdict(p), "goodput_per_kw": p.goodput_per_kw} for p in probes],
        }
        if per_watt:
            doc["best_per_watt"] = None if best is None else asdict(best)
        return doc
    _print_capacity(s, policy, target, rate, probes, best if per_watt else False)
    return None


def _print_capacity(s, policy, target, rate, probes, best) -> None:
    from prefixbench.render.tables import kv_table
    from prefixbench.study.systemline import system_lines
    from prefixbench.system.runner import prepare

    prep = prepare(s)
    kv = prep.base.budget_tokens * prep.kv_bpt / 1e9
    _print_system(system_lines(s, kv, "rate searched (below)"))
    order = sorted(probes, key=lambda p: p.rate)
    out.print(
        kv_table(
            "probes (memory held at the scenario's size)",
            [
                {
                    "rate req/s": f"{p.rate:.3g}",
                    "attainment": f"{p.attainment:.1%}",
                    "goodput req/s": f"{p.goodput_rps:.2f}",
                    "TTFT p99 ms": f"{p.ttft_p99_ms:.0f}",
                    "TPOT p99 ms": f"{p.tpot_p99_ms:.1f}",
                    "stable": "yes" if p.stable else "NO",
                }
                for p in order
            ],
        )
    )
    out.print(
        f"{s.name} ({s.cluster.mode}, {policy}): at most {rate:.3g} req/s keep {target:.0%} of requests within "
        f"TTFT ≤ {s.slo.ttft_ms:g} ms and TPOT ≤ {s.slo.tpot_ms:g} ms",
        highlight=False,
    )
    if best is not False:
        _print_per_watt(order, target, best)


def _print_per_watt(order, target, best) -> None:
    from prefixbench.render.tables import kv_table

    def dash(v, fmt):
        return "–" if v is None else format(v, fmt)

    out.print(
        kv_table(
            "goodput per watt (power of all instances, docs/model.md §2.11)",
            [
                {
                    "rate req/s": f"{p.rate:.3g}",
                    "mean W": dash(p.power_w, ".0f"),
                    "J per token": dash(p.energy_per_token_j, ".3f"),
                    "req/s per kW": dash(p.goodput_per_kw, ".3f"),
                    "within SLOs": "yes" if p.meets(target) else "no",
                }
                for p in order
            ],
        )
    )
    out.print(
        "no probe within the SLOs has power figures"
        if best is None
        else f"most goodput per watt: {best.goodput_per_kw:.3f} req/s per kW at "
        f"{best.rate:.3g} req/s ({best.power_w:.0f} W, {best.energy_per_token_j:.3f} J "
        "per output token)",
        highlight=False,
    )
