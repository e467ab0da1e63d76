"""Every table reads at 80 columns: full policy, model and workload names, no line wider
than the terminal (CliRunner with COLUMNS=80, as a new user's terminal)."""

from __future__ import annotations

import json

import pytest
from studyutil import make_tiny_study
from typer.testing import CliRunner

from prefixbench.cli import app
from prefixbench.scenario.models import POLICIES

runner = CliRunner(env={"COLUMNS": "80", "NO_COLOR": "1", "TERM": "dumb"})
SMALL = ["--set", "run.requests=600", "--set", "run.warmup_requests=100"]


def invoke(*args: str):
    return runner.invoke(app, list(args))


def _fits(text: str, width: int = 80) -> None:
    wide = [line for line in text.splitlines() if len(line) > width]
    assert not wide, f"lines wider than {width}: {wide[:3]}"


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    return make_tiny_study(tmp_path_factory.mktemp("study"))


def test_run_shows_every_policy_name_whole(tmp_path):
    r = invoke("run", *SMALL, "--out", str(tmp_path))
    assert r.exit_code == 0, r.stderr
    _fits(r.stdout)
    for p in POLICIES:
        # a whole name on a row of its own table, never "replicate_ho…"
        assert sum(line.startswith(p + " ") for line in r.stdout.splitlines()) >= 5, p
    assert "…" not in r.stdout
    _no_folded_cells(r.stdout)
    # a row per policy in each of 8 tables (the decode cache tiers' included) plus titles,
    # notes and the energy line (71 for 4 policies with metrics as rows); the winner's
    # launch commands that follow the tables are not table rows
    tables = r.stdout.split("\nlaunch ")[0]
    assert len(tables.splitlines()) < 33 + 8 * len(POLICIES)  # + the system line (3)


def test_recommend_prints_full_policy_names(study):
    args = ["--model", "qwen2-0.5b", "--budget", "0.35", "--results", str(study)]
    args += ["--workload", "enterprise_hotset,tool_call"]
    r = invoke("recommend", *args)
    assert r.exit_code == 0, r.stderr
    _fits(r.stdout)
    assert "…" not in r.stdout
    rows = json.loads(invoke("recommend", *args, "--json").stdout)
    assert rows
    table_rows = [line.split() for line in r.stdout.splitlines()]
    for row in rows:
        # the workload and its recommended policy, whole, on one table row
        assert [row["workload"], row["recommended"]] in [t[:2] for t in table_rows], row


def test_catalog_show_keeps_source_url_whole():
    r = invoke("catalog", "show", "qwen2-1.5b")
    assert r.exit_code == 0
    _fits(r.stdout.replace("https://huggingface.co/Qwen/Qwen2-1.5B/blob/main/config.json", ""))
    assert "https://huggingface.co/Qwen/Qwen2-1.5B/blob/main/config.json" in r.stdout


def test_catalog_list_fits():
    r = invoke("catalog")
    assert r.exit_code == 0
    _fits(r.stdout)
    assert "long_context_support" in r.stdout and "deepseek-v2-lite" in r.stdout


def test_help_never_breaks_a_policy_name_and_shows_no_python_types():
    for cmd in ("run", "compare", "capacity"):
        r = invoke(cmd, "--help")
        assert r.exit_code == 0
        for p in POLICIES:
            assert p in r.stdout, (cmd, p)
        for python_type in ("<bool>", "<str>", "<list[str]>", "<int>", "<path>", "<float>"):
            assert python_type not in r.stdout, (cmd, python_type)


def test_escape_sequences_in_names_do_not_reach_the_terminal(tmp_path):
    name = "x\x1b]0;pwned\x07\x1b[2J"
    r = invoke(
        "run",
        "tool_call",
        *SMALL,
        "--set",
        f"name={name}",
        "--policy",
        "replicate_hotset",
        "--out",
        str(tmp_path),
    )
    assert r.exit_code == 0, r.stderr
    assert "\x1b" not in r.stdout + r.stderr and "\x07" not in r.stdout + r.stderr
    assert "pwned" in r.stdout  # shown, made harmless


def test_cli_policy_choices_match_the_registry():
    from prefixbench.cli.app import PolicyChoice, PolicyName

    assert tuple(p.value for p in PolicyName) == POLICIES
    assert tuple(p.value for p in PolicyChoice) == ("all", *POLICIES)


def _no_folded_cells(text: str) -> None:
    """A cell Rich had to fold leaves a line holding one short fragment far to the right
    ("3", "%", "prefi"): none may appear."""
    folded = [
        line
        for line in text.splitlines()
        if line.startswith(" " * 20) and len(line.split()) == 1 and len(line.strip()) <= 5
    ]
    assert not folded, f"folded cells: {folded[:3]}"


def test_compare_tables_fit_80_columns_without_folding_a_cell():
    """The three systems' names are short enough that no number or header folds (the
    seed-003 preset has the widest figures: 4-digit E2E, 5-char TPOT, percentages)."""
    r = invoke("compare", "seed003", *SMALL)
    assert r.exit_code == 0, r.stderr
    _fits(r.stdout)
    _no_folded_cells(r.stdout)
    assert "colocated priority" in r.stdout and "colocated chunked" in r.stdout
