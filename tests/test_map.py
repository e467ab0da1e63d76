"""`prefixbench map`: deciding a cell, the text map, the physics at the extremes, the files."""

from __future__ import annotations

import json
import math
import os
import re

import polars as pl
import pytest
from typer.testing import CliRunner

from prefixbench.cli import app
from prefixbench.study.backends import SerialBackend
from prefixbench.study.decision_map import (
    AXES,
    METRICS,
    MapResult,
    MapSpec,
    check_spec,
    decide,
    decide_cell,
    run_map,
    run_metrics,
)
from prefixbench.study.map_render import TIE, UNSTABLE, _frame, text_map

runner = CliRunner(env={"COLUMNS": "80", "NO_COLOR": "1", "TERM": "dumb"})
TTFT = METRICS["ttft"]
A, B = "transfer_per_request", "recompute_on_decode"


def _row(policy, seed, ttft, stable=True, reject=0.0, goodput=1.0):
    return {
        "policy": policy,
        "seed": seed,
        "ttft_mean_ms": ttft,
        "ttft_p99_ms": ttft,
        "goodput_rps": goodput,
        "reject_rate": reject,
        "stable": stable,
        "saturated_stage": None if stable else "link",
    }


# ---------------------------------------------------------------- one cell


def test_clear_winner_margin_and_student_t_interval():
    # B is 9, 10, 11 ms slower than A on the three seeds: margin 10, sd 1,
    # t(0.975, df=2) = 4.303 (tables) -> half-width 4.303 / sqrt(3) = 2.484
    rows = [_row(A, s, 10.0) for s in range(3)] + [
        _row(B, s, 10.0 + d) for s, d in enumerate((9, 10, 11))
    ]
    c = decide_cell(rows, TTFT)
    assert (c["state"], c["winner"], c["runner_up"]) == ("win", A, B)
    assert c["margin"] == pytest.approx(10.0)
    assert c["margin_ci95"] == pytest.approx(4.303 / math.sqrt(3), rel=1e-3)
    assert c["rel_margin"] == pytest.approx(1.0)


def test_seeds_that_disagree_make_a_tie():
    # A wins seed 0 by 2 ms, B wins seed 1 by 2 ms: the margin's interval spans 0
    rows = [_row(A, 0, 10.0), _row(B, 0, 12.0), _row(A, 1, 12.0), _row(B, 1, 10.0)]
    c = decide_cell(rows, TTFT)
    assert c["state"] == "tie"


def test_unstable_policy_is_not_ranked_and_all_unstable_has_no_winner():
    rows = [_row(A, 0, 5.0), _row(A, 1, 5.0, stable=False), _row(B, 0, 50.0), _row(B, 1, 51.0)]
    c = decide_cell(rows, TTFT)
    assert c["winner"] == B and c["unstable_policies"] == A and c["state"] == "win"
    rows = [_row(p, s, 5.0, stable=s == 0) for p in (A, B) for s in (0, 1)]
    c = decide_cell(rows, TTFT)
    assert c["state"] == "unstable" and c["winner"] is None


def test_a_policy_that_rejects_more_cannot_win_on_ttft():
    rows = [_row(A, s, 5.0, reject=0.2) for s in (0, 1)] + [_row(B, s, 50.0 + s) for s in (0, 1)]
    assert decide_cell(rows, TTFT)["winner"] == B


def test_goodput_is_higher_is_better():
    rows = [_row(A, s, 5.0, goodput=3.0 + s) for s in (0, 1)] + [
        _row(B, s, 50.0, goodput=9.0 + s) for s in (0, 1)
    ]
    c = decide_cell(rows, METRICS["goodput"])
    assert c["winner"] == B and c["margin"] == pytest.approx(6.0)


# ---------------------------------------------------------------- the text map


def _fake_result() -> MapResult:
    """A 3 × 3 map of two policies with a tie row and an unstable cell, by hand."""
    spec = check_spec(
        MapSpec("qwen2-1.5b", nx=3, ny=3, policies=["replicate_all_lru", "replicate_hotset"])
    )
    rows = []
    for iy, y in enumerate(spec.ys()):
        for ix, x in enumerate(spec.xs()):
            for s in (0, 1):
                tie = iy == 1
                lru = 10.0 + (s if tie else 0.0)
                hot = 10.0 + ((1 - s) if tie else 5.0 + 0.1 * s)
                stable = not (ix == 0 and iy == 0)
                rows += [
                    {"x": x, "y": y, **_row("replicate_all_lru", s, lru, stable)},
                    {"x": x, "y": y, **_row("replicate_hotset", s, hot, stable)},
                ]
    runs = pl.DataFrame(rows)
    return MapResult(spec, runs, decide(runs, spec))


