"""Per-request tables and per-run summaries (BRIEF §5), computed with polars.

Definitions are in docs/model.md ("Metrics"). Steady-state statistics exclude the first
``run.warmup_requests`` requests; latency percentiles are over completed requests.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from prefixbench.engine import REASON_NAMES, Outcome, SimResult
from prefixbench.metrics.itl import itl_summary
from prefixbench.metrics.stability import assess, instance_busy
from prefixbench.metrics.utilisation import instance_figures
from prefixbench.physics.costmodel import client_overhead_ms
from prefixbench.physics.power import energy_figures
from prefixbench.system.runner import Prepared

MS = 1e3


def requests_frame(prep: Prepared, policy: str, res: SimResult) -> pl.DataFrame:
    """One row per request: inputs, every stage's timestamp, bytes, hits, outcome."""
    req = prep.requests
    n = len(req)
    cols = res.columns
    df = pl.DataFrame(
        {
            "request_id": np.arange(n, dtype=np.int64),
            "policy": pl.repeat(policy, n, dtype=pl.Utf8, eager=True),  # not a list of n
            "arrival": req.arrival,
            "prompt_tokens": req.prompt_len,
            "output_tokens": req.output_len,
            "prefix_id": req.prefix_id,
            "chain_blocks": np.diff(req.blk_ptr),
            **cols,
        }
    )
    # client-side, outside any step: per request and per prompt token (docs/model.md §2.14)
    api = client_overhead_ms(prep.scenario.efficiency, req.prompt_len)
    return df.with_columns(
        pl.col("request_id").lt(prep.scenario.run.warmup_requests).alias("warmup"),
        pl.col("outcome").replace_strict(
            {o.value: o.name.lower() for o in Outcome}, return_dtype=pl.Utf8
        ),
        pl.col("reject_reason").replace_strict(REASON_NAMES, return_dtype=pl.Utf8),
        (pl.col("transfer_tokens") * prep.kv_bpt).cast(pl.Float64).alias("transfer_bytes"),
        (pl.col("host_hit_tokens") * prep.kv_bpt).cast(pl.Float64).alias("host_bytes"),
        ((pl.col("t_first_token") - pl.col("arrival")) * MS + pl.Series(api)).alias("ttft_ms"),
        ((pl.col("t_prefill_end") - pl.col("arrival")) * MS).alias("ttft_prefill_ms"),
        ((pl.col("t_done") - pl.col("arrival")) * MS + pl.Series(api)).alias("e2e_ms"),
        pl.when(pl.col("output_tokens") > 1)
        .then((pl.col("t_done") - pl.col("t_first_token")) * MS / (pl.col("output_tokens") - 1))
        .otherwise(None)
        .alias("tpot_ms"),
    )


def goodput_rps(s, slo_ok: int, n_steady: int, window: float | None) -> float | None:
    """Requests within the SLOs per second: the SLO attainment times the offered rate —
    the nominal rate, or the measured arrival rate when a sample ran below it — so it
    never exceeds the offered rate nor the completions per second (docs/model.md,
    "Memory in GB" and "Goodput")."""
    from prefixbench.workload.offered import nominal_rate

    if not window or not n_steady:
        return None
    measured = (n_steady - 1) / window
    nominal = nominal_rate(s)
    offered = measured if nominal is None else min(nominal, measured)
    return slo_ok / n_steady * offered


def _pcts(col: str, name: str) -> list[pl.Expr]:
    c = pl.col(col)
    return [
        c.mean().alias(f"{name}_mean_ms"),
        c.quantile(0.5, "linear").alias(f"{name}_p50_ms"),
        c.quantile(0.9, "linear").alias(f"{name}_p90_ms"),
        c.quantile(0.99, "linear").alias(f"{name}_p99_ms"),
    ]


def _one(lf: pl.LazyFrame, *exprs: pl.Expr) -> dict:
    """One row of aggregates of ``lf``: only the columns the expressions read are taken,
    and a filtered ``lf`` is filtered inside the query (no copy of the whole table)."""
    names = sorted({n for e in exprs for n in e.meta.root_names()})
    # the filtered columns in one chunk, then the aggregates: the same summation as over a
    # filtered frame (a lazy filter yields a chunk per thread, and a mean over two chunks
    # can differ in the last bit)
    return lf.select(names).collect().rechunk().select(*exprs).row(0, named=True)


def _height(lf: pl.LazyFrame) -> int:
    return _one(lf, pl.len().alias("n"))["n"]


_REUSE: dict[int, tuple[object, np.ndarray]] = {}


