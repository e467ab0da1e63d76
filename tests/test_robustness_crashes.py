"""Inputs that used to end in a traceback or an abort: each now gives one clear line
(docs/reliability.md, "Third pass")."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from robustness_util import assert_clear, assert_one_stderr_line
from test_calibrate import _synthetic_rows, _write_csv
from typer.testing import CliRunner

from prefixbench.cli import app
from prefixbench.physics.calibrate import ProfileError, calibrate

runner = CliRunner(env={"COLUMNS": "80", "NO_COLOR": "1", "TERM": "dumb"})


def _latency(tmp_path: Path, **extra) -> Path:
    p = tmp_path / "lat.json"
    p.write_text(json.dumps({"avg_latency": 1.5, "latencies": [1.5], **extra}))
    return p


@pytest.mark.parametrize(
    "text",
    [
        '{"avg_latency": ' + "9" * 5000 + "}",  # past Python's int-from-string limit
        "[" * 100_000 + "]" * 100_000,  # nested past the recursion limit
        '{"model_id": 5, "avg_latency": 1.0}',
        '{"avg_latency": 1.0, "input_len": "abc", "output_len": 8, "batch_size": 1}',
        '{"avg_latency": 1.0, "input_len": [512], "output_len": 8, "batch_size": 1}',
        '{"avg_latency": 1.0, "input_len": 512, "output_len": 20000000000, "batch_size": 1}',
        '{"avg_latency": 1.0, "input_len": true, "output_len": 8, "batch_size": 1}',
    ],
)
def test_calibrate_json_bad_values_give_one_line(tmp_path, text):
    p = tmp_path / "r.json"
    p.write_text(text)
    with pytest.raises(ProfileError) as e:
        calibrate([str(p)], model="llama-3.1-8b")
    assert_clear(e.value)


@pytest.mark.parametrize("flag", [["--output-len", "20000000000"], ["--devices", "0"],
                                  ["--devices", "-3"]])  # fmt: skip
def test_calibrate_cli_refuses_out_of_range_options(tmp_path, flag):
    p = _latency(tmp_path)
    args = ["calibrate", str(p), "-m", "llama-3.1-8b", "--input-len", "512", "--batch-size", "1"]
    if flag[0] != "--output-len":
        args += ["--output-len", "8"]
    res = runner.invoke(app, [*args, *flag])
    line = assert_one_stderr_line(res)
    assert flag[0].lstrip("-").replace("-", "_") in line or flag[0] in line, line


def test_a_fit_leaving_the_efficiency_bounds_is_one_line(tmp_path):
    """Step times written in µs (x1000): the fitted overheads pass 10⁴ ms."""
    rows = [[*r[:-1], repr(float(r[-1]) * 1e3)] for r in _synthetic_rows()]
    prof = _write_csv(tmp_path / "us.csv", rows)
    with pytest.raises(ProfileError, match=r"outside its range.*milliseconds") as e:
        calibrate([str(prof)], model="llama-3.1-8b")
    assert_clear(e.value)


def test_a_profile_past_the_size_cap_is_refused_unread(tmp_path):
    p = tmp_path / "big.csv"
    with open(p, "wb") as f:
        f.write(b"phase,tokens,batch,context,devices,ms\n")
        f.truncate(65 << 20)  # sparse: 65 MiB without writing them
    with pytest.raises(ProfileError, match="larger than a profile can be") as e:
        calibrate([str(p)], model="llama-3.1-8b")
    assert_clear(e.value)


def test_duplicate_rows_are_one_point(tmp_path):
    """Ten copies of one prefill row are one distinct step: too few to fit, not ten points."""
    row = _synthetic_rows()[0]
    prof = _write_csv(tmp_path / "dup.csv", [row] * 10)
    with pytest.raises(ProfileError, match=r"1 distinct step\(s\) in 10 row"):
        calibrate([str(prof)], model="llama-3.1-8b")


def test_a_utf8_bom_does_not_break_the_header(tmp_path):
    prof = _write_csv(tmp_path / "p.csv", _synthetic_rows())
    prof.write_bytes(b"\xef\xbb\xbf" + prof.read_bytes())
    res = calibrate([str(prof)], model="llama-3.1-8b")
    assert res["efficiency"]["mbu"] == pytest.approx(0.83, rel=1e-9)


def _table():
    import polars as pl

    return pl.DataFrame({"request_id": [0, 1], "ttft_s": [0.1, float("nan")]})


@pytest.mark.parametrize("case", ["read_only", "under_file", "long_name"])
def test_requests_out_failures_are_one_line(tmp_path, case):
    import os

    from prefixbench.io.export import write_requests

    if case == "read_only":
        if os.geteuid() == 0:
            pytest.skip("running as root: permission bits do not stop root")
        d = tmp_path / "ro"
        d.mkdir()
        d.chmod(0o555)
        target = d / "r.jsonl"
    elif case == "under_file":
        (tmp_path / "f").write_text("x")
        target = tmp_path / "f" / "sub" / "r.jsonl"
    else:
        target = tmp_path / ("r" * 300 + ".jsonl")
    with pytest.raises(Exception) as e:
        write_requests(_table(), target)
    assert_clear(e.value)
    assert not [p for p in tmp_path.rglob(".*.tmp")]


def test_a_billion_turns_per_session_are_not_allocated():
    """turns fixed at 10⁹: 17 sessions × 10⁹ turns was a 69.7 GiB allocation; a session's turns
    past the run's requests are never used, so 200 requests generate quickly."""
    from prefixbench.system.runner import prepare

    s = load(
        "multi_turn_chat",
        [
            "run.requests=200",
            "run.warmup_requests=10",
            'workload.turns={"kind":"fixed","value":1000000000}',
        ],
    )
    prep = prepare(s)
    assert len(prep.requests) == 200