def test_text_map_fits_80_columns_with_full_policy_names():
    r = _fake_result()
    text = text_map(r, 80)
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= 80
    start = next(i for i, line in enumerate(lines) if line.startswith("legend:"))
    legend = " ".join(lines[start:])
    assert "L replicate_all_lru" in legend and "H replicate_hotset" in legend
    assert f"{TIE} tie" in legend and f"{UNSTABLE} unstable" in legend
    grid = [line.split("|", 1)[1] for line in lines if re.match(r"^\s*[\d.]+ \|", line)]
    assert grid == ["LLL", TIE * 3, f"{UNSTABLE}LL"]  # top row = highest y
    assert "GB/s" in text


def test_png_frame_marks_ties_and_unstable_cells_grey():
    f = _frame(_fake_result())
    assert set(f.filter(pl.col("iy") == 1)["cell"]) == {"tie"}
    assert f.filter((pl.col("ix") == 0) & (pl.col("iy") == 0))["cell"][0] == "unstable"
    # abutting tiles: each cell's right edge is the next one's left edge
    row = f.filter(pl.col("iy") == 2).sort("ix")
    assert row["xmax"][:-1].to_list() == pytest.approx(row["xmin"][1:].to_list())


# ---------------------------------------------------------------- physics at the extremes


@pytest.fixture(scope="module")
def extremes() -> MapResult:
    """Transfer vs recompute on a light load at a 0.05 GB/s and a 200 GB/s link."""
    spec = MapSpec(
        "qwen2-1.5b",
        x="bandwidth",
        y="rate",
        nx=2,
        ny=2,
        x_range=(0.05, 200.0),
        y_range=(1.0, 2.0),
        policies=[A, B],
        seeds=2,
        requests=200,
        warmup=40,
    )
    return run_map(spec, backend=SerialBackend())


def test_slow_link_recompute_wins_fast_link_transfer_wins(extremes):
    # qwen2-1.5b KV: 28 layers x 2 KV heads x 128 dims x (K, V) x 2 bytes = 28,672 B/token
    # (config.json). Moving the mean 1,536-token prefix: 44.0 MB -> 0.88 s at 0.05 GB/s but
    # 0.22 ms at 200 GB/s. Recomputing it on an L4 (121 TFLOPS bf16 dense, datasheet) takes at
    # least 1,536 x 2 x 1.5e9 FLOPs / 121e12 = 38 ms: recompute wins the slow link by ~20x,
    # transfer the fast one by ~170x.
    c = extremes.cells
    slow = c.filter(pl.col("ix") == 0)
    fast = c.filter(pl.col("ix") == 1)
    assert slow["winner"].to_list() == [B, B]
    assert fast["winner"].to_list() == [A, A]
    assert (fast["margin"] > 0).all()  # transfer >= recompute (2 bursty seeds: maybe a tie)
    be = c["breakeven_gbps"][0]
    assert 0.05 < be < 200.0


def test_breakeven_matches_the_crossover_formula():
    from prefixbench.scenario.loader import load_scenario
    from prefixbench.study.crossover import analytic_row
    from prefixbench.study.decision_map import breakeven_gbps

    s = load_scenario("tool_call", ["model=qwen2-1.5b"])
    ref = analytic_row("qwen2-1.5b", "l4", "eth-25g")
    assert breakeven_gbps(s, 2048.0) == pytest.approx(ref["tie_bandwidth_gbytes_per_s"], rel=1e-9)


def test_map_run_metrics_equal_the_summary_row():
    from prefixbench.metrics.summary import requests_frame, summarize
    from prefixbench.scenario.loader import load_scenario
    from prefixbench.system.runner import prepare, simulate_policy

    s = load_scenario(
        "tool_call",
        ["run.requests=300", "run.warmup_requests=60", "memory.budget_factor=0.4"],
    )
    prep = prepare(s)
    for policy in (A, B, "replicate_all_lru"):
        res = simulate_policy(prep, policy)
        full = summarize(prep, policy, requests_frame(prep, policy, res), res)
        lean = run_metrics(prep, res)
        for k in ("ttft_mean_ms", "ttft_p99_ms", "goodput_rps", "reject_rate"):
            assert lean[k] == pytest.approx(full[k], rel=1e-12), (policy, k)
        assert (
            lean["stable"] == full["stable"] and lean["saturated_stage"] == full["saturated_stage"]
        )


# ---------------------------------------------------------------- the command


