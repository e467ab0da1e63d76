"""Per-request tables and per-run summaries (BRIEF §5), computed with polars.

Definitions are in docs/model.md ("Metrics"). Steady-state statistics exclude the first
``run.warmup_requests`` requests; latency percentiles are over completed requests.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from prefixbench.engine import REASON_NAMES, Outcome, SimResult
from prefixbench.metrics.itl import itl_summary
from prefixbench.metrics.runcols import Rows, RunCols, fdiv, fmean, fquantile, fstats, fsum
from prefixbench.metrics.stability import Cols, assess, instance_busy
from prefixbench.metrics.utilisation import instance_figures
from prefixbench.physics.costmodel import client_overhead_ms
from prefixbench.physics.power import energy_figures
from prefixbench.system.runner import Prepared

MS = 1e3


def requests_frame(
    prep: Prepared, policy: str, res: SimResult, lo: int = 0, hi: int | None = None
) -> pl.DataFrame:
    """One row per request: inputs, every stage's timestamp, bytes, hits, outcome; only
    requests ``lo`` to ``hi`` (default: all), for writing a large run in chunks."""
    req = prep.requests
    hi = len(req) if hi is None else hi
    n, rows = hi - lo, slice(lo, hi)
    df = pl.DataFrame(
        {
            "request_id": np.arange(lo, hi, dtype=np.int64),
            "policy": pl.repeat(policy, n, dtype=pl.Utf8, eager=True),  # not a list of n
            "arrival": req.arrival[rows],
            "prompt_tokens": req.prompt_len[rows],
            "output_tokens": req.output_len[rows],
            "prefix_id": req.prefix_id[rows],
            "chain_blocks": np.diff(req.blk_ptr[lo : hi + 1]),
            **{k: v[rows] for k, v in res.columns.items()},
        }
    )
    # client-side, outside any step: per request and per prompt token (docs/model.md §2.14)
    api = client_overhead_ms(prep.scenario.efficiency, req.prompt_len[rows])
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


CHUNK_ROWS = 1 << 19  # request rows per chunk of requests.parquet (about 190 MB as a frame)


def request_chunks(n: int, rows: int = CHUNK_ROWS) -> list[tuple[int, int]]:
    """The ``(lo, hi)`` request ranges of ``requests_frame`` chunks of ``rows`` requests, in
    order (one, empty, for no requests): a large run writes its table chunk by chunk, never
    holding it whole (docs/performance.md "Large runs")."""
    return [(lo, min(lo + rows, n)) for lo in range(0, max(n, 1), rows)]


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


def _pcts(rows, col: str, name: str, nulls: bool = False) -> dict:
    mean, p50, p90, p99 = fstats(rows[col], (0.5, 0.9, 0.99), nulls)
    return {
        f"{name}_mean_ms": mean,
        f"{name}_p50_ms": p50,
        f"{name}_p90_ms": p90,
        f"{name}_p99_ms": p99,
    }


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


def _reusable_rate(prep: Prepared, admitted: Rows, prompt: int) -> float:
    """Share of admitted prompt tokens an unbounded cache could serve (workload/reuse.py)."""
    if not prompt:
        return float("nan")
    return float(_reusable(prep)[admitted.mask].sum() / prompt)


def _tiers(admitted: Rows) -> dict:
    """Where the admitted requests' chain blocks came from (docs/model.md, "Metrics"): decode
    HBM, the host tier, the L3 store, or none (sent over the link or recomputed); null with
    no chains."""
    n = int(admitted["chain_blocks"].sum())
    hbm, host, l3 = (int(admitted[f"{k}_hit_blocks"].sum()) for k in ("hbm", "host", "l3"))
    mb = fmean(admitted["host_bytes"])
    out = {"host_mb_per_request": None if mb is None else mb / 1e6}
    for k, v in (("hbm", hbm), ("host", host), ("l3", l3)):
        out[f"{k}_hit_rate"] = v / n if n else None
    out["miss_rate"] = (n - hbm - host - l3) / n if n else None  # exact, in [0, 1]
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


def _preemption(done: Rows, n_done: int) -> dict:
    """Paged admission (docs/model.md): preemptions of the completed steady requests, their
    lost work (tokens re-prefilled, or swapped to host and back) and delay."""
    if "preemptions" not in done or not n_done:
        return {"preempted_fraction": 0.0, "preemptions_per_request": 0.0,
                "preempt_delay_mean_ms": 0.0, "preempt_lost_per_request": 0.0}  # fmt: skip
    # tokens, whatever became of them: a swap whose host memory is full recomputes its victim
    # (§1.5.2), so one run can mix both and a byte figure would mislabel the recomputed ones
    pre = done["preemptions"]
    return {
        "preempted_fraction": fmean(pre > 0),
        "preemptions_per_request": fmean(pre.astype(np.float64)),
        "preempt_delay_mean_ms": fmean(done["preempt_delay_s"] * MS),
        "preempt_lost_per_request": fmean(done["preempt_tokens"].astype(np.float64)),
    }


def _nan0(x: np.ndarray) -> np.ndarray:
    """``x`` with NaN as 0 (polars ``fill_nan(0.0)``)."""
    return np.where(np.isnan(x), 0.0, x)


def _stages(done: Rows, s) -> dict:
    """Per-stage mean waits and service times of the completed steady requests (ms)."""
    # colocated instances have no hand-off: KV is reserved before the prefill (its wait is in
    # the prefill queue) and nothing crosses a link
    handoff = s.cluster.mode != "colocated"
    # layer-wise streaming hands off when the prefill starts (docs/model.md §1.7.1)
    handed = "t_prefill_start" if s.cluster.link.streaming == "layerwise" else "t_prefill_end"
    g = done.__getitem__

    def _if(a: str, b: str):  # null where the stage does not exist
        return fmean((g(a) - g(b)) * MS) if handoff else None

    ready = np.maximum(
        np.where(np.isnan(g("t_transfer_end")), g("t_prefill_end"), g("t_transfer_end")),
        _nan0(g("t_recompute_end")),
    )
    return {
        "prefill_queue_ms": fmean((g("t_prefill_start") - g("arrival")) * MS),
        "prefill_ms": fmean((g("t_prefill_end") - g("t_prefill_start")) * MS),
        "admission_wait_ms": _if("t_admit", handed),
        "link_wait_ms": _if("t_transfer_start", "t_admit"),
        "recompute_wait_ms": fmean(_nan0((g("t_recompute_start") - g("t_admit")) * MS)),
        "transfer_ms": _if("t_transfer_end", "t_transfer_start"),
        "recompute_ms": fmean(_nan0((g("t_recompute_end") - g("t_recompute_start")) * MS)),
        "decode_queue_ms": fmean((g("t_decode_start") - ready) * MS),
        "first_iteration_ms": fmean((g("t_first_token") - g("t_decode_start")) * MS),
        "request_overhead_ms": float(s.efficiency.request_overhead_ms),
    }


def _latency(done: Rows, s, gaps: bool) -> dict:
    """Latency percentiles and per-stage means of the completed steady requests."""
    tpot = done["tpot_ms"]
    ok = (done["ttft_ms"] <= s.slo.ttft_ms) & (np.where(np.isnan(tpot), 0.0, tpot) <= s.slo.tpot_ms)
    return {
        **_pcts(done, "ttft_ms", "ttft"),
        **_pcts(done, "ttft_prefill_ms", "ttft_prefill"),
        **_pcts(done, "tpot_ms", "tpot", nulls=True),
        **_pcts(done, "e2e_ms", "e2e"),
        "_out_tokens": int(done["output_tokens"].sum()),
        "_slo_ok": int(np.count_nonzero(ok)),
        **_stages(done, s),
        **_itl_max(done, gaps),
    }


def _itl_max(done: Rows, gaps: bool) -> dict:
    """The median and p99 of each request's longest token gap (null without the gaps)."""
    if not gaps:
        return {"itl_max_p50_ms": None, "itl_max_p99_ms": None}
    gap = done["max_token_gap"] * MS
    return {"itl_max_p50_ms": fquantile(gap, 0.5), "itl_max_p99_ms": fquantile(gap, 0.99)}


