"""Every command: help, exit codes, one-line errors (CliRunner, fixed terminal width)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from prefixbench.cli import app

runner = CliRunner(env={"COLUMNS": "120", "NO_COLOR": "1", "TERM": "dumb"})

SMALL = ["--set", "run.requests=600", "--set", "run.warmup_requests=100"]


def invoke(*args: str):
    return runner.invoke(app, list(args))


def _commands(typer_app, prefix=()):
    import typer.main

    group = typer.main.get_command(typer_app)
    stack = [(prefix, group)]
    while stack:
        path, cmd = stack.pop()
        yield path
        for name, sub in getattr(cmd, "commands", {}).items():
            stack.append((path + (name,), sub))


@pytest.mark.parametrize("path", list(_commands(app)))
def test_every_command_has_help(path):
    r = invoke(*path, "--help")
    assert r.exit_code == 0, r.output
    assert "Usage" in r.output


def test_catalog_show_qwen2_kv_bytes():
    r = invoke("catalog", "show", "qwen2-1.5b", "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["kv_bytes_per_token"] == 28672


def test_catalog_show_table_mentions_kv():
    r = invoke("catalog", "show", "qwen2-1.5b")
    assert r.exit_code == 0
    assert "28,672" in r.stdout


def test_catalog_lists_everything():
    r = invoke("catalog", "--json")
    data = json.loads(r.stdout)
    assert {"models", "accelerators", "links", "workloads"} <= set(data)
    assert "enterprise_hotset" in [w["name"] for w in data["workloads"]]


def test_unknown_model_suggests_closest():
    r = invoke("catalog", "show", "qwen2-15b")
    assert r.exit_code == 2
    assert "did you mean 'qwen2-1.5b'?" in r.stderr
    assert "Traceback" not in r.output + r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_run_json_and_files(tmp_path):
    r = invoke("run", "enterprise_hotset", *SMALL, "--out", str(tmp_path), "--json")
    assert r.exit_code == 0, r.stderr
    rows = json.loads(r.stdout)["results"]
    assert [row["policy"] for row in rows] == [
        "transfer_per_request",
        "recompute_on_decode",
        "replicate_hotset",
        "replicate_all_lru",
        "replicate_tiered",
        "cost_aware",
        "conditional_disagg",
    ]
    assert (tmp_path / "requests.parquet").is_file() and (tmp_path / "summary.parquet").is_file()


def test_run_table_prints_policies(tmp_path):
    r = invoke("run", *SMALL, "--policy", "replicate_all_lru", "--out", str(tmp_path))
    assert r.exit_code == 0, r.stderr
    assert "replicate_all_lru" in r.stdout and "latency (ms)" in r.stdout and "TTFT" in r.stdout


def test_run_bad_override_names_field(tmp_path):
    r = invoke("run", "--set", "workload.arrivals.rate=-3", "--out", str(tmp_path))
    assert r.exit_code == 2
    assert "workload.synthetic.arrivals.rate" in r.stderr or "arrivals.rate" in r.stderr
    assert "-3" in r.stderr and "must be > 0" in r.stderr


def test_run_unknown_scenario_suggests(tmp_path):
    r = invoke("run", "enterprise_hotst", "--out", str(tmp_path))
    assert r.exit_code == 2
    assert "did you mean 'enterprise_hotset'?" in r.stderr


def test_debug_shows_traceback(tmp_path):
    r = invoke("--debug", "run", "nope_nothing", "--out", str(tmp_path))
    assert r.exit_code != 0
    assert r.exception is not None


def test_capacity_unknown_policy_is_one_line():
    r = invoke("capacity", "--policy", "replicate_al_lru")
    assert r.exit_code == 2
    assert "did you mean 'replicate_all_lru'?" in r.stderr and "Traceback" not in r.stderr


def test_timeline_write_errors_are_one_line(tmp_path):
    (tmp_path / "adir").mkdir()
    r = invoke(
        "run",
        *SMALL,
        "--policy",
        "replicate_hotset",
        "--out",
        str(tmp_path / "o"),
        "--timeline",
        str(tmp_path / "adir"),
    )
    assert r.exit_code != 0 and "Traceback" not in r.stderr
    assert "cannot write the timeline" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert list((tmp_path / "adir").iterdir()) == []
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_timeline_has_the_parquet_file_mode(tmp_path):
    r = invoke(
        "run",
        *SMALL,
        "--policy",
        "replicate_hotset",
        "--out",
        str(tmp_path),
        "--timeline",
        str(tmp_path / "t.json"),
    )
    assert r.exit_code == 0, r.stderr
    mode = (tmp_path / "summary.parquet").stat().st_mode & 0o777
    assert (tmp_path / "t.json").stat().st_mode & 0o777 == mode


def test_run_trace_says_which_system_it_uses(tmp_path):
    from pathlib import Path

    trace = Path(__file__).parent / "data" / "conversation_trace_head300.jsonl"
    r = invoke(
        "run",
        "--trace",
        str(trace),
        "--set",
        "run.warmup_requests=30",
        "--policy",
        "replicate_hotset",
        "--out",
        str(tmp_path),
    )
    assert r.exit_code == 0, r.stderr
    assert "trace_replay preset's system" in r.stderr and "h100-sxm" in r.stderr


def test_sweep_quick_writes_its_own_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    r = invoke(
        "sweep",
        "--quick",
        "--seeds",
        "0",
        "--budgets",
        "1.0",
        "--workloads",
        "tool_call",
        "--set",
        "run.requests=400",
        "--set",
        "run.warmup_requests=50",
        "-j",
        "1",
    )
    assert r.exit_code == 0, r.stderr
    assert (tmp_path / "results-quick" / "agg.parquet").is_file()
    assert not (tmp_path / "results").exists()
