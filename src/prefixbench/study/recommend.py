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
# a mean-TTFT difference below 2% of the winner's is a tie, as one whose 95% CI reaches 0
TIE_REL = 0.02
# simplest first: what a tie goes to after fewer decode GB held (the registry's order
# once it carries one); never the name
SIMPLICITY = (
    "transfer_per_request",
    "recompute_on_decode",
    "replicate_hotset",
    "replicate_all_lru",
    "cost_aware",
    "replicate_tiered",
)
NO_REPLICAS_GB = 1e-3  # below 1 MB of replica KV held: the policy holds none

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
        "tie": pl.Boolean,
        "tied_with": pl.Utf8,
        "kv_budget_gb": pl.Float64,
        "ttft_p50_ms": pl.Float64,
        "ttft_p99_ms": pl.Float64,
        "tpot_mean_ms": pl.Float64,
        "tpot_p50_ms": pl.Float64,
        "tpot_p99_ms": pl.Float64,
        "slo_attainment": pl.Float64,
        "replica_kv_gb": pl.Float64,
    },
)


def simplicity(policy: str) -> int:
    return SIMPLICITY.index(policy) if policy in SIMPLICITY else len(SIMPLICITY)


def rank(rows: list[dict], objective: str) -> list[str]:
    """Policies best first under ``objective`` (rows: one per policy, aggregated metrics);
    equal scores go to fewer replica GB held, then the simpler policy (never the name)."""
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
    order = sorted(rows, key=lambda r: (*key(r), r["mean_replica_kv_gb"], simplicity(r["policy"])))
    return [r["policy"] for r in order]


def is_tie(margin: float, ci: float, winner_ms: float) -> bool:
    """A margin whose 95% CI reaches 0, or below TIE_REL of the winner's mean TTFT."""
    if not math.isfinite(margin):
        return False
    return (math.isfinite(ci) and abs(margin) <= ci) or abs(margin) < TIE_REL * winner_ms


def break_tie(tied: list[dict]) -> list[dict]:
    """Tied policies in the order the rule prefers: fewer replica GB held on decode, then
    the simpler policy (SIMPLICITY)."""
    return sorted(tied, key=lambda r: (round(r["mean_replica_kv_gb"], 3), simplicity(r["policy"])))


# ---------------------------------------------------------------- reasons from the table


def claims(win: dict, by_policy: dict[str, dict], up: str | None) -> list[dict]:
    """What the reason says, as figures taken from the stable rows (each one checkable):
    the winner's replica KV held (or none), its mean TTFT against transfer_per_request (or,
    when that is unstable, the runner-up), and its reject rate when it rejects."""
    out: list[dict] = []
    gb = win["mean_replica_kv_gb"]
    if gb >= NO_REPLICAS_GB:
        out.append({
            "kind": "replicas_held", "policy": win["policy"], "gb": gb,
            "share": gb / max(win["kv_budget_gb"], 1e-12),
            "hit": win.get("replica_hit_rate") or 0.0,
        })  # fmt: skip
    else:
        out.append({"kind": "no_replicas", "policy": win["policy"], "gb": gb})
    other = "transfer_per_request" if "transfer_per_request" in by_policy else up
    if other == win["policy"]:
        other = up
    if other is not None and other != win["policy"]:
        o = by_policy[other]
        out.append({
            "kind": "ttft_vs", "policy": win["policy"], "other": other,
            "ms": win["ttft_mean_ms"], "other_ms": o["ttft_mean_ms"],
        })  # fmt: skip
    if win["reject_rate"] > 0:
        out.append({"kind": "rejects", "policy": win["policy"], "rate": win["reject_rate"]})
    host = win.get("host_hit_rate")
    if host:
        out.append({"kind": "host_hits", "policy": win["policy"], "rate": host})
    return out


def claim_text(c: dict) -> str:
    k = c["kind"]
    if k == "replicas_held":
        return (
            f"holds {c['gb']:.2f} GB of replica KV ({c['share']:.0%} of the budget), "
            f"serving {c['hit']:.0%} of prompt tokens"
        )
    if k == "no_replicas":
        return "holds no replica KV"
    if k == "ttft_vs":
        a, b = f"{c['ms']:.1f}", f"{c['other_ms']:.1f}"  # the word agrees with the figures
        d = float(a) - float(b)
        word = "lower than" if d < 0 else ("higher than" if d > 0 else "equal to")
        return (
            f"mean TTFT {c['ms']:.1f} ms, {word} {c['other']}'s {c['other_ms']:.1f} ms"
        )
    if k == "rejects":
        return f"rejects {c['rate']:.1%} of requests"
    if k == "host_hits":
        return f"host DRAM served {c['rate']:.0%} of chain blocks"
    raise ValueError(k)


