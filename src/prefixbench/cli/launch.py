"""`import`: launch and bench command lines in, a scenario YAML out."""

from enum import Enum
from pathlib import Path
from typing import Annotated

import typer

from .app import app, echo_json, err, guarded, out

_Cmd = Annotated[str | None, typer.Option(metavar="COMMAND")]


@app.command("import")
@guarded
def import_(
    prefill: Annotated[
        str | None,
        typer.Option(
            "--prefill",
            help="The prefill server's `vllm serve …` or `python -m sglang.launch_server …` command.",
        ),
    ] = None,
    decode: Annotated[
        str | None, typer.Option("--decode", help="The decode server's command.")
    ] = None,
    serve: Annotated[
        str | None,
        typer.Option(
            "--serve", help="One colocated server's command (instead of --prefill/--decode)."
        ),
    ] = None,
    bench: Annotated[
        str | None, typer.Option("--bench", help="The load: a `vllm bench serve …` command.")
    ] = None,
    hardware: Annotated[
        str | None,
        typer.Option(
            "--hardware", help="Accelerator of every server (catalog name or hardware YAML)."
        ),
    ] = None,
    link: Annotated[
        str | None,
        typer.Option("--link", help="Network between prefill and decode servers (catalog link)."),
    ] = None,
    out_file: Annotated[Path, typer.Option("--out", help="Scenario YAML to write.")] = Path(
        "imported.yaml"
    ),
    name: Annotated[str, typer.Option("--name", help="Scenario name.")] = "imported",
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the scenario and the flag table as JSON.")
    ] = False,
) -> None:
    """Write a scenario from the commands you would launch, and show where each flag went."""
    from prefixbench.render.launch import import_table
    from prefixbench.scenario.launch.importer import import_deployment, write_scenario

    result = import_deployment(prefill=prefill, decode=decode, serve=serve, bench=bench,
                               hardware=hardware, link=link, name=name)  # fmt: skip
    commands = {"prefill": prefill, "decode": decode, "serve": serve, "bench": bench}
    path = write_scenario(result, commands, out_file)
    if as_json:
        echo_json({**result.as_json(), "path": str(path)})
        return
    for line in result.warnings:
        err.print(f"warning: {line}", markup=False, highlight=False, soft_wrap=True)
    out.print(import_table(result.rows, f"flags → {path}"))
    err.print(f"wrote {path}; run it with `prefixbench run {path}`", markup=False,
              highlight=False, soft_wrap=True)  # fmt: skip


class Stack(str, Enum):
    vllm = "vllm"
    sglang = "sglang"


EmitOpt = Annotated[
    Stack | None,
    typer.Option(
        "--emit", help="Print only the launch flags of the winning policy for this stack."
    ),
]


SaveResultOpt = Annotated[
    bool,
    typer.Option(
        "--save-result", help="Write one `vllm bench serve --save-result` JSON per policy."
    ),
]
ResultDirOpt = Annotated[
    Path, typer.Option("--result-dir", help="Folder for the --save-result files.")
]


def _print_lines(lines: list[str]) -> None:
    for line in lines:
        out.print(line, markup=False, highlight=False, soft_wrap=True)


def print_run_answer(s, rows: list[dict], emit: Stack | None) -> None:
    """`run`: the winning policy as launch commands (all stacks, or only ``emit``'s flags);
    when the winner has no flags on a stack, also the best-ranked policy that has."""
    from prefixbench.render.launch import answer_lines, emit_lines
    from prefixbench.study.answer import best_with_flags, run_answers, run_ranking

    ranked = run_ranking(rows)
    if not ranked:
        err.print("no stable policy: no launch flags to recommend", highlight=False)
        return
    budget = next((r.get("kv_budget_gb") for r in rows if r["policy"] == ranked[0]), None)
    stacks = (emit.value,) if emit else ("vllm", "sglang")
    picks = [ranked[0]] + [p for p in {best_with_flags(ranked, st) for st in stacks} - {None}
                           if p != ranked[0]]  # fmt: skip
    for i, policy in enumerate(picks):
        answers = run_answers(s, policy, budget, stacks if i == 0 else [
            st for st in stacks if best_with_flags(ranked, st) == policy])  # fmt: skip
        if emit:
            _print_lines(emit_lines(answers))
            continue
        title = (f"launch {policy} (the balanced rule's pick):" if i == 0 else
                 f"best-ranked policy with launch flags: {policy}")  # fmt: skip
        _print_lines(answer_lines(policy, answers, title))


def print_policy_answer(rows: list[dict], emit: Stack | None) -> None:
    """`recommend`: each workload's recommended policy as its launch flags, and its
    runner-up's where the recommended policy has none on a stack."""
    from prefixbench.render.launch import answer_lines, emit_lines
    from prefixbench.study.answer import best_with_flags, policy_answers

    stacks = (emit.value,) if emit else ("vllm", "sglang")
    for policy in dict.fromkeys(r["recommended"] for r in rows if r["recommended"]):
        where = [r for r in rows if r["recommended"] == policy]
        picks = [(policy, f"{policy} ({', '.join(r['workload'] for r in where)}) as launch flags:")]
        for r in where:
            alt = best_with_flags([policy, r.get("runner_up") or policy], stacks[0])
            if alt and alt != policy:
                picks.append((alt, f"runner-up with launch flags for {r['workload']}: {alt}"))
        for name, title in dict.fromkeys(picks):
            answers = policy_answers(name, stacks)
            _print_lines(emit_lines(answers) if emit else answer_lines(name, answers, title))


def save_run_results(s, tables, result_dir: Path, percentiles) -> list[Path]:
    """`run --save-result`: one `vllm bench serve`-format JSON per policy."""
    from prefixbench import catalog
    from prefixbench.catalog.hub import looks_like_hf_id
    from prefixbench.io.benchresult import write_bench_results

    model_id = s.model if looks_like_hf_id(s.model) else catalog.get_model(s.model).hf_id or s.model
    return write_bench_results(s, model_id, tables, result_dir, percentiles)
