"""Sweep grids and results files: repeated grid values, a grid in another order,
``set`` as a string, parts that must prove which point they hold, and results files that
pass the schema check but hold no rows, a row twice, inf/NaN metrics or odd metadata."""

from __future__ import annotations

import shutil
from pathlib import Path

import polars as pl
import pytest
from robustness_util import assert_clear, assert_one_stderr_line
from typer.testing import CliRunner

from prefixbench.cli import app
from prefixbench.errors import ArtifactError, PrefixbenchError
from prefixbench.io.artifacts import SCHEMA_VERSION, artifact_meta, read_artifact, write_atomic
from prefixbench.study.backends import SerialBackend
from prefixbench.study.grid import build_spec
from prefixbench.study.sweep import _part_paths, run_sweep

runner = CliRunner(env={"COLUMNS": "120", "NO_COLOR": "1", "TERM": "dumb"})
TINY = ["run.requests=300", "run.warmup_requests=30"]


@pytest.mark.parametrize(
    "flags, repeated",
    [
        ({"seeds": [0, 0]}, "0"),
        ({"budgets": [0.5, 0.50]}, "0.5"),
        ({"models": ["qwen2-0.5b", "qwen2-0.5b"]}, "qwen2-0.5b"),
        ({"policies": ["recompute_on_decode", "recompute_on_decode"]}, "recompute_on_decode"),
        ({"workloads": ["tool_call", "tool_call"]}, "tool_call"),
    ],
)
def test_repeated_grid_values_are_refused(flags, repeated):
    with pytest.raises(PrefixbenchError) as e:
        build_spec({}, **flags)
    line = assert_clear(e.value)
    assert "more than once" in line and repeated in line, line


def test_repeated_seed_on_the_command_line(tmp_path: Path):
    r = runner.invoke(app, ["sweep", "--seeds", "0,0", "--out", str(tmp_path / "o")])
    assert "more than once" in assert_one_stderr_line(r, code=2)
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("field", ["seeds", "budgets"])
def test_grid_booleans_and_non_finite_budgets_are_refused(field):
    for bad in ([True], [float("inf")], [float("nan")]):
        if field == "seeds" and isinstance(bad[0], float):
            continue
        with pytest.raises(PrefixbenchError):
            build_spec({field: bad})


def test_set_as_a_string_is_one_override():
    spec = build_spec({"set": "run.requests=300"})
    assert spec.set == ["run.requests=300"]


def test_same_grid_in_another_order_is_the_same_grid(tmp_path: Path):
    from prefixbench.study.sweep import check_grid

    a = build_spec(
        {"seeds": [0, 1], "budgets": [0.35, 1.0], "models": ["qwen2-0.5b", "qwen2-1.5b"]}
    )
    b = build_spec(
        {"seeds": [1, 0], "budgets": [1.0, 0.35], "models": ["qwen2-1.5b", "qwen2-0.5b"]}
    )
    check_grid(tmp_path, a, force=False)
    check_grid(tmp_path, b, force=False)  # not "a different grid"
    other = build_spec({"seeds": [0, 2]})
    with pytest.raises(ArtifactError):
        check_grid(tmp_path, other, force=False)


def test_disagg_study_refuses_options_it_would_ignore(tmp_path: Path):
    for extra in (["--models", "qwen2-0.5b"], ["--set", "seed=1"], ["--budgets", "0.5"]):
        r = runner.invoke(app, ["sweep", "--study", "disagg", *extra, "--out", str(tmp_path)])
        line = assert_one_stderr_line(r, code=2)
        assert extra[0] in line, line


# ------------------------------------------------------------------ parts prove their point


@pytest.fixture(scope="module")
def swept(tmp_path_factory) -> tuple[Path, object]:
    out = tmp_path_factory.mktemp("parts")
    spec = build_spec(
        {"models": ["qwen2-0.5b"], "workloads": ["tool_call"], "budgets": [0.5, 1.0],
         "seeds": [0], "policies": ["transfer_per_request", "recompute_on_decode"], "set": TINY}
    )  # fmt: skip
    run_sweep(spec, out, backend=SerialBackend())
    return out, spec


