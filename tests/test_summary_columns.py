"""The summary from the engine's numpy columns (metrics/runcols.py) against the definition:
polars queries over the per-request table ``requests_frame`` writes, figure by figure and to
the bit; the request table written in chunks against the whole table; the stability
verdict's inputs from the columns against those from the table."""

from __future__ import annotations

import math

import numpy as np
import polars as pl
import pytest
from polars.testing import assert_frame_equal

from prefixbench.metrics import stability
from prefixbench.metrics.runcols import RunCols
from prefixbench.metrics.summary import request_chunks, requests_frame, summarize_result
from prefixbench.scenario.loader import load_scenario
from prefixbench.system.runner import prepare, simulate_policy

MS = 1e3
CASES = [
    ("enterprise_hotset", [], "replicate_all_lru"),
    ("enterprise_hotset", ["cluster.mode=colocated"], "replicate_all_lru"),
    ("medium_chat", ["memory.admission=paged", "memory.budget_factor=0.3"], "replicate_tiered"),
    ("tool_call", ["cluster.link.streaming=layerwise"], "cost_aware"),
]


@pytest.fixture(scope="module", params=CASES, ids=lambda c: f"{c[0]}{'+' if c[1] else ''}")
def case(request):
    name, sets, policy = request.param
    s = load_scenario(name, ["run.requests=900", "run.warmup_requests=150", *sets])
    prep = prepare(s)
    res = simulate_policy(prep, policy, track_gaps=True)
    return prep, policy, res, requests_frame(prep, policy, res)


def _ref(lf: pl.LazyFrame, **exprs: pl.Expr) -> dict:
    """Aggregates of ``lf`` as one polars query over its rows, in one chunk (the definition
    the summary's figures must match)."""
    return lf.collect().rechunk().select(**exprs).row(0, named=True)


def _pcts(col: str, name: str) -> dict:
    c = pl.col(col)
    out = {f"{name}_mean_ms": c.mean()}
    for q in (50, 90, 99):
        out[f"{name}_p{q}_ms"] = c.quantile(q / 100, "linear")
    return out


def _latency_ref(done: pl.LazyFrame, s) -> dict:
    handed = "t_prefill_start" if s.cluster.link.streaming == "layerwise" else "t_prefill_end"
    handoff = s.cluster.mode != "colocated"
    c = pl.col
    stages = {
        "prefill_queue_ms": ((c("t_prefill_start") - c("arrival")) * MS).mean(),
        "prefill_ms": ((c("t_prefill_end") - c("t_prefill_start")) * MS).mean(),
        "recompute_wait_ms": ((c("t_recompute_start") - c("t_admit")) * MS).fill_nan(0.0).mean(),
        "recompute_ms": ((c("t_recompute_end") - c("t_recompute_start")) * MS).fill_nan(0.0).mean(),
        "decode_queue_ms": (
            (
                c("t_decode_start")
                - pl.max_horizontal(
                    c("t_transfer_end").fill_nan(c("t_prefill_end")),
                    c("t_recompute_end").fill_nan(0.0),
                )
            )
            * MS
        ).mean(),
        "first_iteration_ms": ((c("t_first_token") - c("t_decode_start")) * MS).mean(),
        "itl_max_p50_ms": (c("max_token_gap") * MS).quantile(0.5, "linear"),
        "itl_max_p99_ms": (c("max_token_gap") * MS).quantile(0.99, "linear"),
    }
    if handoff:
        stages["admission_wait_ms"] = ((c("t_admit") - c(handed)) * MS).mean()
        stages["link_wait_ms"] = ((c("t_transfer_start") - c("t_admit")) * MS).mean()
        stages["transfer_ms"] = ((c("t_transfer_end") - c("t_transfer_start")) * MS).mean()
    return _ref(
        done,
        **_pcts("ttft_ms", "ttft"),
        **_pcts("ttft_prefill_ms", "ttft_prefill"),
        **_pcts("tpot_ms", "tpot"),
        **_pcts("e2e_ms", "e2e"),
        **stages,
        preempted_fraction=(c("preemptions") > 0).mean(),
        preemptions_per_request=c("preemptions").cast(pl.Float64).mean(),
        preempt_delay_mean_ms=(c("preempt_delay_s") * MS).mean(),
        preempt_lost_per_request=c("preempt_tokens").cast(pl.Float64).mean(),
    )


