"""Every sentence `recommend` writes agrees with the numbers in its own table, also when
policies were dropped as unstable; ties are called ties and broken by memory, then
simplicity, never by name."""

from __future__ import annotations

import re

import polars as pl
from hypothesis import given, settings
from hypothesis import strategies as st

from prefixbench.study.margins import REJECT_SLACK
from prefixbench.study.recommend import SIMPLICITY, TIE_REL, recommend

POLICIES = list(SIMPLICITY)
IDENT = {"admission": "paged", "model": "m", "workload": "w", "budget_factor": 0.5}


@st.composite
def tables(draw):
    """agg and runs of one scenario: per policy a mean TTFT, rejects, replica GB and a
    stability verdict; per seed a TTFT scattered around the mean (so agg is the mean)."""
    n_seeds = draw(st.integers(1, 3))
    agg, runs = [], []
    for p in POLICIES:
        ttft = draw(st.floats(5.0, 500.0))
        noise = [draw(st.floats(-3.0, 3.0)) for _ in range(n_seeds)]
        noise = [x - sum(noise) / n_seeds for x in noise]
        gb = draw(st.sampled_from([0.0, 0.0005, 0.3, 2.5]))
        row = {
            **IDENT, "policy": p, "ttft_mean_ms": ttft, "reject_rate": draw(st.sampled_from([0.0, 0.004, 0.2])),
            "mean_replica_kv_gb": gb, "kv_budget_gb": 4.0, "replica_hit_rate": 0.5,
            "stable": draw(st.booleans()) if p != "replicate_tiered" else True,
            "ttft_p50_ms": ttft, "ttft_p99_ms": 2 * ttft, "tpot_mean_ms": 10.0,
            "tpot_p99_ms": 20.0, "slo_attainment": 0.9, "host_hit_rate": 0.0,
            "n_seeds": n_seeds, "capacity_rps": 1.0, "rho_bottleneck": 0.5,
            "saturated_stage": None, "bottleneck_stage": None,
        }  # fmt: skip
        agg.append(row)
        for seed, x in enumerate(noise):
            runs.append({**IDENT, "policy": p, "seed": seed, "ttft_mean_ms": ttft + x,
                         "reject_rate": row["reject_rate"], "mean_replica_kv_gb": gb,
                         "kv_budget_gb": 4.0})  # fmt: skip
    return pl.DataFrame(agg), pl.DataFrame(runs)


def _check_claims(rec: dict, by_policy: dict[str, dict], unstable: set[str]) -> None:
    reason = rec["reason"]
    win = by_policy[rec["recommended"]]
    main, _, dropped = reason.partition("; not ranked, unstable: ")
    assert set(filter(None, dropped.split(", "))) == unstable
    for name in unstable:  # a dropped policy is never a term of comparison
        assert name not in re.sub(r"\b" + re.escape(rec["recommended"]) + r"\b", "", main)
    # never vacuous: the memory held is always stated, and a comparison when there is one
    assert ("holds no replica KV" in main) != bool(re.search(r"holds [\d.]+ GB", main))
    if len(by_policy) > 1:
        assert "mean TTFT" in main
    if "holds no replica KV" in main:
        assert win["mean_replica_kv_gb"] < 1e-3
    for gb in re.findall(r"holds ([\d.]+) GB of replica KV", main):
        assert (
            float(gb) == round(win["mean_replica_kv_gb"], 2) and win["mean_replica_kv_gb"] >= 1e-3
        )
    for a, word, other, b in re.findall(
        r"mean TTFT ([\d.]+) ms, (lower than|higher than|equal to) (\w+)'s ([\d.]+) ms", main
    ):
        assert other in by_policy  # stable
        assert float(a) == round(win["ttft_mean_ms"], 1)
        assert float(b) == round(by_policy[other]["ttft_mean_ms"], 1)
        want = (
            "lower than"
            if float(a) < float(b)
            else "higher than"
            if float(a) > float(b)
            else "equal to"
        )
        assert word == want
    for r in re.findall(r"rejects ([\d.]+)% of requests", main):
        assert abs(float(r) / 100 - win["reject_rate"]) < 0.0006


@settings(max_examples=150, deadline=None)
@given(tables(), st.sampled_from(["balanced", "latency", "memory"]))
def test_every_claim_agrees_with_the_table(t, objective):
    agg, runs = t
    (rec,) = recommend(agg, runs, objective).to_dicts()
    rows = agg.to_dicts()
    by_policy = {r["policy"]: r for r in rows if r["stable"]}
    unstable = {r["policy"] for r in rows if not r["stable"]}
    assert rec["recommended"] in by_policy
    _check_claims(rec, by_policy, unstable)
    if rec["tie"]:
        tied = [by_policy[p] for p in rec["tied_with"].split(", ")]
        win = by_policy[rec["recommended"]]
        # broken by fewer replica GB held, then the simpler policy; never by name
        for o in tied:
            key_w = (round(win["mean_replica_kv_gb"], 3), SIMPLICITY.index(win["policy"]))
            key_o = (round(o["mean_replica_kv_gb"], 3), SIMPLICITY.index(o["policy"]))
            assert key_w < key_o
    elif (
        rec["runner_up"] is not None
        and rec["margin_ms"] == rec["margin_ms"]
        and by_policy[rec["runner_up"]]["reject_rate"]
        <= by_policy[rec["recommended"]]["reject_rate"] + REJECT_SLACK
    ):  # a runner-up that rejects more is not a TTFT tie: the winner admits more
        m, ci = rec["margin_ms"], rec["margin_ci95_ms"]
        assert abs(m) >= TIE_REL * by_policy[rec["recommended"]]["ttft_mean_ms"]
        assert not (ci == ci and abs(m) <= ci)


def test_an_exact_tie_is_a_tie_broken_by_simplicity_not_name():
    """Two policies with identical figures: cost_aware comes first alphabetically, but the
    simpler transfer_per_request is recommended, and the output says it is a tie."""
    agg, runs = [], []
    for p in ("cost_aware", "transfer_per_request"):
        row = {
            **IDENT,
            "policy": p,
            "ttft_mean_ms": 100.0,
            "reject_rate": 0.0,
            "mean_replica_kv_gb": 0.0,
            "kv_budget_gb": 4.0,
            "stable": True,
            "n_seeds": 3,
        }
        agg.append(row)
        runs += [
            {
                **IDENT,
                "policy": p,
                "seed": s,
                "ttft_mean_ms": 100.0,
                "reject_rate": 0.0,
                "mean_replica_kv_gb": 0.0,
                "kv_budget_gb": 4.0,
            }
            for s in range(3)
        ]
    (rec,) = recommend(pl.DataFrame(agg), pl.DataFrame(runs), "balanced").to_dicts()
    assert rec["tie"] and rec["recommended"] == "transfer_per_request"
    assert rec["tied_with"] == "cost_aware"
