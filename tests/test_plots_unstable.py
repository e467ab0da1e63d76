"""Figures 01, 06 and 10 draw unstable results as unstable instead of leaving them out."""

from __future__ import annotations

import polars as pl

from prefixbench.study.plots import plot_mean_ttft, plot_regret, plot_ttft_distribution


def _agg() -> pl.DataFrame:
    rows = []
    for policy, stable, ttft in (
        ("transfer_per_request", True, 50.0),
        ("replicate_hotset", True, 40.0),
        ("recompute_on_decode", False, 9000.0),
    ):
        rows.append({
            "admission": "paged", "model": "m", "workload": "w", "budget_factor": 0.5,
            "policy": policy, "stable": stable, "ttft_mean_ms": ttft, "ttft_mean_ms_ci95": 1.0,
            "ttft_p50_ms": ttft, "ttft_p90_ms": ttft * 1.5, "ttft_p99_ms": ttft * 2,
        })  # fmt: skip
    return pl.DataFrame(rows)


def _layer_frames(plot) -> list:
    frames = [getattr(layer.geom, "data", None) for layer in plot.layers]
    return [d for d in frames if d is not None and hasattr(d, "columns") and len(d)]


def test_mean_ttft_marks_the_unstable_policy():
    p, _ = plot_mean_ttft(_agg())
    marked = [d for d in _layer_frames(p) if "recompute_on_decode" in set(d["policy"].astype(str))]
    assert marked, "the unstable policy is not drawn"
    assert "recompute_on_decode" not in set(p.data["policy"].astype(str))  # not as a value
    assert marked[0]["ttft_mean_ms"].iloc[0] == 75.0  # 1.5 x the largest stable mean


def test_distribution_marks_the_unstable_policy():
    p, _ = plot_ttft_distribution(_agg())
    assert any("recompute_on_decode" in set(d["policy"].astype(str)) for d in _layer_frames(p))


def test_regret_tiles_say_unstable():
    p, _ = plot_regret(_agg())
    labels = dict(zip(p.data["policy"].astype(str), p.data["label"], strict=True))
    assert labels["recompute_on_decode"] == "unstable"
    assert labels["replicate_hotset"] == "best"