def _admitted_ref(adm: pl.LazyFrame) -> dict:
    c = pl.col
    r = _ref(
        adm,
        shared_request_fraction=(c("replica_hit_tokens") > 0).mean(),
        replica_hit_rate=c("replica_hit_tokens").sum() / c("prompt_tokens").sum(),
        prefill_hit_rate=c("prefill_hit_tokens").sum() / c("prompt_tokens").sum(),
        l3_prefill_rate=c("l3_prefill_tokens").sum() / c("prompt_tokens").sum(),
        transfer_mb_per_request=c("transfer_bytes").mean() / 1e6,
        host_mb_per_request=c("host_bytes").mean() / 1e6,
        recompute_tokens_per_request=c("recompute_tokens").mean(),
        recompute_tokens_total=c("recompute_tokens").sum(),
        _n=c("chain_blocks").sum(),
        _hbm=c("hbm_hit_blocks").sum(),
    )
    n, hbm = r.pop("_n"), r.pop("_hbm")
    r["hbm_hit_rate"] = hbm / n if n else None
    return r


def _same(a, b) -> bool:
    """Equal to the bit (NaN equal to NaN), None only where None."""
    if a is None or b is None:
        return a is None and b is None
    a, b = float(a), float(b)
    return (math.isnan(a) and math.isnan(b)) or a == b


def test_every_figure_matches_the_table_queries(case):
    prep, policy, res, df = case
    s = prep.scenario
    row = summarize_result(prep, policy, res)
    steady = df.lazy().filter(~pl.col("warmup"))
    done = steady.filter(pl.col("outcome") == "completed")
    ref = _latency_ref(done, s)
    ref.update(_admitted_ref(steady.filter(pl.col("t_admit").is_not_nan())))
    counts = _ref(steady, n=pl.len(), done=(pl.col("outcome") == "completed").sum())
    ref.update(steady_requests=counts["n"], completed=counts["done"], requests=df.height)
    if s.cluster.mode == "colocated":
        ref.update(admission_wait_ms=None, link_wait_ms=None, transfer_ms=None)
    assert row["completed"] > 100  # the run did something worth comparing
    bad = {k: (row[k], v) for k, v in ref.items() if not _same(row[k], v)}
    assert not bad


def test_derived_columns_are_the_tables(case):
    prep, policy, res, df = case
    rows = RunCols(prep, res).all()
    for name in ("ttft_ms", "ttft_prefill_ms", "e2e_ms", "transfer_bytes", "host_bytes"):
        assert np.array_equal(rows[name], df[name].to_numpy(), equal_nan=True), name
    tpot = df["tpot_ms"].fill_null(np.nan).to_numpy()
    assert np.array_equal(rows["tpot_ms"], tpot, equal_nan=True)
    assert np.array_equal(rows["chain_blocks"], df["chain_blocks"].to_numpy())


def test_chunks_make_the_whole_table(case):
    prep, policy, res, df = case
    ranges = request_chunks(len(prep.requests), rows=257)
    assert ranges == [(0, 257), (257, 514), (514, 771), (771, 900)]
    chunks = [requests_frame(prep, policy, res, lo, hi) for lo, hi in ranges]
    assert_frame_equal(pl.concat(chunks), df, check_exact=True)


def test_verdict_inputs_from_columns_are_the_tables(case):
    prep, policy, res, df = case
    a = stability.Cols.of_frame(df)
    b = stability.Cols.of_run(RunCols(prep, res))
    assert np.array_equal(a.completed, b.completed) and np.array_equal(a.warmup, b.warmup)
    steady_a, steady_b = a.rows(~a.warmup), b.rows(~b.warmup)
    for k in stability.COLUMNS:
        assert np.array_equal(a[k], b[k], equal_nan=True), k
        assert np.array_equal(steady_a[k], steady_b[k], equal_nan=True), k
    assert stability.assess(prep, a, res.stats) == stability.assess(prep, b, res.stats)


def _busy_by_search(cost, budget, new, cached) -> float:
    """The batches cut one search at a time from each batch's first request (the rule)."""
    csum = np.concatenate(([0], np.cumsum(new)))
    starts, i = [], 0
    while i < len(new):
        starts.append(i)
        i = max(int(np.searchsorted(csum, csum[i] + budget, side="right")) - 1, i + 1)
    return float(stability.prefill_times(cost, new, cached, np.asarray(starts)).sum())


def test_prefill_batches_are_the_rule(case):
    prep = case[0]
    cost, rng = prep.base.prefill_cost, np.random.default_rng(7)
    for budget in (1, 512, 8192, 10**9):
        new = rng.integers(0, 6000, 700)
        cached = rng.integers(0, 3000, 700)
        assert stability._prefill_busy(cost, budget, new, cached) == _busy_by_search(
            cost, budget, new, cached
        )
