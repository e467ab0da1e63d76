"""Which policy to use per scenario, by a written rule (docs/study.md), with its margin.

Rules (``objective``):
- eligibility (latency, memory): a policy whose mean reject rate exceeds the lowest by more
  than 1 percentage point is not eligible — its TTFT only counts the requests it admitted.
- ``latency``: lowest mean TTFT among eligible policies.
- ``memory``: least mean replica KV among eligible policies within 10% of the best mean TTFT.
- ``balanced``: lowest score = TTFT / best TTFT + 5 × (reject rate − lowest reject rate)
  + 0.25 × mean replica KV / KV budget.
The margin is the paired per-seed difference in mean TTFT (runner-up − recommended) with a
95% Student-t interval; ``seeds_agree`` says whether the rule picks the same policy on
every seed alone.

Only stable rows are ranked (docs/model.md, "Stability"): an overloaded policy's latency is
not a steady state. When no policy is stable there is no recommendation; the reason names
the stage that saturates and the rate below which it would be stable.
"""

from __future__ import annotations

import math
from pathlib import Path

import polars as pl

from prefixbench.io.artifacts import register

from .margins import REJECT_SLACK, paired_margin

OBJECTIVES = ("balanced", "latency", "memory")
TTFT_SLACK = 0.10
W_REJECT = 5.0
W_MEMORY = 0.25
SCENARIO = ["model", "workload", "budget_factor"]

register(
    "recommendations",
    {
        "admission": pl.Utf8,
        "model": pl.Utf8,
        "workload": pl.Utf8,
        "budget_factor": pl.Float64,
        "objective": pl.Utf8,
        "recommended": pl.Utf8,
        "runner_up": pl.Utf8,
        "ttft_ms": pl.Float64,
        "runner_up_ttft_ms": pl.Float64,
        "margin_ms": pl.Float64,
        "margin_ci95_ms": pl.Float64,
        "seeds_agree": pl.Boolean,
        "n_seeds": pl.Int64,
        "reason": pl.Utf8,
        "unstable_policies": pl.Utf8,
    },
)


def rank(rows: list[dict], objective: str) -> list[str]:
    """Policies best first under ``objective`` (rows: one per policy, aggregated metrics)."""
    best_rej = min(r["reject_rate"] for r in rows)
    eligible = [r for r in rows if r["reject_rate"] <= best_rej + REJECT_SLACK]
    best_ttft = min(r["ttft_mean_ms"] for r in eligible)
    if objective == "latency":
        key = lambda r: (r not in eligible, r["ttft_mean_ms"], r["reject_rate"])  # noqa: E731
    elif objective == "memory":
        key = lambda r: (  # noqa: E731
            r not in eligible or r["ttft_mean_ms"] > best_ttft * (1 + TTFT_SLACK),
            r["mean_replica_kv_gb"],
            r["ttft_mean_ms"],
        )
    elif objective == "balanced":
        best_all = min(r["ttft_mean_ms"] for r in rows)
        key = lambda r: (  # noqa: E731
            r["ttft_mean_ms"] / best_all
            + W_REJECT * (r["reject_rate"] - best_rej)
            + W_MEMORY * r["mean_replica_kv_gb"] / max(r["kv_budget_gb"], 1e-12),
        )
    else:
        raise ValueError(objective)
    return [r["policy"] for r in sorted(rows, key=lambda r: (*key(r), r["policy"]))]


