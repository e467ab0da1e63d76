"""Second robustness pass: inputs that used to crash, hang, or run with wrong
numbers. Each case failed before its fix: a traceback, a hang on a FIFO or /dev/zero,
gigabytes allocated, or a silently changed value."""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

import pytest
from robustness_util import assert_clear, assert_one_stderr_line
from typer.testing import CliRunner

from prefixbench.cli import app
from prefixbench.errors import PrefixbenchError
from prefixbench.scenario.loader import load_scenario

pytestmark = pytest.mark.filterwarnings("error")
runner = CliRunner(env={"COLUMNS": "120", "NO_COLOR": "1", "TERM": "dumb"})
HUGE_INT = "9" * 5000  # beyond Python's int-str conversion limit (4300 digits)


def _refused(overrides: list[str], *expect: str, ref: str | None = None) -> str:
    with pytest.raises(PrefixbenchError) as e:
        load_scenario(ref, overrides)
    line = assert_clear(e.value)
    for text in expect:
        assert text in line, line
    return line


# ------------------------------------------------------------------ values Python cannot convert


def test_huge_integer_in_set_is_one_line():
    _refused([f"seed={HUGE_INT}"], "--set", "too large", "5000 digits")


def test_huge_integer_in_yaml_is_one_line(tmp_path: Path):
    p = tmp_path / "big.yaml"
    p.write_text(f"seed: {HUGE_INT}\n")
    _refused([], "too large", str(p), ref=str(p))


def test_huge_integer_in_config_json_is_one_line(tmp_path: Path):
    p = tmp_path / "config.json"
    p.write_text(f'{{"num_hidden_layers": {HUGE_INT}}}')
    _refused([f"model={p}"], "too large")


def test_weights_whose_sum_overflows_are_refused():
    _refused(
        ["workload.suffix_length={kind: empirical, values: [1, 2], weights: [1.0e308, 1.0e308]}"],
        "weights must be at most",
    )


# ------------------------------------------------------------------ numbers that changed silently


@pytest.mark.parametrize(
    "override",
    [
        "workload.arrivals.rate=true",
        "cluster.link.channels=true",
        "seed=false",
        "efficiency.mbu=true",
        "workload.suffix_length={kind: empirical, values: [true, 3]}",
    ],
)
def test_booleans_are_not_numbers(override: str):
    _refused([override], "true/false")


def test_booleans_stay_booleans_where_they_belong(tmp_path: Path):
    s = load_scenario("trace_replay", ["workload.skip_bad=true"])
    assert s.workload.skip_bad is True


@pytest.mark.parametrize(
    "dist",
    [
        "{kind: fixed, value: 0}",
        "{kind: uniform, low: 0, high: 5}",
        "{kind: lognormal, mean: 10, cv: 0.5, min: 0}",
        "{kind: empirical, values: [0, 4]}",
    ],
)
def test_output_length_zero_is_refused_not_made_one(dist: str):
    _refused([f"workload.output_length={dist}"], "output_length", "at least one token")


def test_lognormal_min_above_max_is_refused():
    _refused(
        ["workload.suffix_length={kind: lognormal, mean: 100, cv: 0.5, min: 500, max: 100}"],
        "min (500) must be <= max (100)",
    )


@pytest.mark.parametrize(
    "override, expect",
    [
        ("cluster.link.bandwidth_gbps=1.0e-300", "must be >= 0.001 and <= 10000"),
        ("cluster.link.latency_us=1.0e300", "must be >= 0 and <= 1000000"),
        ("efficiency.prefill_overhead_ms=1.0e300", "must be >= 0 and <= 10000"),
        ("efficiency.decode_overhead_ms=1.0e300", "must be >= 0 and <= 10000"),
        ("efficiency.mfu_prefill=1.0e-300", "must be >= 0.001 and <= 1"),
        ("memory.wait_timeout_s=1.0e300", "must be >= 0 and <= 1000000"),
        ("slo.ttft_ms=1.0e300", "<= 1000000000"),
        ("cluster.decode.devices=100000", "must be >= 1 and <= 1024"),
    ],
)
def test_absurd_physical_knobs_are_refused_with_the_range(override: str, expect: str):
    _refused([override], override.split("=")[0], expect)


@pytest.mark.parametrize(
    "overrides",
    [
        ["cluster.link.channels=100000000"],
        ["cluster.prefill_instances=100000000"],
        ["cluster.decode_instances=1000000000"],
        [
            "cluster.prefill_instances=1024",
            "cluster.decode_instances=1024",
            "cluster.link.topology=private_paths",
            "cluster.link.channels=2",
        ],
    ],
)
def test_huge_instance_or_channel_counts_are_refused_before_allocating(overrides):
    line = _refused(overrides, "cluster")
    assert "1024" in line or "1,048,576" in line, line