def _reason(win: dict, by_policy: dict[str, dict], up: str | None = None) -> str:
    return "; ".join(claim_text(c) for c in claims(win, by_policy, up))


# ---------------------------------------------------------------- one row per scenario


def _per_seed(sel: pl.DataFrame, by_policy: dict, objective: str, win: str, others: list[str]):
    """Each seed's own winner, and per other policy the paired TTFT differences (other −
    winner) over the seeds where both ran."""
    votes, diffs = [], {o: [] for o in others}
    for _, srows in sel.group_by("seed", maintain_order=True):
        d = [r for r in srows.to_dicts() if r["policy"] in by_policy]
        if not d:  # no stable policy in this seed: it has no vote
            continue
        votes.append(rank(d, objective)[0])
        m = {r["policy"]: r["ttft_mean_ms"] for r in d}
        for o in others:
            if win in m and o in m:
                diffs[o].append(m[o] - m[win])
    return votes, diffs


def _scenario_row(ident: dict, every: list[dict], sel: pl.DataFrame, objective: str) -> dict:
    rows = [r for r in every if r.get("stable", True)]
    unstable = sorted(r["policy"] for r in every if not r.get("stable", True))
    if not rows:
        return _refusal(ident, objective, every)
    by_policy = {r["policy"]: r for r in rows}
    order = rank(rows, objective)
    first = order[0]
    votes, diffs = _per_seed(sel, by_policy, objective, first, order[1:])
    margins = {o: paired_margin(diffs[o]) for o in order[1:]}
    f = by_policy[first]
    tied = [
        o for o in order[1:]
        if is_tie(*margins[o], f["ttft_mean_ms"])
        and by_policy[o]["reject_rate"] <= f["reject_rate"] + REJECT_SLACK
    ]  # fmt: skip
    win = break_tie([by_policy[p] for p in [first, *tied]])[0]["policy"] if tied else first
    rest = [p for p in order if p != win]
    up = rest[0] if rest else None
    if win != first:  # the margin is measured from the policy the tie went to
        votes, diffs = _per_seed(sel, by_policy, objective, win, rest)
        margins = {o: paired_margin(diffs[o]) for o in rest}
    mean, ci = margins[up] if up else (math.nan, math.nan)
    w = by_policy[win]
    reason = _reason(w, by_policy, up)
    if unstable:
        reason += f"; not ranked, unstable: {', '.join(unstable)}"
    return {
        **ident,
        "objective": objective,
        "recommended": win,
        "runner_up": up,
        "ttft_ms": w["ttft_mean_ms"],
        "runner_up_ttft_ms": by_policy[up]["ttft_mean_ms"] if up else math.nan,
        "margin_ms": mean,
        "margin_ci95_ms": ci,
        "seeds_agree": len(set(votes)) <= 1,
        "n_seeds": len(votes),
        "reason": reason,
        "unstable_policies": ", ".join(unstable),
        "tie": bool(tied),
        "tied_with": ", ".join(p for p in [first, *tied] if p != win),
        **_absolute(w),
        "tpot_p50_ms": _seed_mean(sel, win, "tpot_p50_ms"),
    }


def _seed_mean(sel: pl.DataFrame, policy: str, col: str) -> float | None:
    """Mean over seeds of a runs column the aggregate does not carry (None if absent)."""
    if col not in sel.columns:
        return None
    v = sel.filter(pl.col("policy") == policy)[col].drop_nulls()
    return float(v.mean()) if len(v) else None


def _absolute(w: dict) -> dict:
    """The recommended policy's own figures (mean over seeds)."""
    return {
        "kv_budget_gb": w.get("kv_budget_gb"),
        "ttft_p50_ms": w.get("ttft_p50_ms"),
        "ttft_p99_ms": w.get("ttft_p99_ms"),
        "tpot_mean_ms": w.get("tpot_mean_ms"),
        "tpot_p50_ms": None,
        "tpot_p99_ms": w.get("tpot_p99_ms"),
        "slo_attainment": w.get("slo_attainment"),
        "replica_kv_gb": w.get("mean_replica_kv_gb"),
    }