def _reason(win: dict, by_policy: dict[str, dict]) -> str:
    base = by_policy.get("transfer_per_request")
    p = win["policy"]
    if p.startswith("replicate") and base:
        change = win["ttft_mean_ms"] / base["ttft_mean_ms"] - 1 if base["ttft_mean_ms"] else 0.0
        rej = base["reject_rate"] - win["reject_rate"]
        extra = f" and {rej:.1%} fewer rejects" if rej > 0.005 else ""
        host = win.get("host_hit_rate")  # replicate_tiered: what the host tier added
        tier = f"; host DRAM served {host:.0%} of chain blocks" if host else ""
        return (
            f"replicas serve {win['replica_hit_rate']:.0%} of prompt tokens: mean TTFT {change:+.0%} "
            f"vs transfer{extra}, for {win['mean_replica_kv_gb']:.2f} GB of replica KV "
            f"({win['mean_replica_kv_gb'] / max(win['kv_budget_gb'], 1e-12):.0%} of the budget)"
            + tier
        )
    if p == "recompute_on_decode":
        return (
            f"rebuilding the prefix on decode ({win['recompute_tokens_per_request']:.0f} tokens) is cheaper "
            f"than moving it: mean TTFT {win['ttft_mean_ms']:.1f} ms"
        )
    reps = [
        by_policy[k]
        for k in ("replicate_all_lru", "replicate_hotset", "replicate_tiered")
        if k in by_policy
    ]
    if reps and win["reject_rate"] > 0.02:
        r = min(reps, key=lambda x: x["ttft_mean_ms"])
        return (
            f"the budget already rejects {win['reject_rate']:.0%} of requests; replicas would take "
            f"{r['mean_replica_kv_gb'] / max(r['kv_budget_gb'], 1e-12):.0%} of it for a "
            f"{r['ttft_mean_ms'] / win['ttft_mean_ms'] - 1:+.0%} TTFT change"
        )
    if reps:
        r = min(reps, key=lambda x: x["ttft_mean_ms"])
        return (
            f"replicas would not pay: best replica policy {r['policy']} gives TTFT "
            f"{r['ttft_mean_ms']:.1f} ms vs {win['ttft_mean_ms']:.1f} ms at {r['mean_replica_kv_gb']:.2f} GB"
        )
    return f"lowest score: mean TTFT {win['ttft_mean_ms']:.1f} ms, reject rate {win['reject_rate']:.1%}"


def recommend(agg: pl.DataFrame, runs: pl.DataFrame, objective: str = "balanced") -> pl.DataFrame:
    """One recommendation per model × workload × budget in ``agg``."""
    out = []
    if "admission" not in agg.columns:  # results from before the admission axis
        agg = agg.with_columns(pl.lit("reserve").alias("admission"))
    if "admission" not in runs.columns:
        runs = runs.with_columns(pl.lit("reserve").alias("admission"))
    keys = ["admission", *SCENARIO]
    for key, grp in agg.group_by(keys, maintain_order=True):
        ident = dict(zip(keys, key, strict=True))
        every = grp.to_dicts()
        rows = [r for r in every if r.get("stable", True)]
        unstable = sorted(r["policy"] for r in every if not r.get("stable", True))
        if not rows:
            out.append(_refusal(ident, objective, every))
            continue
        by_policy = {r["policy"]: r for r in rows}
        order = rank(rows, objective)
        win, up = order[0], (order[1] if len(order) > 1 else None)
        sel = runs.filter(*[pl.col(k) == v for k, v in ident.items()])
        per_seed = []
        diffs = []
        for _, srows in sel.group_by("seed", maintain_order=True):
            d = [r for r in srows.to_dicts() if r["policy"] in by_policy]
            if not d:  # no stable policy in this seed: it has no vote
                continue
            per_seed.append(rank(d, objective)[0])
            if up is not None:
                m = {r["policy"]: r["ttft_mean_ms"] for r in d}
                if win in m and up in m:
                    diffs.append(m[up] - m[win])
        mean, ci = paired_margin(diffs)
        out.append(
            {
                **ident,
                "objective": objective,
                "recommended": win,
                "runner_up": up,
                "ttft_ms": by_policy[win]["ttft_mean_ms"],
                "runner_up_ttft_ms": by_policy[up]["ttft_mean_ms"] if up else math.nan,
                "margin_ms": mean,
                "margin_ci95_ms": ci,
                "seeds_agree": len(set(per_seed)) <= 1,
                "n_seeds": len(per_seed),
                "reason": _reason(by_policy[win], by_policy)
                + (f"; not ranked, unstable: {', '.join(unstable)}" if unstable else ""),
                "unstable_policies": ", ".join(unstable),
            }
        )
    return pl.DataFrame(out, schema_overrides=_OUT_TYPES).sort(keys)


_OUT_TYPES = {"recommended": pl.Utf8, "runner_up": pl.Utf8}


def _refusal(ident: dict, objective: str, rows: list[dict]) -> dict:
    """No recommendation: every policy is unstable. Say what saturates and where it stops."""
    from prefixbench.metrics.stability import LABELS

    best = max(rows, key=lambda r: r.get("capacity_rps") or 0.0)
    stage = best.get("saturated_stage") or best.get("bottleneck_stage")
    cap = best.get("capacity_rps")
    rho = [r["rho_bottleneck"] for r in rows if r.get("rho_bottleneck") is not None]
    load = f" (ρ {min(rho):.2f}–{max(rho):.2f})" if rho else ""
    where = f"; {best['policy']} would be stable below about {cap:.3g} req/s" if cap else ""
    label = LABELS.get(stage, stage)
    verb = "saturate" if str(label).endswith("s") else "saturates"
    return {
        **ident,
        "objective": objective,
        "recommended": None,
        "runner_up": None,
        "ttft_ms": None,
        "runner_up_ttft_ms": None,
        "margin_ms": None,
        "margin_ci95_ms": None,
        "seeds_agree": False,
        "n_seeds": max(int(r["n_seeds"]) for r in rows),
        "reason": f"no recommendation: every policy is unstable, the {label} {verb}{load}{where}",
        "unstable_policies": ", ".join(sorted(r["policy"] for r in rows)),
    }