# ------------------------------------------------------------------ file types


def _fifo(tmp_path: Path, name: str) -> Path:
    p = tmp_path / name
    os.mkfifo(p)
    return p


def _loop(tmp_path: Path, name: str) -> Path:
    a, b = tmp_path / name, tmp_path / f"other-{name}"
    a.symlink_to(b)
    b.symlink_to(a)
    return a


SPECIAL = {
    "fifo": _fifo,
    "directory": lambda t, n: (t / n).mkdir() or (t / n),
    "symlink-loop": _loop,
    "device": lambda t, n: Path("/dev/zero"),
    "urandom": lambda t, n: Path("/dev/urandom"),
}


@pytest.mark.parametrize("kind", sorted(SPECIAL))
@pytest.mark.parametrize("role", ["scenario", "grid", "trace", "config"])
def test_special_files_fail_fast_with_one_line(tmp_path: Path, kind: str, role: str):
    name = {"scenario": "s.yaml", "grid": "g.yaml", "trace": "t.jsonl", "config": "config.json"}
    p = SPECIAL[kind](tmp_path, name[role])
    args = {
        "scenario": ["run", str(p)],
        "grid": ["sweep", str(p)],
        "trace": ["run", "--trace", str(p), "--trace-format", "mooncake"],
        "config": ["run", "--set", f"model={p}"],
    }[role]
    r = runner.invoke(app, [*args, "--out", str(tmp_path / "out")])
    line = assert_one_stderr_line(r, code=2)
    if role == "config":  # the path is quoted back shortened, as the field's value
        assert "config file" in line and "cannot read" in line, line
    else:
        assert str(p) in line, line


def test_huge_scenario_file_is_refused_without_reading_it(tmp_path: Path):
    p = tmp_path / "huge.yaml"
    with open(p, "wb") as fh:
        fh.truncate(64 * 1024 * 1024)  # sparse: no disk used
    r = runner.invoke(app, ["run", str(p)])
    assert "more than the" in assert_one_stderr_line(r, code=2)


def test_names_longer_than_the_file_system_allows(tmp_path: Path):
    long = "a" * 5000
    for args in (["run", long], ["run", f"{long}.yaml"], ["run", "--trace", f"{long}.jsonl"]):
        assert_one_stderr_line(runner.invoke(app, args), code=2)


def test_gzip_trace_errors_name_the_real_line(tmp_path: Path):
    rec = '{"timestamp": %d, "input_length": 10, "output_length": 5, "hash_ids": [1]}'
    lines = [rec % i for i in range(6)]
    lines[4] = '{"timestamp": 4, "input_length": "x", "output_length": 5, "hash_ids": [1]}'
    p = tmp_path / "t.jsonl"
    p.write_bytes(gzip.compress(("\n".join(lines) + "\n").encode()))
    line = assert_one_stderr_line(runner.invoke(app, ["run", "--trace", str(p)]), code=2)
    assert f"{p}:5:" in line, line


def test_config_json_shaped_value_is_data(tmp_path: Path):
    p = tmp_path / "config.json"
    p.write_text(json.dumps({"a": [[[[1]]]]}))
    _refused([f"model={p}"])


# ------------------------------------------------------------------ memory


def test_a_run_that_cannot_fit_in_memory_is_refused_before_allocating(monkeypatch):
    import prefixbench.support.memcheck as memcheck
    import prefixbench.system.runner as runner_mod

    monkeypatch.setattr(memcheck, "available_bytes", lambda: 4e9)  # a 4 GB machine

    def never(*_a, **_k):
        raise AssertionError("generated requests for a run that cannot fit")

    monkeypatch.setattr(runner_mod, "build_requests", never)
    r = runner.invoke(app, ["run", "--set", "run.requests=10000000"])
    line = assert_one_stderr_line(r, code=2)
    # 10^7 requests x 2.0 KB + 0.25 GB = 20.25 GB, written out by hand
    assert "run.requests" in line and "about 20.2 GB" in line and "4.0 GB is available" in line
    assert "at most 1,875,000" in line, line  # (4e9 - 0.25e9) / 2000


def test_available_memory_is_read_from_the_system():
    from prefixbench.support.memcheck import available_bytes

    have = available_bytes()
    assert have is not None and 1e8 < have < 1e15


@pytest.mark.parametrize("command", ["run", "sweep"])
def test_output_folder_names_too_long_for_the_file_system(tmp_path: Path, command: str):
    out = tmp_path / ("o" * 300)
    args = {
        "run": ["run", "--set", "run.requests=300", "--set", "run.warmup_requests=30"],
        "sweep": ["sweep", "--quick"],
    }[command]
    line = assert_one_stderr_line(runner.invoke(app, [*args, "--out", str(out)]), code=2)
    assert "too long" in line, line
