"""Commands that read a results folder refuse one that does not exist, and never create it."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from prefixbench.cli import app


@pytest.mark.parametrize(
    "args",
    [
        ["crossover", "{d}"],
        ["plot", "{d}", "--out", "{d}/plots"],
        ["report", "{d}"],
        ["recommend", "--model", "qwen2-0.5b", "--results", "{d}"],
    ],
    ids=["crossover", "plot", "report", "recommend"],
)
def test_a_missing_results_folder_is_refused(tmp_path, args):
    missing = tmp_path / "no-such-results"
    r = CliRunner().invoke(app, [a.format(d=missing) for a in args])
    assert r.exit_code != 0
    assert "no such results folder" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    assert not missing.exists()
