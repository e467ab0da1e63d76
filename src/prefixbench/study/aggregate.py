"""Aggregation over seeds (mean and 95% confidence interval) and per-prefix tables."""

from __future__ import annotations

import numpy as np
import polars as pl

from prefixbench.io.artifacts import register
from prefixbench.metrics.bound import COLUMNS as GAP_METRICS

from .margins import t975

WARMUP_METRICS = ["prewarm_gb", "refresh_gb", "prewarm_s"]
# energy (power.energy_figures): null where a pool's device has no power figures
ENERGY_METRICS = ["energy_per_token_j", "power_mean_w"]

GROUP = ["admission", "model", "workload", "budget_factor", "policy"]
AGG_METRICS = [
    "ttft_mean_ms",
    "ttft_p50_ms",
    "ttft_p90_ms",
    "ttft_p99_ms",
    "ttft_prefill_mean_ms",
    "tpot_mean_ms",
    "tpot_p99_ms",
    "e2e_mean_ms",
    "throughput_rps",
    "throughput_tok_s",
    "reject_rate",
    "shared_request_fraction",
    "replica_hit_rate",
    "prefill_hit_rate",
    "mean_replica_kv_gb",
    "peak_replica_kv_gb",
    "peak_kv_used_gb",
    "transfer_mb_per_request",
    "recompute_tokens_per_request",
    "link_util",
    "prefill_util",
    "decode_util",
    "slo_attainment",
    "goodput_rps",
    "kv_budget_gb",
    "offered_rps",
    "capacity_rps",
    "rho_bottleneck",
    "hbm_hit_rate",
    "host_hit_rate",
    "host_mb_per_request",
    "mean_host_kv_gb",
    "host_path_util",
    # the gap to the hindsight bound (metrics/bound.py) and the hot set's warm-up traffic;
    # absent from older runs files
    *GAP_METRICS,
    *WARMUP_METRICS,
    *ENERGY_METRICS,
]


_NULLABLE = (*GAP_METRICS, *WARMUP_METRICS, *ENERGY_METRICS)  # absent from older runs


register(
    "agg",
    {
        "admission": pl.Utf8,
        "model": pl.Utf8,
        "workload": pl.Utf8,
        "budget_factor": pl.Float64,
        "policy": pl.Utf8,
        "n_seeds": pl.Int64,
        "stable": pl.Boolean,
        "unstable_seeds": pl.Int64,
        "saturated_stage": pl.Utf8,
        "bottleneck_stage": pl.Utf8,
        **{m: pl.Float64 for m in AGG_METRICS},
        **{f"{m}_ci95": pl.Float64 for m in AGG_METRICS},
    },
)


def aggregate(runs: pl.DataFrame) -> pl.DataFrame:
    """Mean and 95% CI half-width (Student t over seeds) per model × workload × budget × policy."""
    if "admission" not in runs.columns:  # rows from before the admission axis: the seed's
        runs = runs.with_columns(pl.lit("reserve").alias("admission"))
    if "stable" not in runs.columns:  # rows without a verdict (hand-made frames): none known
        runs = runs.with_columns(
            pl.lit(True).alias("stable"),
            pl.lit(None, pl.Utf8).alias("saturated_stage"),
            pl.lit(None, pl.Utf8).alias("bottleneck_stage"),
        )
    runs = runs.with_columns(
        [pl.col(m).cast(pl.Float64) for m in _NULLABLE if m in runs.columns]
        + [pl.lit(None, pl.Float64).alias(m) for m in _NULLABLE if m not in runs.columns]
    )
    g = runs.group_by(GROUP).agg(
        pl.len().cast(pl.Int64).alias("n_seeds"),
        # a point is unstable if any seed is (docs/model.md, "Stability")
        pl.col("stable").all().alias("stable"),
        (~pl.col("stable")).sum().cast(pl.Int64).alias("unstable_seeds"),
        pl.col("saturated_stage").drop_nulls().mode().sort().first().alias("saturated_stage"),
        pl.col("bottleneck_stage").drop_nulls().mode().sort().first().alias("bottleneck_stage"),
        *[pl.col(m).mean().alias(m) for m in AGG_METRICS],
        *[pl.col(m).std(ddof=1).alias(f"_sd_{m}") for m in AGG_METRICS],
    )
    t = g["n_seeds"].map_elements(lambda n: t975(n - 1), return_dtype=pl.Float64)
    g = g.with_columns(t.alias("_t"))
    g = g.with_columns(
        [
            (pl.col("_t") * pl.col(f"_sd_{m}") / pl.col("n_seeds").sqrt()).alias(f"{m}_ci95")
            for m in AGG_METRICS
        ]
    )
    return g.drop([c for c in g.columns if c.startswith("_")]).sort(GROUP)


PRIMARY_ADMISSION = "paged"  # every command's default (memory.admission)


def one_admission(df: pl.DataFrame) -> pl.DataFrame:
    """The rows of one admission mode (paged, the default, when present, else the first):
    plots, crossover tables and the report's result sections describe one mode; the report
    compares the recommendations of the others (report._admission_md)."""
    if "admission" not in df.columns or df.height == 0:
        return df
    modes = sorted(set(df["admission"]))
    primary = PRIMARY_ADMISSION if PRIMARY_ADMISSION in modes else modes[0]
    return df.filter(pl.col("admission") == primary)


def prefix_rows(prep, policy: str, res) -> dict:
    """One run's rows of the per-prefix table (its ``policy``, then one per prefix by id), as
    columns from the engine's result in one pass (metrics/prefixes.py): no request table,
    and no polars query (each costs about a millisecond, more than the pass)."""
    from prefixbench.metrics.prefixes import per_prefix
    from prefixbench.metrics.runcols import RunCols

    return {"policy": policy, **per_prefix(RunCols(prep, res))}


_NULL_WHEN_NAN = ("replica_served_fraction", "ttft_mean_ms")  # nothing admitted / completed
_KEY_TYPES = {str: pl.Utf8, float: pl.Float64, int: pl.Int64}


def point_prefixes(
    rows: list[dict], constants: dict, run_ids: dict[str, str] | None = None
) -> pl.DataFrame:
    """A grid point's per-prefix table from its runs' ``prefix_rows``: the table
    the definition (tests/reference_prefixes.py ``prefix_table``, a polars ``group_by``)
    builds from the point's request rows, sorted by policy and prefix,
    with the point's ``constants`` (plain values: model, workload, …) and each policy's
    ``run_ids`` as columns."""
    rows = sorted(rows, key=lambda r: r["policy"])  # each run's rows are by prefix id
    sizes = [len(r["prefix_id"]) for r in rows]
    n = sum(sizes)
    keys = ["admission", "model", "workload", "budget_factor", "seed"]
    cols = {
        k: pl.Series(k, [constants[k]] * n, dtype=_KEY_TYPES[type(constants[k])])
        for k in keys
        if k in constants
    }
    policy = [r["policy"] for r, m in zip(rows, sizes, strict=True) for _ in range(m)]
    cols["policy"] = pl.Series("policy", policy, dtype=pl.Utf8)
    for c in rows[0]:
        if c != "policy":
            cols[c] = pl.Series(
                c, np.concatenate([r[c] for r in rows]), nan_to_null=c in _NULL_WHEN_NAN
            )
    if run_ids is not None:
        cols["run_id"] = pl.Series("run_id", [run_ids[p] for p in policy], dtype=pl.Utf8)
    return pl.DataFrame(cols)