def _reusable(prep: Prepared) -> np.ndarray:
    """Each request's tokens an unbounded cache could serve (workload/reuse.py): the same
    for every policy of a prepared workload, so computed once for all of them."""
    from prefixbench.workload.reuse import reusable_tokens

    hit = _REUSE.get(id(prep))
    if hit is not None and hit[0] is prep:
        return hit[1]
    s = prep.scenario  # a decode cache that keeps answers can serve them too (§1.10.1)
    answers = s.memory.cache_generated and s.cluster.mode != "colocated"
    tokens = reusable_tokens(prep.requests, answers)
    _REUSE.clear()  # one prepared workload at a time (its policies run together)
    _REUSE[id(prep)] = (prep, tokens)
    return tokens


def _reusable_rate(prep: Prepared, admitted: pl.LazyFrame) -> float:
    """Share of admitted prompt tokens an unbounded cache could serve (workload/reuse.py)."""
    prompt = _one(admitted, pl.col("prompt_tokens").sum())["prompt_tokens"]
    if not prompt:
        return float("nan")
    ids = admitted.select("request_id").collect()["request_id"].to_numpy()
    return float(_reusable(prep)[ids].sum() / prompt)


def _tiers(admitted: pl.LazyFrame) -> dict:
    """Where the admitted requests' chain blocks came from (docs/model.md, "Metrics"): decode
    HBM, the host tier, the L3 store, or none (sent over the link or recomputed); null with
    no chains."""
    t = _one(
        admitted,
        pl.col("chain_blocks").sum().alias("n"),
        pl.col("hbm_hit_blocks").sum().alias("hbm"),
        pl.col("host_hit_blocks").sum().alias("host"),
        pl.col("l3_hit_blocks").sum().alias("l3"),
        (pl.col("host_bytes").mean() / 1e6).alias("host_mb_per_request"),
    )
    n = t.pop("n") or 0
    out = {"host_mb_per_request": t["host_mb_per_request"]}
    for k in ("hbm", "host", "l3"):
        out[f"{k}_hit_rate"] = t[k] / n if n else None
    miss = n - t["hbm"] - t["host"] - t["l3"]
    out["miss_rate"] = miss / n if n else None  # exact, in [0, 1]
    return out


def _host_tier(st: dict, gb: float) -> dict:
    """The host tier's figures (0 for runs without one, e.g. colocated)."""
    return {
        "mean_host_kv_gb": st.get("mean_host_tokens", 0.0) * gb,
        "peak_host_kv_gb": st.get("peak_host_tokens", 0.0) * gb,
        "host_kv_gb": st.get("host_kv_tokens", 0.0) * gb,
        "host_path_gb": st.get("host_path_bytes", 0.0) / 1e9,
        "host_path_util": st.get("host_path_util", 0.0),
        "l3_gb": st.get("l3_bytes", 0.0) / 1e9,  # --- l3: the shared store (§1.13.1)
        "l3_util": st.get("l3_util", 0.0),
    }


def _if(measured: bool, expr: pl.Expr) -> pl.Expr:
    """The mean of ``expr``, or null where the stage does not exist."""
    return expr.mean() if measured else pl.lit(None, pl.Float64)


def _preemption(done: pl.LazyFrame, n_done: int) -> dict:
    """Paged admission (docs/model.md): preemptions of the completed steady requests, their
    lost work (tokens re-prefilled, or swapped to host and back) and delay."""
    if "preemptions" not in done.collect_schema().names() or not n_done:
        return {"preempted_fraction": 0.0, "preemptions_per_request": 0.0,
                "preempt_delay_mean_ms": 0.0, "preempt_lost_per_request": 0.0}  # fmt: skip
    # tokens, whatever became of them: a swap whose host memory is full recomputes its victim
    # (§1.5.2), so one run can mix both and a byte figure would mislabel the recomputed ones
    lost = pl.col("preempt_tokens").cast(pl.Float64)
    return _one(
        done,
        (pl.col("preemptions") > 0).mean().alias("preempted_fraction"),
        pl.col("preemptions").cast(pl.Float64).mean().alias("preemptions_per_request"),
        (pl.col("preempt_delay_s") * MS).mean().alias("preempt_delay_mean_ms"),
        lost.mean().alias("preempt_lost_per_request"),
    )


