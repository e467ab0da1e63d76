"""The console script's exit: it freezes the collector's objects before the interpreter
tears down (CPython's last collections would walk everything a run loaded), keeps the
command's exit code, and every file the command wrote is complete."""

from __future__ import annotations

import gc
import importlib
import json
import subprocess
import sys

import pytest

# the module: the package's ``app`` name is the Typer app
cli_app = importlib.import_module("prefixbench.cli.app")


def test_main_freezes_the_collector_and_keeps_the_exit_code(monkeypatch):
    def command():
        raise SystemExit(3)

    monkeypatch.setattr(cli_app, "app", command)
    gc.unfreeze()
    try:
        with pytest.raises(SystemExit) as e:
            cli_app.main()
        assert e.value.code == 3
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()


def test_a_run_through_the_console_entry_writes_complete_files(tmp_path):
    rows = tmp_path / "requests.jsonl"
    p = subprocess.run(
        [sys.executable, "-m", "prefixbench", "run", "--set", "run.requests=60",
         "--set", "run.warmup_requests=0", "-p", "transfer_per_request", "--json",
         "--out", str(tmp_path / "out"), "--requests-out", str(rows)],
        capture_output=True, text=True,
    )  # fmt: skip
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["results"][0]["completed"] == 60
    assert len(rows.read_text().splitlines()) == 60
    assert (tmp_path / "out" / "summary.parquet").stat().st_size > 0


def test_bad_input_still_exits_non_zero_with_one_line(tmp_path):
    p = subprocess.run(
        [sys.executable, "-m", "prefixbench", "run", str(tmp_path / "missing.yaml")],
        capture_output=True, text=True,
    )  # fmt: skip
    assert p.returncode != 0
    assert "Traceback" not in p.stderr and p.stderr.strip()
