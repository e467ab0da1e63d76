"""`prefixbench plot`: PNGs from a tiny study's Parquet files, atomic writes, clear errors."""

from __future__ import annotations

import shutil
import struct

import pytest
from studyutil import make_tiny_study
from typer.testing import CliRunner

from prefixbench.cli import app
from prefixbench.errors import ArtifactError
from prefixbench.study.plots import render_plots

runner = CliRunner(env={"COLUMNS": "120", "NO_COLOR": "1"})

EXPECTED = [
    "01_mean_ttft_by_policy.png",
    "03_replica_memory_tradeoff.png",
    "04_transfer_recompute_crossover.png",
    "05_recommendation_matrix.png",
    "06_ttft_distribution.png",
]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    return make_tiny_study(tmp_path_factory.mktemp("study"))


@pytest.fixture(scope="module")
def plots(results, tmp_path_factory):
    out = tmp_path_factory.mktemp("plots")
    return out, render_plots(results, out)


def _png_size(path) -> tuple[int, int]:
    head = path.read_bytes()[:24]
    assert head[:8] == PNG_MAGIC, f"{path.name} is not a PNG"
    assert head[12:16] == b"IHDR"
    return struct.unpack(">II", head[16:24])


def test_every_expected_png_is_written(plots):
    out, written = plots
    names = [p.name for p in written]
    assert set(EXPECTED) <= set(names)
    assert all(p.parent == out for p in written)


@pytest.mark.parametrize("name", EXPECTED)
def test_png_is_valid_and_sensibly_sized(plots, name):
    path = plots[0] / name
    width, height = _png_size(path)
    # at 150 dpi every figure is at least ~7 × 4.5 inches
    assert width >= 1000 and height >= 600, (width, height)
    assert path.stat().st_size > 20_000


def test_no_temporary_files_left_behind(plots):
    out, written = plots
    assert sorted(p.name for p in out.iterdir()) == sorted(p.name for p in written)


def test_plot_right_after_sweep_computes_the_crossover(results, tmp_path):
    """Without `prefixbench crossover` first, plot computes the crossover it needs, and
    leaves the results folder as it was (it may be read-only)."""
    for name in ("agg.parquet", "runs.parquet", "sweep.json"):
        shutil.copy(results / name, tmp_path / name)
    before = sorted(p.name for p in tmp_path.iterdir())
    written = render_plots(tmp_path, tmp_path / "plots")
    assert any(p.name.startswith("04_") for p in written)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([*before, "plots"])


def test_missing_runs_names_file_and_command(results, tmp_path):
    shutil.copy(results / "agg.parquet", tmp_path / "agg.parquet")
    with pytest.raises(ArtifactError) as e:
        render_plots(tmp_path, tmp_path / "plots")
    msg = str(e.value)
    assert str(tmp_path / "runs.parquet") in msg
    assert "prefixbench sweep" in msg


def test_wrong_kind_parquet_names_the_file(results, tmp_path):
    shutil.copy(results / "runs.parquet", tmp_path / "agg.parquet")  # a runs file in agg's place
    shutil.copy(results / "crossover.parquet", tmp_path / "crossover.parquet")
    with pytest.raises(ArtifactError) as e:
        render_plots(tmp_path, tmp_path / "plots")
    assert str(tmp_path / "agg.parquet") in str(e.value)
    assert "'agg'" in str(e.value) and "runs" in str(e.value)


def test_cli_plot_prints_paths(results, tmp_path):
    out = tmp_path / "figs"
    r = runner.invoke(app, ["plot", str(results), "--out", str(out)])
    assert r.exit_code == 0, r.stderr
    printed = r.stdout.strip().splitlines()
    assert printed == [str(out / name) for name in sorted(p.name for p in out.iterdir())]
    assert set(EXPECTED) <= {p.name for p in out.iterdir()}


def test_cli_plot_missing_folder_is_one_line(tmp_path):
    r = runner.invoke(app, ["plot", str(tmp_path / "nowhere"), "--out", str(tmp_path / "p")])
    assert r.exit_code == 2
    assert len(r.stderr.strip().splitlines()) == 1
    assert "nowhere" in r.stderr and "prefixbench sweep" in r.stderr
    assert "Traceback" not in r.output + r.stderr


def test_single_seed_sweep_plots(tmp_path):
    """One seed: every CI column is null; the figures must still draw (no scale TypeError)."""
    from prefixbench.study.crossover import run_crossover
    from prefixbench.study.grid import build_spec
    from prefixbench.study.sweep import run_sweep

    grid = {
        "models": ["qwen2-0.5b"],
        "workloads": ["tool_call"],
        "budgets": [1.0],
        "seeds": [0],
        "set": ["run.requests=600", "run.warmup_requests=100"],
    }
    run_sweep(build_spec(grid), tmp_path / "r", jobs=1)
    run_crossover(tmp_path / "r")
    written = render_plots(tmp_path / "r", tmp_path / "p")
    assert {p.name for p in written} >= {"01_mean_ttft_by_policy.png", "06_ttft_distribution.png"}


def test_figures_have_the_parquet_file_mode(plots, results):
    mode = (results / "agg.parquet").stat().st_mode & 0o777
    for p in plots[1]:
        assert p.stat().st_mode & 0o777 == mode, p.name


def test_full_disk_is_one_line(results, tmp_path, monkeypatch):
    import errno

    import plotnine

    def full(*a, **k):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(plotnine.ggplot, "save", full)
    r = runner.invoke(app, ["plot", str(results), "--out", str(tmp_path / "p")])
    assert r.exit_code != 0
    assert "No space left on device" in r.stderr and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    assert not list((tmp_path / "p").iterdir())  # no temp file left behind