def recommendations(
    results: Path,
    agg: pl.DataFrame | None = None,
    objective: str = "balanced",
    write: bool = True,
) -> pl.DataFrame:
    """recommendations.parquet for the whole grid, computed (and written) when missing or stale.

    A file made for another objective (``recommend --objective latency``) is left alone and
    the ``objective`` table is computed in memory.
    """
    from prefixbench.io.artifacts import read_artifact, write_atomic

    from .results import load

    results = Path(results)
    agg = agg if agg is not None else load(results, "agg")
    path = results / "recommendations.parquet"
    want = set(agg.select(SCENARIO).unique().iter_rows())
    keep_file = True
    if path.is_file():
        rec = read_artifact(path, "recommendations")
        same_objective = set(rec["objective"]) == {objective}
        fresh = path.stat().st_mtime >= (results / "agg.parquet").stat().st_mtime
        if same_objective and fresh and set(rec.select(SCENARIO).iter_rows()) == want:
            return rec
        keep_file = not same_objective
    rec = recommend(agg, load(results, "runs"), objective)
    if write and not (path.is_file() and keep_file):
        from ..errors import ArtifactError

        try:
            write_atomic(rec, path, "recommendations")
        except ArtifactError:
            pass  # a read-only results folder: the table is used from memory
    return rec


# ---------------------------------------------------------------- findings


def run_recommend(
    model: str,
    budget: float,
    *,
    workloads: list[str] | None = None,
    objective: str = "balanced",
    results: Path | None = None,
    jobs: int | None = None,
    on_start=None,
    on_point=None,
) -> tuple[pl.DataFrame, Path]:
    """Recommendations for ``model`` at ``budget``: from existing results (``results``, by
    default the ``results/`` folder `prefixbench sweep` writes) when they cover it, else by
    running just the scenarios needed (3 seeds, all policies) into ``results/recommend/``.
    Writes recommendations.parquet for the whole grid of the results used."""
    from prefixbench.io.artifacts import read_artifact, write_atomic

    from ..catalog import get_model
    from .grid import build_spec
    from .sweep import run_sweep

    if objective not in OBJECTIVES:
        raise ValueError(objective)
    spec = get_model(model)
    # a config.json path stays a path: the sweep loads it, and results carry it as the model
    name = spec.name if spec.name == model.strip().lower() else model
    wanted = workloads or ["enterprise_hotset", "long_context_support", "medium_chat", "tool_call"]

    def covered(agg: pl.DataFrame) -> bool:
        have = agg.filter(
            (pl.col("model") == name) & ((pl.col("budget_factor") - budget).abs() < 1e-9)
        )
        return set(wanted) <= set(have["workload"].to_list())

    folder = Path(results) if results else Path("results")  # `prefixbench sweep`'s default
    if not (folder / "agg.parquet").exists() or not covered(
        read_artifact(folder / "agg.parquet", "agg")
    ):
        folder = Path(results or "results") / "recommend" / f"{spec.name}-{budget:g}"
        from prefixbench.scenario.models import POLICIES

        grid = build_spec(
            {"models": [name], "budgets": [budget], "workloads": wanted, "policies": list(POLICIES)}
        )
        # this folder is recommend's own cache for (model, budget): other workloads asked
        # for later are added to it, not refused as "a different grid"
        run_sweep(grid, folder, jobs=jobs, force=True, on_start=on_start, on_point=on_point)
    agg = read_artifact(folder / "agg.parquet", "agg")
    runs = read_artifact(folder / "runs.parquet", "runs")
    rec = recommend(agg, runs, objective)
    path = write_atomic(rec, folder / "recommendations.parquet", "recommendations")
    sel = rec.filter(
        (pl.col("model") == name)
        & ((pl.col("budget_factor") - budget).abs() < 1e-9)
        & pl.col("workload").is_in(wanted)
    )
    return sel, path
