"""`prefixbench report`: the study's findings as Markdown, every number read from the Parquet files.

Regimes follow the reference study: *relaxed* is budget factor ≥ 0.75, *tight* ≤ 0.5. A
regime's figure for a policy is the plain mean over its scenarios (model × workload ×
budget) of the seed means in agg.parquet; "TTFT vs transfer" is the ratio of those regime
means minus one, as the reference study quotes it.
"""

from __future__ import annotations

import math
import os
from datetime import UTC, datetime
from pathlib import Path

import polars as pl

from prefixbench.io.artifacts import artifact_meta
from prefixbench.registry.figures import titles as figure_titles
from prefixbench.scenario.models import POLICIES

from ..errors import ArtifactError
from .aggregate import PRIMARY_ADMISSION, one_admission
from .plots import _pair, ttft_change_vs_transfer
from .recommend import recommendations
from .results import load
from .tier_effect import tier_md

RELAXED_MIN = 0.75
TIGHT_MAX = 0.5
SCENARIO = ["model", "workload", "budget_factor"]
BASELINE = "transfer_per_request"

PLOT_TITLES = figure_titles()  # prefixbench/registry/figures.py


# ---------------------------------------------------------------- number formats (tests reuse them)


def ms(x: float) -> str:
    return "n/a" if x is None or math.isnan(x) else f"{x:.1f} ms"


def pct(x: float) -> str:
    return "n/a" if x is None or math.isnan(x) else f"{x:.1%}"


def signed_pct(x: float) -> str:
    return "n/a" if x is None or math.isnan(x) else f"{x:+.1%}"


def frac(x: float) -> str:
    return "n/a" if x is None or math.isnan(x) else f"{x:.3f}"


def rps(x: float) -> str:
    return "n/a" if x is None or math.isnan(x) else f"{x:.2f} req/s"


def mb(gb: float) -> str:
    return "n/a" if gb is None or math.isnan(gb) else f"{gb * 1000:.1f} MB"