def test_ttft_cdf_pools_requests_over_seeds():
    import polars as pl

    from prefixbench.study.plots import ttft_cdf_frame

    ev = pl.DataFrame(
        {
            "model": ["m"] * 4,
            "workload": ["w"] * 4,
            "budget_factor": [1.0] * 4,
            "policy": ["replicate_hotset"] * 4,
            "seed": [0, 0, 0, 1],
            "warmup": [False] * 4,
            "outcome": ["completed"] * 4,
            "ttft_ms": [1.0, 2.0, 3.0, 10.0],
        }
    )
    cdf = ttft_cdf_frame(ev, n=101)
    # pooled median of {1, 2, 3, 10} is 2.5; averaging the seeds' medians would give 6
    assert cdf.filter(pl.col("cdf").round(2) == 0.5)["ttft_ms"][0] == pytest.approx(2.5)
    assert cdf["requests"][0] == 4 and cdf["seeds"][0] == 2


def test_link_sweep_decision_map(tmp_path):
    import polars as pl

    from prefixbench.study.decision import run_link_sweep
    from prefixbench.study.grid import build_spec

    spec = build_spec(
        {
            "models": ["qwen2-0.5b"],
            "workloads": ["tool_call"],
            "budgets": [1.0],
            "seeds": [0, 1],
            "set": ["run.requests=600", "run.warmup_requests=100"],
        }
    )
    paths = run_link_sweep(spec, ["eth-10g", "roce-200g"], tmp_path / "d", jobs=1)
    dec = pl.read_parquet(paths["decision"])
    assert dec["link"].to_list() == ["eth-10g", "roce-200g"]
    assert dec["link_gbytes_per_s"].to_list() == [1.25, 25.0]  # 10 and 200 Gbit/s
    for r in dec.iter_rows(named=True):
        runs = pl.read_parquet(tmp_path / "d" / "links" / r["link"] / "runs.parquet")
        t = {(x["seed"], x["policy"]): x["ttft_mean_ms"] for x in runs.to_dicts()}
        diffs = [t[(s, r["runner_up"])] - t[(s, r["winner"])] for s in (0, 1)]
        assert r["margin_ms"] == pytest.approx(sum(diffs) / 2)
        # two seeds: CI half-width = t(0.975, 1) · sd / sqrt(2), t = 12.706
        sd = abs(diffs[0] - diffs[1]) / 2**0.5
        assert r["margin_ci95_ms"] == pytest.approx(12.706 * sd / 2**0.5, rel=1e-3)
        assert (r["decision"] == "tie") == (abs(r["margin_ms"]) <= r["margin_ci95_ms"])
    written = render_plots(tmp_path / "d", tmp_path / "p")
    assert [p.name for p in written] == ["08_decision_map.png"]
    assert _png_size(written[0])[0] >= 1000


def test_regret_is_zero_for_the_best_policy_only(results):
    import polars as pl

    from prefixbench.study.plots import regret_frame

    agg = pl.read_parquet(results / "agg.parquet")
    reg = regret_frame(agg)
    for _, grp in reg.group_by(["model", "workload", "budget_factor"]):
        ttft = grp["ttft_mean_ms"].to_list()
        assert grp["regret_ms"].to_list() == pytest.approx([t - min(ttft) for t in ttft])
        assert min(grp["regret_ms"]) == 0


def test_breakeven_band_brackets_the_hand_tie_bandwidth():
    from prefixbench import catalog
    from prefixbench.physics.costmodel import Efficiency, InstanceCost, recompute_time
    from prefixbench.study.plots import breakeven_frame

    df = breakeven_frame(["qwen2-0.5b"], ["l4"], n=60)
    # a 2048-token prefix: transfer = 20 µs + 2048 · 12,288 B / bw; recompute = t_r(2048)
    cost = InstanceCost.build(
        catalog.get_model("qwen2-0.5b"), catalog.get_accelerator("l4"), 1, Efficiency()
    )
    tie = 2048 * 12288 / (float(recompute_time(cost, 2048)) - 20e-6) / 1e9  # GB/s
    below = df.filter(df["gbytes_per_s"] < tie * 0.9)
    above = df.filter(df["gbytes_per_s"] > tie * 1.1)
    assert (below["recompute_until"] >= 2048).all()
    assert (
        above["recompute_until"].is_nan().all()
        or (above["recompute_until"].fill_nan(0) < 2048).all()
    )
    until = df["recompute_until"].fill_nan(0).to_list()
    assert until == sorted(until, reverse=True)  # faster links: recompute wins for less


def test_capacity_probes_file_and_goodput_figure(tmp_path):
    import polars as pl

    args = [
        "capacity",
        "tool_call",
        "--set",
        "run.requests=400",
        "--set",
        "run.warmup_requests=50",
        "--target",
        "0.5",
        "--out",
        str(tmp_path / "c"),
    ]
    for policy in ("transfer_per_request", "replicate_all_lru", "replicate_all_lru"):
        r = runner.invoke(app, [*args, "--policy", policy, "--json"])
        assert r.exit_code == 0, r.stderr
    cap = pl.read_parquet(tmp_path / "c" / "capacity.parquet")
    probes = __import__("json").loads(r.stdout)["probes"]
    # the rerun replaced its policy's rows instead of appending a second copy
    assert cap.filter(pl.col("policy") == "replicate_all_lru").height == len(probes)
    assert set(cap["policy"]) == {"transfer_per_request", "replicate_all_lru"}
    written = render_plots(tmp_path / "c", tmp_path / "p")
    assert [p.name for p in written] == ["12_goodput_vs_rate.png"]