def test_a_part_copied_over_another_points_part_is_redone(swept, tmp_path: Path):
    src, spec = swept
    out = tmp_path / "o"
    shutil.copytree(src, out)
    a, b = spec.points()
    runs_a, pre_a, _ = _part_paths(out, a)
    runs_b, pre_b, _ = _part_paths(out, b)
    shutil.copy(runs_a, runs_b)  # a valid file, of the wrong point
    shutil.copy(pre_a, pre_b)
    redone = []
    run_sweep(spec, out, backend=SerialBackend(), on_point=redone.append)
    assert redone == [b]
    runs = read_artifact(out / "runs.parquet", "runs")
    assert sorted(set(runs["point_id"].to_list())) == sorted([a.point_id, b.point_id])
    assert runs["run_id"].n_unique() == runs.height == 4
    assert (out / "runs.parquet").read_bytes() == (src / "runs.parquet").read_bytes()


def test_part_files_record_their_point(swept):
    out, spec = swept
    for p in spec.points():
        for path in _part_paths(out, p)[:2]:
            assert artifact_meta(path)["point_id"] == p.point_id


# ------------------------------------------------------------------ hostile results files


def _hostile(src: Path, dst: Path, how: str) -> Path:
    shutil.copytree(src, dst)
    for kind in ("runs", "agg"):
        path = dst / f"{kind}.parquet"
        df = read_artifact(path, kind)
        meta = artifact_meta(path)
        if how == "empty":
            df = df.head(0)
        elif how == "duplicated":
            df = pl.concat([df, df])
        elif how in ("nan", "inf"):
            v = float("nan") if how == "nan" else float("inf")
            df = df.with_columns(pl.lit(v).alias("throughput_rps"))
        elif how == "fraction":
            df = df.with_columns(pl.lit(7.0).alias("reject_rate"))
        elif how == "meta-list":
            meta = None
        write_atomic(df, path, kind, meta)
        if how == "meta-list":
            raw = pl.read_parquet(path)
            raw.write_parquet(path, metadata={"prefixbench.kind": kind,
                                              "prefixbench.schema_version": str(SCHEMA_VERSION),
                                              "prefixbench.meta": "[1, 2]"})  # fmt: skip
        if how == "meta-type":
            raw = pl.read_parquet(path)
            raw.write_parquet(path, metadata={"prefixbench.kind": kind,
                                              "prefixbench.schema_version": str(SCHEMA_VERSION),
                                              "prefixbench.meta": '{"points": "x", "of": 2}'})  # fmt: skip
    return dst


@pytest.mark.parametrize(
    "how", ["empty", "duplicated", "nan", "inf", "fraction", "meta-list", "meta-type"]
)
@pytest.mark.parametrize("command", ["crossover", "report", "recommend"])
def test_hostile_results_give_one_line(swept, tmp_path: Path, how: str, command: str):
    src, _ = swept
    d = _hostile(src, tmp_path / how, how)
    if command == "report":
        runner.invoke(app, ["crossover", str(src), "--models", "qwen2-0.5b"])
        shutil.copy(src / "crossover.parquet", d / "crossover.parquet")
    args = {
        "crossover": ["crossover", str(d)],
        "report": ["report", str(d)],
        "recommend": ["recommend", "-m", "qwen2-0.5b", "-b", "0.5", "-w", "tool_call",
                      "--results", str(d), "--jobs", "1"],
    }[command]  # fmt: skip
    r = runner.invoke(app, args)
    if command == "recommend" and r.exit_code == 0:
        # recommend reads the runs of its own grid (seven policies, its own memory) and runs
        # the grid points it lacks from their parts: these files hold none of its points,
        # so it answers without reading them; never a traceback
        assert "Traceback" not in r.stdout + r.stderr
        assert "tool_call" in r.stdout
        return
    if how.startswith("meta") and command != "report":
        assert r.exit_code == 0 or "metadata" in r.stderr  # these commands do not read it
        return
    line = assert_one_stderr_line(r, code=2)
    assert "parquet" in line, line
