"""The CLI on bad input: exit code 2, exactly one stderr line, never a traceback; and
impossible scenarios refused before anything is simulated, with the reason."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from robustness_util import assert_one_stderr_line
from typer.testing import CliRunner

from prefixbench.cli import app
from prefixbench.io.artifacts import write_atomic

# A Python or numpy warning would be one more stderr line in a real terminal (CliRunner does
# not show it): make every warning an error here.
pytestmark = pytest.mark.filterwarnings("error")

runner = CliRunner(env={"COLUMNS": "120", "NO_COLOR": "1", "TERM": "dumb"})
SMALL = ["--set", "run.requests=300", "--set", "run.warmup_requests=30"]


@pytest.fixture
def no_simulation(monkeypatch):
    """Fail the test if anything is simulated (the refusal must come first)."""
    import prefixbench.study.runs as runs

    def refuse(*_a, **_k):
        raise AssertionError("simulated an impossible scenario")

    monkeypatch.setattr(runs, "simulate_policy", refuse)


# ------------------------------------------------------------------ impossible scenarios

IMPOSSIBLE = {
    # prepare(): the scenario is well-formed but cannot run
    "weights-do-not-fit": (
        ["--set", "model=llama-2-70b"],
        "llama-2-70b weights (138.0 GB) do not fit a prefill instance",
    ),
    "weights-do-not-fit-decode": (
        [
            "--set",
            "cluster.prefill={accelerator: h100-sxm, devices: 8}",
            "--set",
            "model=llama-2-70b",
        ],
        "do not fit a decode instance",
    ),
    "request-longer-than-context": (
        [
            "--set",
            "model=qwen2-0.5b",
            "--set",
            "workload.suffix_length={kind: fixed, value: 200000}",
        ],
        "handles at most 131072",
    ),
    "budget-above-free-hbm": (["--set", "memory.kv_budget_gb=500"], "exceeds the"),
    "budget-factor-above-free-hbm": (
        ["--set", "memory.budget_factor=1000"],
        "a decode instance has left after weights",
    ),
    "budget-below-smallest-request": (
        ["--set", "memory.kv_budget_gb=0.000001"],
        "below the smallest request",
    ),
    "arrival-rate-underflow": (
        ["--set", "workload.arrivals.rate=5e-324"],
        "at least 1e-9 requests per second",
    ),
    "gamma-cv-overflow": (
        ["--set", "workload.arrivals={process: gamma, rate: 1, cv: 1e200}"],
        "less than or equal to 100",
    ),
    "unknown-router": (["--set", "cluster.decode_router=random"], "unknown decode router"),
    "warmup-swallows-run": (["--set", "run.warmup_requests=300"], "must be below run.requests"),
    # validation: refused when the scenario is loaded
    "zero-bandwidth": (["--set", "cluster.link.bandwidth_gbps=0"], "cluster.link.bandwidth_gbps"),
    "negative-bandwidth": (
        ["--set", "cluster.link.bandwidth_gbps=-25"],
        "must be >= 0.001 and <= 10000",
    ),
    "infinite-bandwidth": (["--set", "cluster.link.bandwidth_gbps=.inf"], "finite number"),
    "nan-latency": (["--set", "cluster.link.latency_us=.nan"], "finite number"),
    "zero-channels": (["--set", "cluster.link.channels=0"], "cluster.link.channels"),
    "zero-decode-devices": (["--set", "cluster.decode.devices=0"], "cluster.decode.devices"),
    "negative-prefill-devices": (
        ["--set", "cluster.prefill.devices=-2"],
        "cluster.prefill.devices",
    ),
    "zero-decode-instances": (["--set", "cluster.decode_instances=0"], "cluster.decode_instances"),
    "zero-prefill-instances": (
        ["--set", "cluster.prefill_instances=0"],
        "cluster.prefill_instances",
    ),
    "zero-batch": (["--set", "cluster.max_decode_batch=0"], "cluster.max_decode_batch"),
    "zero-rate": (["--set", "workload.arrivals.rate=0"], "arrivals.rate"),
    "zero-budget-factor": (["--set", "memory.budget_factor=0"], "memory.budget_factor"),
    "zero-mfu": (["--set", "efficiency.mbu=0"], "efficiency.mbu"),
    "token-count-overflow": (
        ["--set", "workload.output_length={kind: fixed, value: 99999999999999999999}"],
        "must be <= 1000000000",
    ),
    "seed-overflow": (["--seed", "99999999999999999999"], "does not fit in a 64-bit integer"),
    "absurd-prefix-pool": (["--set", "workload.prefixes.count=1000000000000"], "prefixes.count"),
    "absurd-run-length": (["--set", "run.requests=100000000000"], "run.requests"),
    "unknown-accelerator": (["--set", "cluster.decode.accelerator=h100"], "did you mean"),
    "unknown-link": (["--set", "cluster.link.name=ethernet"], "cluster.link.name"),
}


@pytest.mark.parametrize("case", sorted(IMPOSSIBLE))
def test_impossible_scenario_is_refused_before_simulating(
    no_simulation, tmp_path: Path, case: str
) -> None:
    args, reason = IMPOSSIBLE[case]
    r = runner.invoke(app, ["run", *SMALL, *args, "--out", str(tmp_path)])
    line = assert_one_stderr_line(r, code=2)
    assert reason in line, line
    assert not list(tmp_path.iterdir())  # nothing written


@pytest.mark.parametrize(
    "sets, reason",
    [
        (
            ["workload.start_s=100", "workload.end_s=200"],
            "workload.start_s/end_s: no requests arrive",
        ),
        (["workload.rate=5e-324"], "workload.rate: rate 4.94066e-324 req/s is too low"),
    ],
)
def test_impossible_trace_replay(
    no_simulation, tmp_path: Path, sets: list[str], reason: str
) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_text(
        "".join(
            json.dumps(
                {
                    "timestamp": t * 1000,
                    "input_length": 600,
                    "output_length": 5,
                    "hash_ids": [t, t + 100],
                }
            )
            + "\n"
            for t in range(50)
        )
    )
    args = [a for s in sets for a in ("--set", s)]
    r = runner.invoke(
        app,
        [
            "run",
            "--trace",
            str(trace),
            "--set",
            "run.warmup_requests=0",
            *args,
            "--out",
            str(tmp_path / "o"),
        ],
    )
    line = assert_one_stderr_line(r, code=2)
    assert reason in line


# ------------------------------------------------------------------ a sample of bad inputs


def _files(tmp_path: Path) -> dict[str, Path]:
    f = {}
    f["yaml_syntax"] = tmp_path / "broken.yaml"
    f["yaml_syntax"].write_text("name: x\nworkload: [unclosed\n")
    f["binary"] = tmp_path / "binary.yaml"
    f["binary"].write_bytes(b"\xff\xfe\x00garbage\x80")
    f["list"] = tmp_path / "list.yaml"
    f["list"].write_text("- a\n- b\n")
    f["typo"] = tmp_path / "typo.yaml"
    f["typo"].write_text("workload: {kind: synthetic}\nmemroy: {budget_factor: 1}\n")
    f["bad_trace"] = tmp_path / "bad.jsonl"
    f["bad_trace"].write_text(
        '{"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": [1]}\n'
        '{"timestamp": "x"}\n'
    )
    f["bad_csv"] = tmp_path / "bad.csv"
    f["bad_csv"].write_text("TIMESTAMP,ContextTokens\n2023-11-16 18:15:46,3\n")
    f["sweep_list"] = tmp_path / "grid.yaml"
    f["sweep_list"].write_text("- models\n")
    f["sweep_typo"] = tmp_path / "grid2.yaml"
    f["sweep_typo"].write_text("modles: [qwen2-0.5b]\n")
    results = tmp_path / "results"
    results.mkdir()
    (results / "agg.parquet").write_bytes(b"PAR1 this is not parquet PAR1")
    (results / "runs.parquet").write_bytes(b"")
    f["results"] = results
    f["summary_as_agg"] = tmp_path / "wrongkind"
    f["summary_as_agg"].mkdir()
    import polars as pl

    from prefixbench.io.artifacts import SCHEMAS

    row = {
        c: (1.0 if t == pl.Float64 else 1 if t == pl.Int64 else "x" if t == pl.Utf8 else True)
        for c, t in SCHEMAS["summary"].items()
    }
    write_atomic(pl.DataFrame([row]), f["summary_as_agg"] / "agg.parquet", "summary")
    return f


BAD_INPUTS = {
    "unknown-scenario": lambda f: ["run", "enterprise_hotst"],
    "missing-yaml": lambda f: ["run", "/nonexistent/s.yaml"],
    "yaml-syntax": lambda f: ["run", str(f["yaml_syntax"])],
    "binary-yaml": lambda f: ["run", str(f["binary"])],
    "yaml-list": lambda f: ["run", str(f["list"])],
    "yaml-typo": lambda f: ["run", str(f["typo"])],
    "override-syntax": lambda f: ["run", "--set", "novalue"],
    "override-into-value": lambda f: ["run", "--set", "seed.x=1"],
    "override-markup": lambda f: ["run", "--set", "model=x[/]"],
    "override-markup-2": lambda f: ["run", "--set", "name=[bold red]x", "--set", "seed=-1"],
    "override-linebreak": lambda f: ["run", "--set", "bad\nkey=1"],
    "override-type": lambda f: ["run", "--set", "cluster.decode.devices=two"],
    "override-kind": lambda f: ["run", "--set", "workload.kind=replay"],
    "bad-trace-line": lambda f: ["run", "--trace", str(f["bad_trace"])],
    "bad-trace-header": lambda f: ["run", "--trace", str(f["bad_csv"])],
    "missing-trace": lambda f: ["run", "--trace", "/nonexistent/t.jsonl"],
    "trace-extension": lambda f: ["run", "--trace", str(f["typo"])],
    "bad-policy-option": lambda f: ["run", "--policy", "replicate_everything"],
    "unknown-option": lambda f: ["run", "--sed", "3"],
    "missing-option-value": lambda f: ["run", "--set"],
    "not-an-int": lambda f: ["run", "--seed", "three"],
    "unknown-command": lambda f: ["simulate"],
    "sweep-budget-text": lambda f: ["sweep", "--budgets", "half"],
    "sweep-budget-zero": lambda f: ["sweep", "--budgets", "0"],
    "sweep-policy": lambda f: ["sweep", "--policies", "replicate_al_lru"],
    "sweep-workload": lambda f: [
        "sweep",
        "--workloads",
        "tool_cal",
        "--models",
        "qwen2-0.5b",
        "--seeds",
        "0",
        "--budgets",
        "1",
    ],
    "sweep-model": lambda f: [
        "sweep",
        "--models",
        "qwen3",
        "--workloads",
        "tool_call",
        "--seeds",
        "0",
        "--budgets",
        "1",
    ],
    "sweep-file-list": lambda f: ["sweep", str(f["sweep_list"])],
    "sweep-file-typo": lambda f: ["sweep", str(f["sweep_typo"])],
    "sweep-jobs": lambda f: ["sweep", "--jobs", "many"],
    "plot-corrupt": lambda f: ["plot", str(f["results"]), "--out", str(f["results"] / "plots")],
    "report-corrupt": lambda f: ["report", str(f["results"])],
    "report-missing": lambda f: ["report", "/nonexistent/results"],
    "report-wrong-kind": lambda f: ["report", str(f["summary_as_agg"])],
    "recommend-budget": lambda f: ["recommend", "--budget", "-1"],
    "recommend-model": lambda f: ["recommend", "--model", "gpt-5"],
    "crossover-corrupt": lambda f: ["crossover", str(f["results"])],
    "catalog-unknown": lambda f: ["catalog", "show", "qwen2-15b"],
    "compare-policy": lambda f: ["compare", "--policy", "nope"],
    "capacity-target": lambda f: ["capacity", "--target", "1.5"],
}


@pytest.mark.parametrize("case", sorted(BAD_INPUTS))
def test_bad_input_gives_one_line(tmp_path: Path, case: str) -> None:
    args = BAD_INPUTS[case](_files(tmp_path))
    if args[0] in ("run", "sweep"):
        args = [*args, "--out", str(tmp_path / "out")]
    r = runner.invoke(app, args)
    line = assert_one_stderr_line(r)
    assert r.exit_code == 2, (r.exit_code, line)
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").rglob("*.parquet")), line