def _latency(done: pl.LazyFrame, s, gaps: bool) -> dict:
    """Latency percentiles and per-stage means of the completed steady requests."""
    # colocated instances have no hand-off: KV is reserved before the prefill (its wait is in
    # the prefill queue) and nothing crosses a link
    handoff = s.cluster.mode != "colocated"
    # layer-wise streaming hands off when the prefill starts (docs/model.md §1.7.1)
    handed = "t_prefill_start" if s.cluster.link.streaming == "layerwise" else "t_prefill_end"
    return _one(
        done,
        *_pcts("ttft_ms", "ttft"),
        *_pcts("ttft_prefill_ms", "ttft_prefill"),
        *_pcts("tpot_ms", "tpot"),
        *_pcts("e2e_ms", "e2e"),
        pl.col("output_tokens").sum().alias("_out_tokens"),
        ((pl.col("ttft_ms") <= s.slo.ttft_ms) & (pl.col("tpot_ms").fill_null(0.0) <= s.slo.tpot_ms))
        .sum()
        .alias("_slo_ok"),
        ((pl.col("t_prefill_start") - pl.col("arrival")) * MS).mean().alias("prefill_queue_ms"),
        ((pl.col("t_prefill_end") - pl.col("t_prefill_start")) * MS).mean().alias("prefill_ms"),
        _if(handoff, (pl.col("t_admit") - pl.col(handed)) * MS).alias("admission_wait_ms"),
        _if(handoff, (pl.col("t_transfer_start") - pl.col("t_admit")) * MS).alias("link_wait_ms"),
        ((pl.col("t_recompute_start") - pl.col("t_admit")) * MS)
        .fill_nan(0.0)
        .mean()
        .alias("recompute_wait_ms"),
        _if(handoff, (pl.col("t_transfer_end") - pl.col("t_transfer_start")) * MS).alias(
            "transfer_ms"
        ),
        ((pl.col("t_recompute_end") - pl.col("t_recompute_start")) * MS)
        .fill_nan(0.0)
        .mean()
        .alias("recompute_ms"),
        (
            (
                pl.col("t_decode_start")
                - pl.max_horizontal(
                    pl.col("t_transfer_end").fill_nan(pl.col("t_prefill_end")),
                    pl.col("t_recompute_end").fill_nan(0.0),
                )
            )
            * MS
        )
        .mean()
        .alias("decode_queue_ms"),
        ((pl.col("t_first_token") - pl.col("t_decode_start")) * MS)
        .mean()
        .alias("first_iteration_ms"),
        pl.lit(s.efficiency.request_overhead_ms, pl.Float64).alias("request_overhead_ms"),
        *_itl_max(gaps),
    )


def _itl_max(gaps: bool) -> list[pl.Expr]:
    """The median and p99 of each request's longest token gap (null without the gaps)."""
    if not gaps:
        return [
            pl.lit(None, pl.Float64).alias("itl_max_p50_ms"),
            pl.lit(None, pl.Float64).alias("itl_max_p99_ms"),
        ]
    return [
        (pl.col("max_token_gap") * MS).quantile(0.5, "linear").alias("itl_max_p50_ms"),
        (pl.col("max_token_gap") * MS).quantile(0.99, "linear").alias("itl_max_p99_ms"),
    ]


def _admitted(prep: Prepared, admitted: pl.LazyFrame) -> dict:
    """Reuse, transfer and recompute figures of the admitted steady requests."""
    adm = _one(
        admitted,
        (pl.col("replica_hit_tokens") > 0).mean().alias("shared_request_fraction"),
        (pl.col("replica_hit_tokens").sum() / pl.col("prompt_tokens").sum()).alias(
            "replica_hit_rate"
        ),
        (pl.col("prefill_hit_tokens").sum() / pl.col("prompt_tokens").sum()).alias(
            "prefill_hit_rate"
        ),
        (pl.col("l3_prefill_tokens").sum() / pl.col("prompt_tokens").sum()).alias(
            "l3_prefill_rate"
        ),
        (pl.col("transfer_bytes").mean() / 1e6).alias("transfer_mb_per_request"),
        pl.col("recompute_tokens").mean().alias("recompute_tokens_per_request"),
        pl.col("recompute_tokens").sum().alias("recompute_tokens_total"),
    )
    adm["reusable_rate"] = _reusable_rate(prep, admitted)
    adm.update(_tiers(admitted))
    return adm


