"""The sweep: grid, stable ids, resumability, backend-independence, safety of results folders."""

from __future__ import annotations

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from prefixbench.errors import ArtifactError, ScenarioError
from prefixbench.io.artifacts import read_artifact
from prefixbench.study.aggregate import aggregate, t975
from prefixbench.study.grid import SweepSpec, build_spec
from prefixbench.study.sweep import run_sweep

TINY = {
    "models": ["qwen2-0.5b"],
    "workloads": ["medium_chat", "tool_call"],
    "budgets": [0.35, 1.0],
    "seeds": [0, 1],
    "policies": ["transfer_per_request", "replicate_all_lru"],
    "set": ["run.requests=400", "run.warmup_requests=50"],
}


def test_default_grid_is_the_reference_study():
    spec = SweepSpec()
    # the seed's 384 + replicate_tiered, cost_aware and conditional_disagg
    assert len(spec.points()) * len(spec.policies) == 672
    assert len({p.point_id for p in spec.points()}) == 96


def test_run_ids_are_stable_and_distinct():
    a, b = build_spec(TINY).points(), build_spec(TINY).points()
    assert [p.run_id("x") for p in a] == [p.run_id("x") for p in b]
    ids = {p.run_id(pol) for p in a for pol in TINY["policies"]}
    assert len(ids) == len(a) * 2


def test_bad_grid_names_the_problem():
    with pytest.raises(ScenarioError, match="did you mean 'replicate_all_lru'"):
        build_spec({"policies": ["replicate_al_lru"]})
    with pytest.raises(ScenarioError, match="budget"):
        build_spec({"budgets": [0.0]})


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    out = tmp_path_factory.mktemp("sweep")
    paths = run_sweep(build_spec(TINY), out, jobs=1)
    return out, paths


def test_outputs_and_row_counts(swept):
    out, paths = swept
    runs = read_artifact(paths["runs"], "runs")
    agg = read_artifact(paths["agg"], "agg")
    assert runs.height == 2 * 2 * 2 * 2
    assert agg.height == 2 * 2 * 2 and set(agg["n_seeds"]) == {2}
    assert read_artifact(paths["prefixes"], "prefixes").height > 0


def test_rerun_skips_finished_points(swept):
    out, _ = swept
    seen = {}
    run_sweep(
        build_spec(TINY),
        out,
        jobs=1,
        on_start=lambda total, done: seen.update(total=total, done=done),
    )
    assert seen == {"total": 8, "done": 8}


def test_process_pool_gives_identical_rows(swept, tmp_path):
    out, paths = swept
    pooled = run_sweep(build_spec(TINY), tmp_path, jobs=2)
    assert_frame_equal(read_artifact(paths["runs"], "runs"), read_artifact(pooled["runs"], "runs"))


def test_interrupted_sweep_completes_identically(swept, tmp_path):
    out, paths = swept
    spec = build_spec(TINY)
    (tmp_path / "parts").mkdir(parents=True)
    # simulate a kill after some points: copy half of the finished parts
    parts = sorted((out / "parts").iterdir())
    for p in parts[: len(parts) // 2]:
        (tmp_path / "parts" / p.name).write_bytes(p.read_bytes())
    # and a truncated part that must be redone, not read
    victim = parts[-1].name
    (tmp_path / "parts" / victim).write_bytes(parts[-1].read_bytes()[:100])
    seen = {}
    again = run_sweep(spec, tmp_path, jobs=1, on_start=lambda t, d: seen.update(done=d))
    assert seen["done"] < 8
    assert_frame_equal(read_artifact(paths["runs"], "runs"), read_artifact(again["runs"], "runs"))


def test_different_grid_is_refused(swept):
    out, _ = swept
    other = build_spec({**TINY, "seeds": [5]})
    with pytest.raises(ArtifactError, match="different sweep grid"):
        run_sweep(other, out, jobs=1)


def test_confidence_interval_is_student_t():
    runs = pl.DataFrame(
        {
            "model": ["m"] * 3,
            "workload": ["w"] * 3,
            "budget_factor": [1.0] * 3,
            "policy": ["p"] * 3,
            **{
                c: [1.0, 2.0, 3.0]
                for c in __import__("prefixbench.study.aggregate", fromlist=["x"]).AGG_METRICS
            },
        }
    )
    agg = aggregate(runs)
    assert agg["ttft_mean_ms"][0] == pytest.approx(2.0)
    assert agg["ttft_mean_ms_ci95"][0] == pytest.approx(4.303 * 1.0 / 3**0.5, rel=1e-3)
    # Student-t 0.975 quantiles from the standard tables (df 2, 40, 100), not 1.96 past 30
    assert t975(2) == pytest.approx(4.303, abs=5e-4)
    assert t975(40) == pytest.approx(2.021, abs=5e-4)
    assert t975(100) == pytest.approx(1.984, abs=5e-4)


def test_a_points_constant_columns_added_after_grouping_give_the_same_prefix_table():
    """tests/reference_prefixes.prefix_table, the per-prefix table's definition: the point's
    model, workload, … added to the table (not grouped by) give the table grouping the
    request rows carrying them gives."""
    import polars as pl
    from reference_prefixes import prefix_table

    nan = float("nan")
    reqs = pl.DataFrame(
        {
            "policy": ["a", "a", "a", "b", "b", "a"],
            "prefix_id": [0, 0, 1, 0, -1, 1],
            "warmup": [False, False, False, False, False, True],
            "t_admit": [1.0, nan, 2.0, 3.0, 4.0, 5.0],
            "prompt_tokens": [10, 20, 30, 40, 50, 60],
            "replica_hit_tokens": [5, 0, 7, 0, 1, 2],
            "prefill_hit_tokens": [1, 2, 3, 4, 5, 6],
            "recompute_tokens": [0, 3, 0, 2, 0, 1],
            "transfer_bytes": [0.5, 0.25, 1.5, 2.0, 3.0, 4.0],
            "ttft_ms": [10.0, 20.0, 30.0, 40.0, 50.0, 60.0],
            "outcome": ["completed", "rejected", "completed", "completed", "completed", "x"],
            "extra": [1, 2, 3, 4, 5, 6],
        }
    )
    constants = {
        "model": pl.lit("m"),
        "workload": pl.lit("w"),
        "budget_factor": pl.lit(0.5),
        "seed": pl.lit(3).cast(pl.Int64),
        "admission": pl.lit("paged"),
    }
    grouped = prefix_table(reqs.with_columns(**constants))
    added = prefix_table(reqs, constants)
    assert added.columns == grouped.columns and added.columns[:7] == [
        "admission", "model", "workload", "budget_factor", "seed", "policy", "prefix_id",
    ]  # fmt: skip
    assert added.equals(grouped) and added.height == 3
    row = added.row(0, named=True)  # policy a, prefix 0: one admitted of two
    assert (row["requests"], row["admitted"], row["prompt_tokens"]) == (2, 1, 10)
    assert row["transfer_bytes"] == 0.75 and row["ttft_mean_ms"] == 10.0