def _admitted(prep: Prepared, admitted: Rows) -> dict:
    """Reuse, transfer and recompute figures of the admitted steady requests."""
    prompt = int(admitted["prompt_tokens"].sum())
    rc = admitted["recompute_tokens"]
    mb = fmean(admitted["transfer_bytes"])
    adm = {
        "shared_request_fraction": fmean(admitted["replica_hit_tokens"] > 0),
        **{
            f"{name}_rate": fdiv(admitted[col].sum(), prompt)
            for name, col in (
                ("replica_hit", "replica_hit_tokens"),
                ("prefill_hit", "prefill_hit_tokens"),
                ("l3_prefill", "l3_prefill_tokens"),
            )  # fmt: skip
        },
        "transfer_mb_per_request": None if mb is None else mb / 1e6,
        "recompute_tokens_per_request": fmean(rc),
        "recompute_tokens_total": int(rc.sum()),
    }
    adm["reusable_rate"] = _reusable_rate(prep, admitted, prompt)
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


def _after(prep: Prepared, run: RunCols, res: SimResult, out_tokens, steady_bytes) -> dict:
    """Stability, per-instance figures, the gap to the hindsight bound, and energy."""
    s, st = prep.scenario, res.stats
    # stability first: its flag is a bool and its evidence may be None (docs/model.md)
    row = dict(assess(prep, Cols.of_run(run), st).columns())
    n_p, n_d = prep.base.n_prefill, prep.base.n_decode
    if s.cluster.mode == "colocated":  # one pool of P + D instances
        n_p = n_d = s.cluster.prefill_instances + s.cluster.decode_instances
    row.update(instance_busy(run.all(), st, n_p, n_d))
    row.update(instance_figures(s, st))
    # the gap to the hindsight bound on the unloaded hand-off time (metrics/bound.py)
    from prefixbench.metrics.bound import gap_columns

    measured = ~run.warmup & ~np.isnan(res.columns["t_admit"])
    row.update(gap_columns(prep, res.columns, measured))
    row.update(  # --- power: None-free, only when the devices have power figures
        energy_figures(
            st, prep.base.prefill_cost, prep.base.decode_cost, int(out_tokens), steady_bytes
        )
    )
    return row