def md_table(headers: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


# ---------------------------------------------------------------- inputs


def _policies(df: pl.DataFrame) -> list[str]:
    have = set(df["policy"])
    return [p for p in POLICIES if p in have] + sorted(have - set(POLICIES))


def regime(agg: pl.DataFrame, name: str) -> pl.DataFrame:
    """The agg rows of the relaxed (budget ≥ 0.75) or tight (≤ 0.5) regime."""
    if name == "relaxed":
        return agg.filter(pl.col("budget_factor") >= RELAXED_MIN)
    return agg.filter(pl.col("budget_factor") <= TIGHT_MAX)


def regime_table(rows: pl.DataFrame) -> pl.DataFrame:
    """Per policy: means over the regime's scenarios, and mean TTFT relative to transfer."""
    t = rows.group_by("policy").agg(
        pl.len().alias("scenarios"),
        *[
            pl.col(c).mean()
            for c in (
                "ttft_mean_ms",
                "throughput_rps",
                "reject_rate",
                "shared_request_fraction",
                "replica_hit_rate",
                "mean_replica_kv_gb",
            )
        ],
    )
    t = t.join(paired_vs_baseline(rows), on="policy", how="left")
    order = {p: i for i, p in enumerate(_policies(rows))}
    return t.sort(pl.col("policy").replace_strict(order, return_dtype=pl.Int64))


def paired_vs_baseline(rows: pl.DataFrame) -> pl.DataFrame:
    """Per policy: mean TTFT relative to transfer_per_request over the scenarios where
    both are stable (``rows`` holds stable rows only), and how many those are (``paired``)."""
    base = rows.filter(pl.col("policy") == BASELINE).select(
        *SCENARIO, pl.col("ttft_mean_ms").alias("_base")
    )
    return (
        rows.join(base, on=SCENARIO, how="inner")
        .group_by("policy")
        .agg(
            pl.len().cast(pl.Int64).alias("paired"),
            (pl.col("ttft_mean_ms").mean() / pl.col("_base").mean() - 1).alias(
                "ttft_vs_transfer"
            ),
        )
    )


def _vs(r: dict) -> str:
    if r["policy"] == BASELINE:
        return "baseline"
    n = r.get("paired")
    return f"{signed_pct(r['ttft_vs_transfer'])} (N={n or 0})"


def _regime_md(t: pl.DataFrame) -> str:
    rows = [
        [
            f"`{r['policy']}`",
            ms(r["ttft_mean_ms"]),
            rps(r["throughput_rps"]),
            pct(r["reject_rate"]),
            frac(r["shared_request_fraction"]),
            frac(r["replica_hit_rate"]),
            mb(r["mean_replica_kv_gb"]),
            str(r["scenarios"]),
            _vs(r),
        ]
        for r in t.iter_rows(named=True)
    ]
    return md_table(
        [
            "Policy",
            "Mean TTFT",
            "Throughput",
            "Reject rate",
            "Shared request frac",
            "Replica hit rate",
            "Mean replica KV",
            "Stable scenarios",
            "TTFT vs transfer (N paired)",
        ],
        rows,
    )


def best_relaxed_case(agg: pl.DataFrame) -> dict | None:
    """The relaxed scenario where the best replica policy beats transfer by the most."""
    ch = ttft_change_vs_transfer(regime(agg, "relaxed")).filter(
        pl.col("policy").str.starts_with("replicate")
    )
    if ch.height == 0:
        return None
    best = ch.sort(["ttft_mean_ms", "policy"]).group_by(SCENARIO, maintain_order=True).first()
    return best.sort(["ttft_change", *SCENARIO]).row(0, named=True)


def cliff_case(agg: pl.DataFrame) -> pl.DataFrame:
    """All policies' rows of the scenario with the highest mean reject rate."""
    worst = (
        agg.group_by(SCENARIO)
        .agg(pl.col("reject_rate").mean().alias("r"))
        .sort(["r", *SCENARIO], descending=[True, False, False, False])
        .row(0, named=True)
    )
    rows = agg.filter(
        (pl.col("model") == worst["model"])
        & (pl.col("workload") == worst["workload"])
        & (pl.col("budget_factor") == worst["budget_factor"])
    )
    order = {p: i for i, p in enumerate(_policies(rows))}
    return rows.sort(pl.col("policy").replace_strict(order, return_dtype=pl.Int64))


def transfer_minus_recompute(agg: pl.DataFrame) -> pl.DataFrame:
    """Per model: range of simulated mean TTFT (transfer − recompute) over its scenarios."""
    piv = agg.filter(pl.col("policy").is_in([BASELINE, "recompute_on_decode"])).pivot(
        on="policy", index=SCENARIO, values="ttft_mean_ms"
    )
    if not {BASELINE, "recompute_on_decode"} <= set(piv.columns):
        return pl.DataFrame()
    return (
        piv.with_columns((pl.col(BASELINE) - pl.col("recompute_on_decode")).alias("d"))
        .group_by("model")
        .agg(
            pl.col("d").min().alias("min_ms"),
            pl.col("d").max().alias("max_ms"),
            (pl.col("d") > 0).sum().alias("recompute_faster"),
            pl.len().alias("scenarios"),
        )
        .sort("model")
    )


def scope(runs: pl.DataFrame, agg: pl.DataFrame) -> dict:
    return {
        "models": sorted(set(runs["model"])),
        "workloads": sorted(set(runs["workload"])),
        "budgets": sorted(set(runs["budget_factor"])),
        "policies": _policies(runs),
        "seeds": sorted(set(runs["seed"])),
        "runs": runs.height,
        "agg_rows": agg.height,
    }


# ---------------------------------------------------------------- the document


def _scope_md(s: dict, meta: dict) -> str:
    lines = [
        f"- Models ({len(s['models'])}): " + ", ".join(f"`{m}`" for m in s["models"]),
        f"- Workloads ({len(s['workloads'])}): " + ", ".join(f"`{w}`" for w in s["workloads"]),
        f"- Budget factors ({len(s['budgets'])}): " + ", ".join(f"{b:g}" for b in s["budgets"]),
        f"- Policies ({len(s['policies'])}): " + ", ".join(f"`{p}`" for p in s["policies"]),
        f"- Seeds ({len(s['seeds'])}): " + ", ".join(str(x) for x in s["seeds"]),
        f"- Simulation runs: {s['runs']}",
        f"- Aggregated scenario rows (model × workload × budget × policy): {s['agg_rows']}",
    ]
    if meta.get("of") and meta.get("points", meta["of"]) < meta["of"]:
        lines.append(
            f"- **Partial sweep:** only {meta['points']} of {meta['of']} grid points finished; "
            "rerun the same `prefixbench sweep` to complete it"
        )
    return "\n".join(lines)


def _regime_section(
    agg: pl.DataFrame, name: str, rule: str, every: pl.DataFrame | None = None
) -> list[str]:
    every = agg if every is None else every
    rows = regime(agg, name)
    out = [f"### {name.capitalize()} regime (budget factor {rule})", ""]
    if rows.height == 0:
        return [*out, "No budget factor of this study falls in this regime.", ""]
    t = regime_table(rows)
    budgets = ", ".join(f"{b:g}" for b in sorted(set(rows["budget_factor"])))
    out += [
        f"Budget factors {budgets}; {rows.select(SCENARIO).unique().height} scenarios. Each "
        "policy's means are over the scenarios where it is stable; its TTFT against "
        "`transfer_per_request` is over the N scenarios where both are stable.",
        "",
    ]
    out += [_regime_md(t), ""]
    gone = [q for q in _policies(regime(every, name)) if q not in set(t["policy"])]
    if gone:
        out += [
            "Unstable in every scenario of this regime (no row above): "
            + ", ".join(f"`{q}`" for q in gone),
            "",
        ]
    reps = t.filter(pl.col("policy") != BASELINE)
    if reps.height and BASELINE in set(t["policy"]):
        out += ["Mean TTFT relative to `transfer_per_request`:", ""]
        for r in reps.iter_rows(named=True):
            if not r.get("paired"):
                out.append(f"- `{r['policy']}`: no scenario where both are stable")
                continue
            verb = "cuts" if r["ttft_vs_transfer"] < 0 else "raises"
            out.append(
                f"- `{r['policy']}` {verb} it by {pct(abs(r['ttft_vs_transfer']))} "
                f"(over the {r['paired']} scenarios where both are stable)"
            )
        out.append("")
    return out


def _best_md(b: dict | None) -> list[str]:
    out = ["### Best relaxed case", ""]
    if b is None:
        return [*out, "No relaxed scenario with a replica policy in this study.", ""]
    return [
        *out,
        f"- Model: `{b['model']}`",
        f"- Workload: `{b['workload']}`",
        f"- Budget factor: {b['budget_factor']:g}",
        f"- `transfer_per_request`: {ms(b['transfer_ttft_ms'])}",
        f"- `{b['policy']}`: {ms(b['ttft_mean_ms'])} (± {ms(b['ttft_mean_ms_ci95'])} 95% CI), "
        f"reject rate {pct(b['reject_rate'])}, {mb(b['mean_replica_kv_gb'])} of replica KV",
        f"- TTFT reduction: {pct(-b['ttft_change'])}",
        "",
    ]


def _cliff_md(c: pl.DataFrame) -> list[str]:
    r0 = c.row(0, named=True)
    rows = [
        [
            f"`{r['policy']}`",
            ms(r["ttft_mean_ms"]),
            pct(r["reject_rate"]),
            rps(r["throughput_rps"]),
            frac(r["shared_request_fraction"]),
            frac(r["replica_hit_rate"]),
            mb(r["mean_replica_kv_gb"]),
        ]
        for r in c.iter_rows(named=True)
    ]
    return [
        "### Worst case: the admission cliff",
        "",
        "The scenario with the highest reject rate "
        f"(mean over policies {pct(c['reject_rate'].mean())}): "
        f"`{r0['model']}` / `{r0['workload']}` / budget factor {r0['budget_factor']:g} "
        f"(KV budget {r0['kv_budget_gb']:.3f} GB per decode instance, mean over seeds).",
        "",
        md_table(
            [
                "Policy",
                "Mean TTFT",
                "Reject rate",
                "Throughput",
                "Shared request frac",
                "Replica hit rate",
                "Mean replica KV",
            ],
            rows,
        ),
        "",
        "Mean TTFT counts admitted requests only; a policy that rejects more can look faster.",
        "",
    ]


def _crossover_md(crossover: pl.DataFrame, agg: pl.DataFrame) -> list[str]:
    from .crossover import verdicts

    accelerator, link = _pair(crossover)
    out = [
        "## Transfer vs recompute",
        "",
        "Analytic verdicts (roofline, no queueing) on decode accelerator "
        f"`{accelerator}` over `{link}`, "
        "from crossover.parquet:",
        "",
    ]
    out += [f"- {v}" for v in verdicts(crossover, accelerator, link)] + [""]
    d = transfer_minus_recompute(agg)
    if d.height:
        out += [
            "Simulated mean TTFT, transfer − recompute, over each model's scenarios (agg.parquet):",
            "",
        ]
        for r in d.iter_rows(named=True):
            if r["recompute_faster"] == r["scenarios"]:
                who = "recompute beats transfer in every scenario"
            elif r["recompute_faster"] == 0:
                who = "transfer beats recompute in every scenario"
            else:
                who = (
                    f"recompute is faster in {r['recompute_faster']} of {r['scenarios']} scenarios"
                )
            out.append(
                f"- `{r['model']}`: {who} (transfer − recompute ranges from "
                f"{ms(r['min_ms'])} to {ms(r['max_ms'])})"
            )
        out.append("")
    return out


def _recommend_md(rec: pl.DataFrame) -> list[str]:
    rec = rec.with_columns(pl.col("recommended").fill_null("none (unstable)"))
    objective = ", ".join(sorted(set(rec["objective"])))
    counts = rec.group_by("recommended").len()
    n = dict(zip(counts["recommended"], counts["len"], strict=True))
    out = [
        "## Recommendations",
        "",
        f"{objective.capitalize()} objective (rule in docs/study.md), "
        "one per model × workload × budget.",
        "",
        "Counts per policy:",
        "",
    ]
    names = list(POLICIES) + sorted(set(n) - set(POLICIES))
    out += [f"- `{p}`: {n.get(p, 0)}" for p in names]
    rows = []
    for r in rec.iter_rows(named=True):
        margin = ms(r["margin_ms"])
        if r["margin_ci95_ms"] is not None and not math.isnan(r["margin_ci95_ms"]):
            margin += f" ± {r['margin_ci95_ms']:.1f}"
        rows.append(
            [
                f"`{r['model']}`",
                f"`{r['workload']}`",
                f"{r['budget_factor']:g}",
                f"`{r['recommended']}`",
                f"`{r['runner_up']}`" if r["runner_up"] else "—",
                ms(r["ttft_ms"]),
                margin,
                "yes" if r["seeds_agree"] else "no",
                r["reason"],
            ]
        )
    out += [
        "",
        md_table(
            [
                "Model",
                "Workload",
                "Budget",
                "Recommended",
                "Runner-up",
                "TTFT",
                "Margin (95% CI)",
                "Seeds agree",
                "Why",
            ],
            rows,
        ),
        "",
        "Margin: paired per-seed difference in mean TTFT, runner-up − recommended.",
        "",
    ]
    return out


def _stability_md(agg: pl.DataFrame) -> list[str]:
    """Points whose queues grow without bound: listed here, left out of every result below."""
    from prefixbench.metrics.stability import LABELS

    bad = agg.filter(~pl.col("stable"))
    out = ["## Stability", ""]
    if bad.height == 0:
        return [*out, f"Every one of the {agg.height} points is stable (docs/model.md).", ""]
    rows = [
        [
            f"`{r['model']}`",
            f"`{r['workload']}`",
            f"{r['budget_factor']:g}",
            f"`{r['policy']}`",
            LABELS.get(r["saturated_stage"], r["saturated_stage"] or "—"),
            f"{r['rho_bottleneck']:.2f}" if r["rho_bottleneck"] is not None else "—",
            rps(r["capacity_rps"]) if r["capacity_rps"] is not None else "—",
        ]
        for r in bad.iter_rows(named=True)
    ]
    return [
        *out,
        f"{bad.height} of {agg.height} results (a policy on a scenario, over its seeds) are "
        "unstable (a queue grows without bound on at least one seed). They are not steady "
        "states: tables show them as unstable, recommendations do not rank them, and every "
        "comparison with the baseline is over the scenarios where both are stable (N given).",
        "",
        md_table(["Model", "Workload", "Budget", "Policy", "Saturates", "ρ", "Stable below"], rows),
        "",
    ]


def _by_workload_md(agg: pl.DataFrame) -> list[str]:
    pols = _policies(agg)
    t = agg.group_by(["workload", "policy"]).agg(pl.col("ttft_mean_ms").mean())
    rows = []
    for w in sorted(set(agg["workload"])):
        sub = dict(t.filter(pl.col("workload") == w).select("policy", "ttft_mean_ms").iter_rows())
        rows.append([f"`{w}`", *[ms(sub[p]) if p in sub else "—" for p in pols]])
    return [
        "### Mean TTFT by workload (all models and budgets)",
        "",
        md_table(["Workload", *[f"`{p}`" for p in pols]], rows),
        "",
    ]


def _plots_md(plots: Path, report_dir: Path) -> list[str]:
    out = ["## Plots", ""]
    found = [name for name in PLOT_TITLES if (plots / name).is_file()]
    if not found:
        return [*out, f"No plots found in `{plots}`; run `prefixbench plot` first.", ""]
    for name in found:
        rel = Path(os.path.relpath(plots / name, report_dir)).as_posix()
        out += [f"### {PLOT_TITLES[name]}", "", f"![{PLOT_TITLES[name]}]({rel})", ""]
    return out


HOW_TO_READ = (
    "Every number here is **simulated**, not measured: step times come from a roofline cost "
    "model (FLOPs and bytes against datasheet peaks scaled by assumed efficiencies), so absolute "
    "times are approximate and the comparisons between policies are what to trust. See "
    "docs/model.md for the model and its assumptions. Figures are means over seeds; ± values are "
    "95% confidence half-widths (Student t over seeds). Mean TTFT covers admitted requests "
    "only, so read it together with the reject rate. Relaxed regime: budget factor ≥ 0.75; "
    "tight regime: ≤ 0.5."
)


_NO_STABLE = [
    "## Policies",
    "",
    "No point of this study is stable: there is no steady state to report.",
    "",
]


def _results_md(
    agg: pl.DataFrame, crossover: pl.DataFrame, every: pl.DataFrame | None = None
) -> list[str]:
    return [
        "## Policies by memory regime",
        "",
        *_regime_section(agg, "relaxed", f"≥ {RELAXED_MIN:g}", every),
        *_regime_section(agg, "tight", f"≤ {TIGHT_MAX:g}", every),
        *_best_md(best_relaxed_case(agg)),
        *_cliff_md(cliff_case(agg)),
        *_by_workload_md(agg),
        *_bound_section(agg),
        *_warmup_section(agg),
        *_energy_section(agg),
        *_crossover_md(crossover, agg),
        *_streaming_md(agg),
    ]


def _streaming_md(agg: pl.DataFrame) -> list[str]:
    from .transfer_path import streaming_md

    return streaming_md(sorted(agg["model"].unique().to_list()))


def _energy_section(agg: pl.DataFrame) -> list[str]:
    """Energy per output token of every policy (docs/model.md §2.11), mean over seeds."""
    if "energy_per_token_j" not in agg.columns or agg["energy_per_token_j"].is_null().all():
        return []
    pols = _policies(agg)
    rows = []
    for key in agg.select(SCENARIO).unique().sort(SCENARIO).iter_rows():
        sub = agg.filter(
            (pl.col("model") == key[0])
            & (pl.col("workload") == key[1])
            & (pl.col("budget_factor") == key[2])
        )
        j = dict(sub.select("policy", "energy_per_token_j").iter_rows())
        rows.append(
            [f"`{key[0]}`", f"`{key[1]}`", f"{key[2]:g}"]
            + [f"{j[p]:.4f}" if j.get(p) is not None else "—" for p in pols]
        )
    return [
        "### Energy per output token (J)",
        "",
        "All devices' energy over the measured window (idle, compute and memory power, capped "
        "at TDP; link energy per byte) divided by the measured requests' output tokens, mean "
        "over seeds (docs/model.md §2.11).",
        "",
        md_table(["Model", "Workload", "Budget", *[f"`{p}`" for p in pols]], rows),
        "",
    ]


def _warmup_section(agg: pl.DataFrame) -> list[str]:
    """What loading (and refreshing) replicate_hotset's hot set moves over the link."""
    if "prewarm_gb" not in agg.columns:
        return []
    hot = agg.filter((pl.col("policy") == "replicate_hotset") & pl.col("prewarm_gb").is_not_null())
    if hot.height == 0:
        return []
    rows = [
        [
            f"`{r['model']}`",
            f"`{r['workload']}`",
            f"{r['budget_factor']:g}",
            f"{r['prewarm_gb']:.3f}",
            f"{r['refresh_gb']:.3f}" if r["refresh_gb"] is not None else "—",
            f"{r['prewarm_s'] * 1e3:.1f}" if r["prewarm_s"] else "free",
        ]
        for r in hot.sort(SCENARIO).iter_rows(named=True)
    ]
    return [
        "### What the hot set's warm-up costs",
        "",
        "KV that `replicate_hotset` moves to warm its hot set, over all decode instances (the "
        "first set and every refresh, `memory.hotset_refresh_s`), and how long the first set "
        "takes to land when it crosses the link (`cluster.link.prewarm: link`; `free`: ready "
        "at time 0, the bytes are what a deployment would have to move; docs/model.md §1.15).",
        "",
        md_table(
            ["Model", "Workload", "Budget", "Warm-up GB", "of which refresh", "Lands in (ms)"], rows
        ),
        "",
    ]


def _bound_section(agg: pl.DataFrame) -> list[str]:
    """Each policy's share of the achievable hand-off-time reduction (metrics/bound.py)."""
    if "bound_share" not in agg.columns or agg["bound_share"].is_null().all():
        return []
    pols = _policies(agg)
    rows, best = [], None
    for key in agg.select(SCENARIO).unique().sort(SCENARIO).iter_rows():
        sub = agg.filter(
            (pl.col("model") == key[0])
            & (pl.col("workload") == key[1])
            & (pl.col("budget_factor") == key[2])
        )
        share = dict(sub.select("policy", "bound_share").iter_rows())
        bound = sub["handoff_bound_ms"].mean()
        rows.append(
            [
                f"`{key[0]}`",
                f"`{key[1]}`",
                f"{key[2]:g}",
                *[pct(share[p]) if share.get(p) is not None else "—" for p in pols],
                f"{bound:.2f}" if bound is not None else "—",
            ]
        )
        for p, v in share.items():
            if p != BASELINE and v is not None and (best is None or v > best[0]):
                best = (v, p, key)
    out = [
        "### Gap to the hindsight bound",
        "",
        "Share of the achievable reduction in unloaded hand-off time (link move or recompute "
        "of the prefix KV the decode node lacks, no queueing) that each policy reaches: "
        f"(`{BASELINE}` − policy) ÷ (`{BASELINE}` − bound), on the same admitted requests. "
        "The bound prices every request at its cheapest choice with its whole prefix "
        "resident up to the KV budget: no policy, online or offline, can go below it "
        '(docs/model.md, "The optimal bound"). Negative: worse than transferring '
        "everything.",
        "",
    ]
    if best is not None:
        v, p, key = best
        out += [
            f"Closest: `{p}` reaches {pct(v)} of the achievable hand-off-time reduction on "
            f"`{key[0]}` / `{key[1]}` at budget {key[2]:g}.",
            "",
        ]
    headers = ["Model", "Workload", "Budget", *[f"`{p}`" for p in pols], "Bound (ms)"]
    return [*out, md_table(headers, rows), ""]


def _admission_md(rec: pl.DataFrame, primary: str) -> list[str]:
    """How the recommendation of each scenario changes from ``primary`` admission to the
    others in the grid (docs/model.md "Paged admission and preemption")."""
    others = sorted(set(rec["admission"]) - {primary})
    if not others:
        return []
    keys = ["model", "workload", "budget_factor"]
    base = rec.filter(pl.col("admission") == primary).select(
        *keys, pl.col("recommended").alias("base"), pl.col("ttft_ms").alias("base_ttft")
    )
    out = [f"## Admission: {primary} against {', '.join(others)}", ""]
    for other in others:
        alt = rec.filter(pl.col("admission") == other).select(
            *keys, pl.col("recommended").alias("alt"), pl.col("ttft_ms").alias("alt_ttft")
        )
        both = base.join(alt, on=keys, how="inner").sort(keys)
        changed = both.filter(pl.col("base").fill_null("-") != pl.col("alt").fill_null("-"))
        out += [
            f"Under `{other}`, {changed.height} of {both.height} recommendations change "
            f"(a missing one: every policy unstable there).",
            "",
        ]
        if changed.height:
            rows = [
                [
                    f"`{r['model']}`",
                    f"`{r['workload']}`",
                    f"{r['budget_factor']:g}",
                    f"`{r['base']}` ({ms(r['base_ttft'])})" if r["base"] else "none (unstable)",
                    f"`{r['alt']}` ({ms(r['alt_ttft'])})" if r["alt"] else "none (unstable)",
                ]
                for r in changed.iter_rows(named=True)
            ]
            out += [md_table(["Model", "Workload", "Budget", primary, other], rows), ""]
    return out


def build_report(results: Path, report_dir: Path, plots: Path | None = None) -> str:
    from .crossover import crossover_of

    results = Path(results)
    agg = load(results, "agg")
    runs = load(results, "runs")
    # the cached tables are written only when the report goes into the results folder itself
    here = Path(report_dir).resolve() == results.resolve()
    crossover = crossover_of(results, write=here)
    rec_all = recommendations(results, agg, write=here)
    if agg.height == 0:
        raise ArtifactError(
            "agg.parquet has no rows", where=str(results / "agg.parquet"), fix="re-run the sweep"
        )
    # a grid over admission modes: every section below describes one (the seed's reserve
    # when present), and one section says how the recommendations change under the others
    agg, runs, rec = one_admission(agg), one_admission(runs), one_admission(rec_all)
    primary = agg["admission"][0] if "admission" in agg.columns else PRIMARY_ADMISSION
    meta = artifact_meta(results / "runs.parquet")
    every, agg = agg, agg.filter(pl.col("stable"))  # results sections: stable points only
    stamp = datetime.fromtimestamp((results / "agg.parquet").stat().st_mtime, tz=UTC)

    lines = [
        "# prefixbench study report",
        "",
        f"Results: `{results}` (agg.parquet of {stamp:%Y-%m-%d %H:%M} UTC).",
        "",
        *_system_md(results, every, primary),
        "## How to read this",
        "",
        HOW_TO_READ,
        "",
        "## Experimental scope",
        "",
        _scope_md(scope(runs, every), meta),
        "",
        *_stability_md(every),
        *(_results_md(agg, crossover, every) if agg.height else _NO_STABLE),
        *_recommend_md(rec),
        *tier_md(agg, TIGHT_MAX),
        *_admission_md(rec_all, primary),
    ]
    if plots is not None:
        lines += _plots_md(Path(plots), report_dir)
    return "\n".join(lines).rstrip() + "\n"


def _system_md(results: Path, agg: pl.DataFrame, admission: str) -> list[str]:
    """The report header's system line: the hardware of the sweep's first grid point, the
    models, the KV GB per decode instance over the grid, the admission and the SLOs."""
    import json

    from prefixbench.study.systemline import scenario_parts, wrap

    from ..errors import PrefixbenchError
    from .grid import build_spec

    try:
        spec = build_spec(json.loads((Path(results) / "sweep.json").read_text()))
        p = next(q for q in spec.points() if q.admission == admission)
        s = p.load()
    except (OSError, ValueError, PrefixbenchError, StopIteration):
        return []
    gb = agg["kv_budget_gb"].drop_nulls()
    kv = f"KV {gb.min():.2f}–{gb.max():.2f} GB" if len(gb) else "KV n/a"
    parts = scenario_parts(s, f"{kv} per decode instance", "rate per workload")
    parts[0] = "models " + ", ".join(sorted(set(agg["model"])))
    lines = wrap(parts, "System: ", width=10**6)
    return [*lines, ""]


def write_report(
    results: Path, out: Path | None = None, plots: Path | None = None, html: bool = False
) -> Path:
    """Write ``report.md`` (default: in ``results``); embeds the PNGs of ``plots`` if given;
    with ``html``, also a self-contained ``report.html`` beside it (figures inline)."""
    results = Path(results)
    path = Path(out) if out is not None else results / "report.md"
    text = build_report(results, path.parent, plots)
    if html:
        from .report_html import write_html

        write_html(text, path.with_suffix(".html"), path.parent)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    except OSError as e:
        raise ArtifactError(f"cannot write the report ({e.strerror})", where=str(path)) from None
    return path