def _memory(prep: Prepared, st: dict) -> dict:
    """KV memory (GB), utilisation and the warm-up traffic, from the engine's stats."""
    gb = prep.kv_bpt / 1e9
    return {
        "mean_replica_kv_gb": st["mean_replica_tokens"] * gb,
        "peak_replica_kv_gb": st["peak_replica_tokens"] * gb,
        "mean_kv_used_gb": st["mean_used_tokens"] * gb,
        "peak_kv_used_gb": st["peak_used_tokens"] * gb,
        "kv_budget_gb": st["budget_tokens"] * gb,
        "reference_demand_gb": prep.reference_gb,
        "prefill_util": st["prefill_util"],
        "decode_util": st["decode_util"],
        "link_util": st["link_util"],
        "link_util_egress": st.get("link_util_egress", st["link_util"]),
        "link_util_ingress": st.get("link_util_ingress", st["link_util"]),
        "mean_decode_batch": st["mean_decode_batch"],
        **_host_tier(st, gb),
        # the hot set's warm-up traffic (engine/warmup.py): bytes it moves, time to land
        "prewarm_gb": st.get("prewarm_gb", 0.0),
        "refresh_gb": st.get("refresh_gb", 0.0),
        "prewarm_s": st.get("prewarm_s", 0.0),
    }


_COUNTS = ("requests", "steady_requests", "completed", "rejected", "recompute_tokens_total")


def _floats(row: dict) -> dict:
    """Every number a float, except the counts."""
    return {
        k: float(v) if isinstance(v, (int, float)) and k not in _COUNTS else v
        for k, v in row.items()
    }


def _after(prep: Prepared, df: pl.DataFrame, res: SimResult, out_tokens, steady) -> dict:
    """Stability, per-instance figures, the gap to the hindsight bound, and energy."""
    s, st = prep.scenario, res.stats
    # stability first: its flag is a bool and its evidence may be None (docs/model.md)
    row = dict(assess(prep, df, st).columns())
    n_p, n_d = prep.base.n_prefill, prep.base.n_decode
    if s.cluster.mode == "colocated":  # one pool of P + D instances
        n_p = n_d = s.cluster.prefill_instances + s.cluster.decode_instances
    row.update(instance_busy(df, st, n_p, n_d))
    row.update(instance_figures(s, st))
    # the gap to the hindsight bound on the unloaded hand-off time (metrics/bound.py)
    from prefixbench.metrics.bound import gap_columns

    measured = (np.arange(len(df)) >= s.run.warmup_requests) & ~np.isnan(res.columns["t_admit"])
    row.update(gap_columns(prep, res.columns, measured))
    row.update(  # --- power: None-free, only when the devices have power figures
        energy_figures(
            st,
            prep.base.prefill_cost,
            prep.base.decode_cost,
            int(out_tokens),
            float(_one(steady, pl.col("transfer_bytes").sum())["transfer_bytes"])
            if "transfer_bytes" in steady.collect_schema().names()
            else 0.0,
        )
    )
    return row


def _counts(steady: pl.LazyFrame) -> tuple[int, int, int]:
    """Steady requests, of them completed and rejected."""
    o = pl.col("outcome")
    c = _one(steady, pl.len().alias("n"), (o == "completed").sum().alias("done"),
             (o == "rejected").sum().alias("rejected"))  # fmt: skip
    return int(c["n"]), int(c["done"] or 0), int(c["rejected"] or 0)


def summarize(prep: Prepared, policy: str, df: pl.DataFrame, res: SimResult) -> dict:
    """The run's summary row: latency percentiles, throughput, rejects, reuse, memory, links.
    Each figure is one query over the columns it reads, filtered inside the query, so the
    request table is never copied whole (docs/performance.md "Large runs")."""
    s = prep.scenario
    steady = df.lazy().filter(~pl.col("warmup"))
    done = steady.filter(pl.col("outcome") == "completed")
    arr = prep.requests.arrival
    warm = min(s.run.warmup_requests, len(arr) - 1)
    span = float(arr[-1] - arr[warm])
    window = span if span > 0 else None  # one request or equal arrivals: no rate to measure
    lat = _latency(done, s, "max_token_gap" in df.columns)
    n_steady, n_done, rejected = _counts(steady)
    slo_ok = lat.pop("_slo_ok") or 0
    out_tokens = lat.pop("_out_tokens") or 0
    row = {
        "policy": policy,
        "requests": len(df),
        "steady_requests": n_steady,
        "completed": n_done,
        "rejected": rejected,
        "reject_rate": rejected / n_steady if n_steady else 0.0,
        "throughput_rps": n_done / window if window else None,
        "throughput_tok_s": out_tokens / window if window else None,
        **lat,
        **itl_summary(res.stats),
        **_admitted(prep, steady.filter(pl.col("t_admit").is_not_nan())),
        "slo_attainment": slo_ok / n_steady if n_steady else 0.0,
        "goodput_rps": goodput_rps(s, slo_ok, n_steady, window),
        **_memory(prep, res.stats),
        **_preemption(done, n_done),
    }
    row = _floats(row)
    row.update(_after(prep, df, res, out_tokens, steady))
    return row