def load(name, sets):
    from prefixbench.scenario.loader import load_scenario

    return load_scenario(name, sets)


@pytest.mark.parametrize("field", ["user_message", "output_length", "first_message"])
def test_zero_lengths_in_sessions_are_refused(field):
    from prefixbench.errors import ScenarioError

    with pytest.raises(ScenarioError, match=rf"{field}.*can be 0"):
        load("multi_turn_chat", [f'workload.{field}={{"kind":"uniform","low":0,"high":4}}'])


@pytest.mark.parametrize("opt", [["--tokens", "99999999999999999999999"], ["--batch", "0"],
                                 ["--devices", "5000"]])  # fmt: skip
def test_cost_refuses_huge_values_in_one_line(opt):
    res = runner.invoke(app, ["cost", "qwen2-0.5b", *opt])
    assert_one_stderr_line(res)


def test_the_memory_check_sees_ulimit_v(monkeypatch):
    """RLIMIT_AS of 1 GB: a 10⁷-request run (about 20 GB) is refused even on a big machine."""
    import resource

    from prefixbench.errors import SimulationError
    from prefixbench.support import memcheck

    monkeypatch.setattr(memcheck, "_meminfo_available", lambda: 1e15)
    monkeypatch.setattr(memcheck, "_cgroup_available", lambda: None)
    monkeypatch.setattr(resource, "getrlimit", lambda _r: (1 << 30, resource.RLIM_INFINITY))
    assert memcheck.available_bytes() <= 1 << 30
    with pytest.raises(SimulationError, match="available"):
        memcheck.check_fits(10_000_000)


def test_the_memory_check_sees_timeline_and_workers(monkeypatch):
    from prefixbench.errors import SimulationError
    from prefixbench.support import memcheck

    monkeypatch.setattr(memcheck, "available_bytes", lambda: 4e9)
    monkeypatch.setattr(memcheck, "shared_available_bytes", lambda: 4e9)
    memcheck.check_fits(1_000_000)  # 2.25 GB: fits
    with pytest.raises(SimulationError, match="--timeline"):
        memcheck.check_timeline(1_000_000, 4)  # + 12 GB of records
    with pytest.raises(SimulationError, match=r"--jobs 1 or fewer"):
        memcheck.check_workers(1_000_000, 4)