def summarize(prep: Prepared, policy: str, df: pl.DataFrame | None, res: SimResult) -> dict:
    """The run's summary row (``df``, the request table, is not read: every figure comes
    from the engine's columns, summarize_result)."""
    return summarize_result(prep, policy, res)


def _completed(run: RunCols, gaps: bool) -> tuple[dict, dict, int]:
    """(latency figures, preemption figures, count) of the completed steady requests; the
    subset and the columns it kept go when this returns."""
    done = Rows(run, ~run.warmup & run.completed)
    n_done = len(done)
    return _latency(done, run.prep.scenario, gaps), _preemption(done, n_done), n_done


def summarize_result(prep: Prepared, policy: str, res: SimResult) -> dict:
    """The run's summary row: latency percentiles, throughput, rejects, reuse, memory, links,
    from the engine's numpy columns restricted by masks (metrics/runcols.py), without the
    per-request table (docs/performance.md "Large runs")."""
    s, run = prep.scenario, RunCols(prep, res)
    arr = prep.requests.arrival
    warm = min(s.run.warmup_requests, len(arr) - 1)
    span = float(arr[-1] - arr[warm])
    window = span if span > 0 else None  # one request or equal arrivals: no rate to measure
    lat, pre, n_done = _completed(run, "max_token_gap" in res.columns)
    n_steady = int(np.count_nonzero(~run.warmup))
    rejected = int(np.count_nonzero(run.rejected & ~run.warmup))
    slo_ok, out_tokens = lat.pop("_slo_ok"), lat.pop("_out_tokens")
    adm = _admitted(prep, Rows(run, ~run.warmup & ~np.isnan(res.columns["t_admit"])))
    moved = Rows(run, ~run.warmup)["transfer_bytes"] if "transfer_tokens" in res.columns else None
    steady_bytes = 0.0 if moved is None else float(fsum(moved))
    del moved
    row = {
        "policy": policy,
        "requests": run.n,
        "steady_requests": n_steady,
        "completed": n_done,
        "rejected": rejected,
        "reject_rate": rejected / n_steady if n_steady else 0.0,
        "throughput_rps": n_done / window if window else None,
        "throughput_tok_s": out_tokens / window if window else None,
        **lat,
        **itl_summary(res.stats),
        **adm,
        "slo_attainment": slo_ok / n_steady if n_steady else 0.0,
        "goodput_rps": goodput_rps(s, slo_ok, n_steady, window),
        **_memory(prep, res.stats),
        **pre,
    }
    row = _floats(row)
    row.update(_after(prep, run, res, out_tokens, steady_bytes))
    return row
