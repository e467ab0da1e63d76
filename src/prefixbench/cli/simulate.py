"""`run`, `compare`, `capacity`: one scenario at a time."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from .app import (
    Overrides,
    PolicyChoice,
    TraceFormatOpt,
    TraceOpt,
    app,
    check_policy,
    err,
    guarded,
    out,
)

# ------------------------------------------------------------------ run


def _warn_unstable(rows: list[dict], label: str = "policy") -> None:
    from ..stability import warnings

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
    trace: TraceOpt = None,
    trace_format: TraceFormatOpt = None,
    skip_bad: Annotated[
        bool, typer.Option("--skip-bad", help="Skip and count malformed trace records.")
    ] = False,
    timeline: Annotated[
        Path | None,
        typer.Option("--timeline", help="Write a Chrome/Perfetto trace (open in ui.perfetto.dev)."),
    ] = None,
) -> None:
    """Simulate one scenario under the four policies (or one) and compare them."""
    from ..loader import load_scenario
    from ..render import run_table
    from ..scenario import POLICIES
    from ..study.runs import run_scenario, write_run

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
    _warn_unstable(rows)
    if as_json:
        out.print_json(json.dumps(rows))
        return
    prep = tables.prepared
    from ..catalog import hardware_label as hw

    c = s.cluster
    title = (
        f"{s.name}: {prep.model.name}, {s.cluster.prefill_instances}P{s.cluster.decode_instances}D "
        f"{hw(c.prefill.accelerator)}/{hw(c.decode.accelerator)} over {hw(c.link.name)}, "
        f"budget {prep.base.budget_tokens * prep.kv_bpt / 1e9:.2f} GB per decode instance, "
        f"{len(prep.requests):,} requests (seed {s.seed})"
    )
    out.print(run_table(rows, title))
    err.print(f"wrote {', '.join(str(p) for p in paths)}", highlight=False)


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
    from ..loader import load_scenario
    from ..render import kv_table, run_table
    from ..study.compare import compare as run_compare

    s = load_scenario(scenario, list(overrides or []))
    c = run_compare(s, check_policy(policy))
    _warn_unstable(c.rows, "system")
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

    from ..loader import load_scenario
    from ..render import kv_table
    from ..study.capacity import max_rate

    check_policy(policy)
    s = load_scenario(scenario, list(overrides or []))
    rate, probes = max_rate(
        s,
        policy,
        target,
        on_probe=lambda p: err.print(
            f"  rate {p.rate:.3g} req/s → attainment {p.attainment:.1%}"
            + ("" if p.stable else f", unstable ({p.saturated_stage} saturates)"),
            highlight=False,
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
                    "stable": "yes" if p.stable else "NO",
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
