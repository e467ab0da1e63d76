"""Where the host-DRAM tier changes the recommendation: each scenario of agg.parquet ranked
with and without the policies that have the tier (``replicate_tiered`` and ``cost_aware``)
under the same rule (recommend.rank)."""

from __future__ import annotations

import math

import polars as pl

from .recommend import rank

TIERED = "replicate_tiered"
WITH_TIER = (TIERED, "cost_aware")  # the policies with a host tier under decode HBM
SCENARIO = ["model", "workload", "budget_factor"]


def tier_changes(agg: pl.DataFrame, objective: str = "balanced") -> pl.DataFrame:
    """One row per stable scenario that ran replicate_tiered and some policy without a host
    tier: the winner without the tier, the winner with it, both mean TTFTs, and the host hit
    rate of the winner with it."""
    out = []
    for key, grp in agg.filter(pl.col("stable")).group_by(SCENARIO, maintain_order=True):
        rows = grp.to_dicts()
        others = [r for r in rows if r["policy"] not in WITH_TIER]
        tier = [r for r in rows if r["policy"] == TIERED]
        if not tier or not others:
            continue
        by = {r["policy"]: r for r in rows}
        before, after = rank(others, objective)[0], rank(rows, objective)[0]
        out.append(
            {
                "model": key[0],
                "workload": key[1],
                "budget_factor": key[2],
                "without_tier": before,
                "with_tier": after,
                "ttft_without_ms": by[before]["ttft_mean_ms"],
                "ttft_with_ms": by[after]["ttft_mean_ms"],
                "host_hit_rate": by[after].get("host_hit_rate", math.nan),
                "changed": before != after,
            }
        )
    schema = {
        "model": pl.Utf8, "workload": pl.Utf8, "budget_factor": pl.Float64,
        "without_tier": pl.Utf8, "with_tier": pl.Utf8, "ttft_without_ms": pl.Float64,
        "ttft_with_ms": pl.Float64, "host_hit_rate": pl.Float64, "changed": pl.Boolean,
    }  # fmt: skip
    return pl.DataFrame(out, schema=schema).sort(SCENARIO)


def tier_md(agg: pl.DataFrame, tight_max: float) -> list[str]:
    """The report section (Markdown lines)."""
    out = ["## Where the host tier changes the recommendation", ""]
    t = tier_changes(agg)
    if t.height == 0:
        return out + ["No stable scenario ran `replicate_tiered` next to another policy.", ""]
    ch = t.filter(pl.col("changed"))
    tight = t.filter(pl.col("budget_factor") <= tight_max)
    n_tight = tight.filter(pl.col("changed")).height
    out += [
        "Ranking every scenario with and without the policies that keep a host-DRAM tier "
        f"(`replicate_tiered`, `cost_aware`; balanced rule): the "
        f"host tier changes the recommendation in {ch.height} of {t.height} scenarios, "
        f"{n_tight} of the {tight.height} with a tight budget (factor ≤ {tight_max:g}). "
        "Host hits are the share of the winner's chain blocks promoted from host DRAM. A "
        "change whose "
        "TTFT difference is inside the seeds' spread is a near tie: see the margins under "
        "Recommendations.",
        "",
    ]
    if ch.height == 0:
        return out
    out += [
        "| Model | Workload | Budget | Without tier | TTFT | With tier | TTFT | Host hits |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in ch.iter_rows(named=True):
        out.append(
            f"| `{r['model']}` | `{r['workload']}` | {r['budget_factor']:g} | "
            f"`{r['without_tier']}` | {r['ttft_without_ms']:.1f} ms | `{r['with_tier']}` | "
            f"{r['ttft_with_ms']:.1f} ms | {_frac(r['host_hit_rate'])} |"
        )
    return out + [""]


def _frac(x) -> str:
    return "n/a" if x is None or math.isnan(x) else f"{x:.3f}"
