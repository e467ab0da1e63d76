"""The per-prefix table's definition, for tests: a polars ``group_by`` over a run's
request rows. The product builds the same table in one compiled pass over the engine's
columns (metrics/prefixes.py, study/aggregate.py ``prefix_rows``/``point_prefixes``);
tests/test_prefixes.py checks the two agree to the bit."""

from __future__ import annotations

import polars as pl


def prefix_table(reqs: pl.DataFrame, constants: dict[str, pl.Expr] | None = None) -> pl.DataFrame:
    """Per prefix and policy over steady-state requests: traffic, where its KV came from, bytes.

    ``constants``: key columns the same on every row (a grid point's model, workload, …), as
    the expressions that make them; they are added to the table, not grouped by, which gives
    the table grouping by them would, at a fraction of the cost."""
    constants = constants or {}
    keys = ["model", "workload", "budget_factor", "seed", "policy", "prefix_id"]
    if "admission" in reqs.columns or "admission" in constants:
        keys.insert(0, "admission")
    grouped = [k for k in keys if k not in constants]
    # only the columns the table reads: filtering all ~40 request columns is half its cost
    steady = reqs.select(*dict.fromkeys([*grouped, *_PER_PREFIX_INPUTS])).filter(
        ~pl.col("warmup") & (pl.col("prefix_id") >= 0)
    )
    return _with_constants(_per_prefix(steady, grouped), keys, constants)


def _with_constants(table: pl.DataFrame, keys: list[str], constants: dict) -> pl.DataFrame:
    """``table`` with the constant key columns added and the keys first."""
    if not constants:
        return table
    table = table.with_columns(**constants)
    return table.select(*keys, *(c for c in table.columns if c not in keys))


_PER_PREFIX_INPUTS = (
    "warmup",
    "t_admit",
    "prompt_tokens",
    "replica_hit_tokens",
    "prefill_hit_tokens",
    "recompute_tokens",
    "transfer_bytes",
    "ttft_ms",
    "outcome",
)


def _per_prefix(steady: pl.DataFrame, keys: list[str]) -> pl.DataFrame:
    admitted = pl.col("t_admit").is_not_nan()
    return (
        steady.group_by(keys)
        .agg(
            pl.len().cast(pl.Int64).alias("requests"),
            admitted.sum().cast(pl.Int64).alias("admitted"),
            pl.col("prompt_tokens").filter(admitted).sum().cast(pl.Int64).alias("prompt_tokens"),
            pl.col("replica_hit_tokens").sum().cast(pl.Int64).alias("replica_hit_tokens"),
            pl.col("prefill_hit_tokens")
            .filter(admitted)
            .sum()
            .cast(pl.Int64)
            .alias("prefill_hit_tokens"),
            pl.col("recompute_tokens").sum().cast(pl.Int64).alias("recompute_tokens"),
            pl.col("transfer_bytes").sum().alias("transfer_bytes"),
            (pl.col("replica_hit_tokens") > 0)
            .filter(admitted)
            .mean()
            .alias("replica_served_fraction"),
            pl.col("ttft_ms").filter(pl.col("outcome") == "completed").mean().alias("ttft_mean_ms"),
        )
        .sort(["policy", "prefix_id"])
    )