SMALL = ["--points", "3", "--requests", "200", "--warmup", "40", "--jobs", "1"]


def test_cli_text_map_at_80_columns(tmp_path):
    r = runner.invoke(app, ["map", "qwen2-1.5b", *SMALL, "--out", str(tmp_path)])
    assert r.exit_code == 0, r.output
    lines = r.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80
    for p in (
        "transfer_per_request",
        "recompute_on_decode",
        "replicate_hotset",
        "replicate_all_lru",
    ):
        assert p in r.stdout
    assert "\x1b[" not in r.stderr  # no progress bar off a terminal
    from prefixbench.io.artifacts import read_artifact

    cells = read_artifact(tmp_path / "decision_map.parquet", "decision_map")
    assert cells.height == 9
    read_artifact(tmp_path / "map_runs.parquet", "map_runs")
    png = tmp_path / "decision_map.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    mode = lambda p: os.stat(p).st_mode & 0o777  # noqa: E731
    assert mode(png) == mode(tmp_path / "decision_map.parquet")


def test_cli_json_is_strict(tmp_path):
    r = runner.invoke(app, ["map", "qwen2-1.5b", *SMALL, "--out", str(tmp_path), "--json"])
    assert r.exit_code == 0, r.output

    def no_constants(name):
        raise AssertionError(f"non-strict JSON constant {name}")

    doc = json.loads(r.stdout, parse_constant=no_constants)
    assert len(doc["cells"]) == 9 and doc["x"]["axis"] == "bandwidth"
    states = {c["state"] for c in doc["cells"]}
    assert states <= {"win", "tie", "unstable"}
    for c in doc["cells"]:
        if c["state"] == "unstable":
            assert c["winner"] is None and c["margin"] is None


@pytest.mark.parametrize(
    ("args", "where"),
    [
        (["--x", "bandwith"], "--x"),
        (["--x", "budget", "--y", "budget"], "--x/--y"),
        (["--seeds", "1"], "--seeds"),
        (["--metric", "latency"], "--metric"),
        (["--x-range", "5"], "--x-range"),
        (["--policy", "transfer_per_request"], "--policy"),
    ],
)
def test_bad_options_are_one_line_errors(args, where, tmp_path):
    r = runner.invoke(app, ["map", "qwen2-1.5b", *args, "--out", str(tmp_path)])
    assert r.exit_code != 0
    assert len(r.stderr.strip().splitlines()) == 1 and where in r.stderr
    assert "Traceback" not in r.output


@pytest.mark.parametrize("name", sorted(AXES))
def test_every_axis_is_a_scenario_field(name):
    from prefixbench.scenario.loader import load_scenario

    ax = AXES[name]
    v = ax.values(3)[1]
    s = load_scenario("tool_call", [ax.override(v)])
    obj = s
    for part in ax.field.split("."):
        obj = getattr(obj, part)
    assert obj == pytest.approx(v)


def test_cli_defaults_match_the_library():
    from prefixbench.cli import map as cli_map
    from prefixbench.study import decision_map as dm

    assert (cli_map.DEFAULT_REQUESTS, cli_map.DEFAULT_WARMUP) == (
        dm.DEFAULT_REQUESTS,
        dm.DEFAULT_WARMUP,
    )


def test_text_map_marks_the_breakeven_column():
    # qwen2-1.5b on the tool_call L4 / eth-25g: break-even ~0.80 GB/s (crossover table);
    # on a 0.1, 3.16, 100 GB/s grid, |ln 0.80 - ln 0.1| = 2.08 > |ln 3.16 - ln 0.80| = 1.37,
    # so the caret sits under the second column
    r = _fake_result()
    lines = text_map(r, 80).splitlines()
    grid_line = next(line for line in lines if re.match(r"^\s*[\d.]+ \|", line))
    first_col = grid_line.index("|") + 1
    caret = next(line for line in lines if line.strip().startswith("^ break-even"))
    assert caret.index("^") == first_col + 1
    assert re.search(r"break-even 0\.79\d* GB/s", caret)


def test_map_kinds_are_known_to_a_fresh_reader(tmp_path):
    """A process that never imported the map module can still validate its files: importing
    the study package (as every reader of a study artifact does) declares every kind."""
    import subprocess
    import sys

    r = _fake_result()
    from prefixbench.io.artifacts import write_atomic

    write_atomic(r.cells, tmp_path / "decision_map.parquet", "decision_map")
    code = (
        "import prefixbench.study; from prefixbench.io.artifacts import read_artifact; import sys; "
        "print(read_artifact(sys.argv[1], 'decision_map').height)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "decision_map.parquet")],
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == "9"