def recommend(agg: pl.DataFrame, runs: pl.DataFrame, objective: str = "balanced") -> pl.DataFrame:
    """One recommendation per model × workload × budget in ``agg``."""
    if "admission" not in agg.columns:  # results from before the admission axis
        agg = agg.with_columns(pl.lit("reserve").alias("admission"))
    if "admission" not in runs.columns:
        runs = runs.with_columns(pl.lit("reserve").alias("admission"))
    keys = ["admission", *SCENARIO]
    out = []
    for key, grp in agg.group_by(keys, maintain_order=True):
        ident = dict(zip(keys, key, strict=True))
        sel = runs.filter(*[pl.col(k) == v for k, v in ident.items()])
        out.append(_scenario_row(ident, grp.to_dicts(), sel, objective))
    return pl.DataFrame(out, schema=schema_of("recommendations")).sort(keys)


def schema_of(kind: str) -> dict:
    from prefixbench.io.artifacts import schema

    return schema(kind)


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
        "tie": False,
        "tied_with": "",
        **{k: None for k in _absolute({})},
        "kv_budget_gb": rows[0].get("kv_budget_gb"),
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
    from prefixbench.errors import ArtifactError

    keep_file = True
    if path.is_file():
        try:
            rec = read_artifact(path, "recommendations")
        except ArtifactError:  # a file from an older version: computed and written again
            rec = None
        if rec is None:
            keep_file = False
        else:
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


DEFAULT_WORKLOADS = ["enterprise_hotset", "long_context_support", "medium_chat", "tool_call"]


def _grid_of(folder: Path) -> dict | None:
    import json

    try:
        data = json.loads((folder / "sweep.json").read_text())
    except (OSError, ValueError, RecursionError):
        return None
    return data if isinstance(data, dict) else None


def _covers(folder: Path, name: str, budget: float, wanted, overrides, admission) -> bool:
    """Whether the results in ``folder`` answer the question: this model, budget and
    workloads, run with the same --set overrides and admission."""
    from prefixbench.io.artifacts import read_artifact

    if not (folder / "agg.parquet").exists():
        return False
    grid = _grid_of(folder) or {}
    if list(grid.get("set", [])) != list(overrides):
        return False
    agg = read_artifact(folder / "agg.parquet", "agg")
    have = agg.filter(
        (pl.col("model") == name)
        & ((pl.col("budget_factor") - budget).abs() < 1e-9)
        & (pl.col("admission") == admission)
    )
    return set(wanted) <= set(have["workload"].to_list())


def _own_folder(base: Path, model: str, budget: float, overrides, admission) -> Path:
    """recommend's cache for one question: model, budget, admission and --set values."""
    from .grid import stable_id

    tag = f"{model}-{budget:g}"
    if admission != "paged":
        tag += f"-{admission}"
    if overrides:
        tag += f"-{stable_id(*overrides)[:8]}"
    return base / "recommend" / tag


