"""Every command's `--json` is strict JSON (no NaN/Infinity), uses vllm bench serve metric
names where they apply, and carries what is needed to re-run it."""

from __future__ import annotations

import csv
import json

import pytest
from studyutil import TINY_STUDY, make_tiny_study
from typer.testing import CliRunner

from prefixbench.cli import app

runner = CliRunner(env={"COLUMNS": "80", "NO_COLOR": "1", "TERM": "dumb"})
SMALL = ["--set", "run.requests=600", "--set", "run.warmup_requests=100"]


def _reject(token):
    raise AssertionError(f"non-standard JSON token {token}")


def strict_json(text: str):
    return json.loads(text, parse_constant=_reject)


def invoke_json(*args: str):
    r = runner.invoke(app, [*args, "--json"])
    assert r.exit_code == 0, (args, r.stderr)
    return strict_json(r.stdout)


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    return make_tiny_study(tmp_path_factory.mktemp("study"))


def test_every_command_takes_json():
    from test_cli import _commands

    for path in _commands(app):
        if not path:
            continue
        r = runner.invoke(app, [*path, "--help"])
        assert "--json" in r.stdout, path


def test_every_command_json_parses_strictly(study, tmp_path):
    assert "models" in invoke_json("catalog")
    assert invoke_json("catalog", "show", "qwen2-0.5b")["kv_bytes_per_token"] == 12288
    run = invoke_json("run", "tool_call", *SMALL, "--out", str(tmp_path / "run"))
    assert run["scenario"]["name"] == "tool_call" and len(run["results"]) == 7  # every registered policy
    cmp_ = invoke_json("compare", "tool_call", *SMALL)
    assert {"systems", "ttft_breakdown", "verdict", "scenario"} <= set(cmp_)
    cap = invoke_json("capacity", "tool_call", *SMALL, "--target", "0.5")
    assert cap["probes"] and cap["scenario"]["name"] == "tool_call"
    sw = invoke_json(
        "sweep",
        "--models",
        "qwen2-0.5b",
        "--workloads",
        "tool_call",
        "--budgets",
        "1.0",
        "--seeds",
        "0",
        "--set",
        "run.requests=600",
        "--set",
        "run.warmup_requests=100",
        "--out",
        str(tmp_path / "sw"),
        "-j",
        "1",
    )
    # one seed: the CI columns are missing, which must be null, never NaN
    assert sw["agg"] and sw["agg"][0]["mean_ttft_ms_ci95"] is None
    assert sw["grid"]["models"] == ["qwen2-0.5b"]
    xo = invoke_json("crossover", str(study))
    assert xo
    rec = invoke_json(
        "recommend",
        "--model",
        "qwen2-0.5b",
        "--budget",
        "0.35",
        "--results",
        str(study),
        "--workload",
        ",".join(TINY_STUDY["workloads"]),
    )
    assert {r["workload"] for r in rec} == set(TINY_STUDY["workloads"])
    figs = invoke_json("plot", str(study), "--out", str(tmp_path / "plots"))["figures"]
    assert figs
    rep = invoke_json("report", str(study), "--out", str(tmp_path / "report.md"))
    assert rep["report"].endswith("report.md")


def test_run_json_uses_vllm_bench_serve_names_and_percentiles(tmp_path):
    res = invoke_json(
        "run",
        "tool_call",
        *SMALL,
        "--policy",
        "replicate_hotset",
        "--percentiles",
        "50,90,99.9",
        "--out",
        str(tmp_path),
    )
    r = res["results"][0]
    for key in (
        "mean_ttft_ms",
        "median_ttft_ms",
        "p90_ttft_ms",
        "p99.9_ttft_ms",
        "mean_tpot_ms",
        "p99.9_e2el_ms",
        "request_throughput",
        "output_throughput",
        "total_token_throughput",
        "request_goodput",
        "completed",
        "failed",
        "duration",
    ):
        assert r[key] is not None, key
    assert "p99_ttft_ms" not in r  # only the percentiles asked for
    # ITL: the engine's pooled gaps, with the percentiles asked for (tests/test_itl.py)
    assert r["mean_itl_ms"] == pytest.approx(r["prefixbench"]["itl_mean_ms"])
    assert r["p90_itl_ms"] == pytest.approx(r["prefixbench"]["itl_p90_ms"])
    assert r["median_itl_ms"] <= r["p90_itl_ms"] <= r["p99.9_itl_ms"]
    assert "p99_itl_ms" not in r
    # the vLLM numbers are the summary's numbers under their vLLM names
    assert r["mean_ttft_ms"] == pytest.approx(r["prefixbench"]["ttft_mean_ms"])
    assert r["request_throughput"] == r["prefixbench"]["throughput_rps"]
    # total token throughput: (input + output tokens of completed requests) / duration
    assert r["total_token_throughput"] == pytest.approx(
        (r["total_input_tokens"] + r["total_output_tokens"]) / r["duration"]
    )


def test_result_json_reruns(tmp_path):
    first = invoke_json(
        "run", "tool_call", *SMALL, "--policy", "replicate_hotset", "--out", str(tmp_path / "a")
    )
    import yaml

    (tmp_path / "again.yaml").write_text(yaml.safe_dump(first["scenario"]))
    again = invoke_json(
        "run",
        str(tmp_path / "again.yaml"),
        "--policy",
        "replicate_hotset",
        "--out",
        str(tmp_path / "b"),
    )
    assert again["results"][0]["mean_ttft_ms"] == first["results"][0]["mean_ttft_ms"]


@pytest.mark.parametrize("suffix", [".jsonl", ".csv"])
def test_per_request_export(tmp_path, suffix):
    dest = tmp_path / f"requests{suffix}"
    r = runner.invoke(
        app,
        [
            "run",
            "tool_call",
            *SMALL,
            "--policy",
            "replicate_hotset",
            "--out",
            str(tmp_path),
            "--requests-out",
            str(dest),
        ],
    )
    assert r.exit_code == 0, r.stderr
    if suffix == ".jsonl":
        rows = [strict_json(line) for line in dest.read_text().splitlines()]
    else:
        rows = list(csv.DictReader(dest.open()))
    assert len(rows) == 600 and rows[0]["policy"] == "replicate_hotset"
    assert "ttft_ms" in rows[0]


def test_bad_percentiles_is_one_line(tmp_path):
    r = runner.invoke(app, ["run", *SMALL, "--percentiles", "50,abc", "--out", str(tmp_path)])
    assert r.exit_code != 0 and "--percentiles" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
