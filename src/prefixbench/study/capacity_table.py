"""`capacity --out DIR`: the probes of a capacity search as ``DIR/capacity.parquet``, so
`plot DIR` can draw goodput against offered rate. Rows of the same scenario and policy are
replaced; other scenarios and policies already in the file are kept (one figure can compare
policies searched one after another)."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import polars as pl

from prefixbench.io.artifacts import read_artifact, register, write_atomic

register(
    "capacity",
    {
        "scenario": pl.Utf8,
        "policy": pl.Utf8,
        "target": pl.Float64,
        "max_rate_rps": pl.Float64,
        "rate": pl.Float64,
        "attainment": pl.Float64,
        "goodput_rps": pl.Float64,
        "ttft_p99_ms": pl.Float64,
        "tpot_p99_ms": pl.Float64,
    },
)


def write_probes(
    out: Path, scenario: str, policy: str, target: float, max_rate: float, probes: list
) -> Path:
    path = Path(out) / "capacity.parquet"
    new = pl.DataFrame(
        [
            {
                "scenario": scenario,
                "policy": policy,
                "target": target,
                "max_rate_rps": max_rate,
                **asdict(p),
            }
            for p in sorted(probes, key=lambda p: p.rate)
        ]
    )
    if path.is_file():
        old = read_artifact(path, "capacity").filter(
            ~((pl.col("scenario") == scenario) & (pl.col("policy") == policy))
        )
        # files written before a column existed (power_w) get it as null
        old = old.with_columns(pl.lit(None).alias(c) for c in new.columns if c not in old.columns)
        new = pl.concat([old.select(new.columns), new], how="vertical_relaxed")
    return write_atomic(new.sort(["scenario", "policy", "rate"]), path, "capacity")