def run_recommend(
    model: str,
    budget: float,
    *,
    workloads: list[str] | None = None,
    objective: str = "balanced",
    results: Path | None = None,
    jobs: int | None = None,
    overrides: list[str] | tuple = (),
    admission: str = "paged",
    on_start=None,
    on_point=None,
) -> tuple[pl.DataFrame, Path]:
    """Recommendations for ``model`` at ``budget`` (with ``overrides`` on every scenario):
    from existing results (``results``, by default the ``results/`` folder `prefixbench
    sweep` writes) when they cover it, else by running just the scenarios needed (3 seeds,
    all policies) into ``results/recommend/``. Writes recommendations.parquet there."""
    from prefixbench.io.artifacts import read_artifact, write_atomic

    from ..catalog import get_model
    from .grid import build_spec
    from .sweep import run_sweep

    if objective not in OBJECTIVES:
        raise ValueError(objective)
    spec = get_model(model)
    # a config.json path stays a path: the sweep loads it, and results carry it as the model
    name = spec.name if spec.name == model.strip().lower() else model
    wanted = workloads or DEFAULT_WORKLOADS
    folder = Path(results) if results else Path("results")  # `prefixbench sweep`'s default
    if not _covers(folder, name, budget, wanted, overrides, admission):
        folder = _own_folder(Path(results or "results"), spec.name, budget, overrides, admission)
        from prefixbench.scenario.models import POLICIES

        grid = build_spec({
            "models": [name], "budgets": [budget], "workloads": wanted,
            "policies": list(POLICIES), "admissions": [admission], "set": list(overrides),
        })  # fmt: skip
        # this folder is recommend's own cache for the question: other workloads asked
        # for later are added to it, not refused as "a different grid"
        run_sweep(grid, folder, jobs=jobs, force=True, on_start=on_start, on_point=on_point)
    agg = read_artifact(folder / "agg.parquet", "agg")
    runs = read_artifact(folder / "runs.parquet", "runs")
    rec = recommend(agg, runs, objective)
    path = write_atomic(rec, folder / "recommendations.parquet", "recommendations")
    sel = rec.filter(
        (pl.col("model") == name)
        & ((pl.col("budget_factor") - budget).abs() < 1e-9)
        & (pl.col("admission") == admission)
        & pl.col("workload").is_in(wanted)
    )
    return sel, path


# ---------------------------------------------------------------- in the user's terms


def scenarios_of(sel: pl.DataFrame, overrides, admission: str) -> dict:
    """Each recommended scenario as it ran (point with seed 0), by workload."""
    from .grid import Point

    out = {}
    for r in sel.iter_rows(named=True):
        p = Point(r["model"], r["workload"], r["budget_factor"], 0, tuple(overrides),
                  admission=admission)  # fmt: skip
        out[r["workload"]] = p.load()
    return out


def meets_slo(row: dict, slo) -> bool:
    """TTFT p99 and TPOT p99 within the scenario's SLOs."""
    return (row.get("ttft_p99_ms") or math.inf) <= slo.ttft_ms and (
        row.get("tpot_p99_ms") or 0.0
    ) <= slo.tpot_ms


def slo_sentence(rec: dict, rows: list[dict], s) -> str:
    """Whether the recommended policy meets the SLOs, said plainly, from the stable rows."""
    from prefixbench.study.systemline import offered_rate, rate_text

    slo = s.slo
    goal = f"TTFT p99 ≤ {slo.ttft_ms:g} ms and TPOT p99 ≤ {slo.tpot_ms:g} ms"
    stable = [r for r in rows if r.get("stable", True)]
    if rec.get("recommended") is None or not stable:
        return f"no policy is stable at {rate_text(offered_rate(s))}"
    win = next(r for r in stable if r["policy"] == rec["recommended"])
    if meets_slo(win, slo):
        return f"meets {goal}"
    ok = [r for r in stable if meets_slo(r, slo)]
    if ok:
        best = min(ok, key=lambda r: r["ttft_p99_ms"])
        return (
            f"misses {goal} (TTFT p99 {win['ttft_p99_ms']:.0f} ms); {best['policy']} meets "
            f"them (TTFT p99 {best['ttft_p99_ms']:.0f} ms)"
        )
    best = min(stable, key=lambda r: r["ttft_p99_ms"])
    return (
        f"no policy meets {goal} at {rate_text(offered_rate(s))}; the best reaches TTFT p99 "
        f"{best['ttft_p99_ms']:.0f} ms, TPOT p99 {best['tpot_p99_ms']:.1f} ms "
        f"({best['policy']}, SLO attainment {best['slo_attainment']:.0%})"
    )


def tie_sentence(rec: dict) -> str | None:
    """``tie: A ≈ B within ±x ms`` and the rule that broke it, or None."""
    if not rec.get("tie"):
        return None
    ci = rec.get("margin_ci95_ms")
    m = rec.get("margin_ms")
    width = ci if ci is not None and math.isfinite(ci) else abs(m or 0.0)
    tied = rec["tied_with"]
    return (
        f"tie: {rec['recommended']} ≈ {tied} within ±{width:.1f} ms (95% CI, or under "
        f"{TIE_REL:.0%} of the mean TTFT); broken by fewer decode GB held "
        f"({rec['replica_kv_gb']:.2f} GB of replicas), then the simpler policy"
    )
