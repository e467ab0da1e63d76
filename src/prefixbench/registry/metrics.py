"""The summary columns users read: name, unit, which way is better and a one-line
definition. The full definitions are docs/model.md §5.3 (and §2.11 for power); the run
comparison table (render/tables.py) shows these, and which way is better marks a winner."""

from __future__ import annotations

from typing import NamedTuple


class Metric(NamedTuple):
    column: str  # the summary column (summary.parquet, runs.parquet, --json)
    unit: str  # "ms", "req/s", "fraction", ... ("" for a label or a count)
    better: str  # "lower", "higher" or "" (neither: a context figure)
    description: str
    section: str  # where docs/model.md defines it


def _m(column: str, unit: str, better: str, description: str, section: str = "§5.3") -> Metric:
    return Metric(column, unit, better, description, section)


METRICS: tuple[Metric, ...] = (
    # stability (§5.4)
    _m(
        "stable",
        "bool",
        "",
        "the run is a result: no queueing stage is at or above its limit",
        "§5.4",
    ),
    _m(
        "bottleneck_stage",
        "",
        "",
        "the saturated stage, else the stage with the highest load ρ",
        "§5.4",
    ),
    _m("rho_bottleneck", "", "", "load ρ of the bottleneck stage (unstable at or above 1)", "§5.4"),
    _m(
        "capacity_rps",
        "req/s",
        "",
        "the rate below which the bottleneck stage would be stable",
        "§5.4",
    ),
    # latency
    _m("ttft_mean_ms", "ms", "lower", "time to first token: arrival → first token on decode"),
    _m("ttft_p50_ms", "ms", "lower", "median TTFT"),
    _m("ttft_p99_ms", "ms", "lower", "99th percentile TTFT"),
    _m("ttft_prefill_mean_ms", "ms", "", "arrival → prefill done (DistServe's TTFT)"),
    _m("tpot_mean_ms", "ms", "lower", "time per output token after the first"),
    _m("tpot_p99_ms", "ms", "lower", "99th percentile TPOT"),
    _m("e2e_mean_ms", "ms", "lower", "arrival → last token"),
    # throughput, SLOs, inter-token latency
    _m("throughput_rps", "req/s", "", "completed steady requests per second of the window"),
    _m("throughput_tok_s", "tok/s", "", "output tokens of completed steady requests per second"),
    _m("goodput_rps", "req/s", "", "requests meeting both SLOs per second"),
    _m("reject_rate", "fraction", "lower", "steady requests rejected, any reason"),
    _m("slo_attainment", "fraction", "", "steady requests meeting the TTFT and TPOT SLOs"),
    _m("itl_max_p50_ms", "ms", "lower", "median over requests of the worst inter-token gap"),
    _m("itl_max_p99_ms", "ms", "lower", "99th percentile of the worst inter-token gap"),
    _m("itl_mean_ms", "ms", "lower", "mean inter-token latency, pooled over requests", "§5.3.1"),
    _m("itl_p50_ms", "ms", "lower", "median pooled inter-token latency", "§5.3.1"),
    _m("itl_p90_ms", "ms", "lower", "90th percentile pooled inter-token latency", "§5.3.1"),
    _m("itl_p99_ms", "ms", "lower", "99th percentile pooled inter-token latency", "§5.3.1"),
    # reuse and memory
    _m(
        "shared_request_fraction",
        "fraction",
        "",
        "admitted requests served a prefix from a replica",
    ),
    _m("replica_hit_rate", "fraction", "", "prompt tokens served from decode replicas"),
    _m("prefill_hit_rate", "fraction", "", "prompt tokens hit in the prefill prefix cache"),
    _m(
        "l3_prefill_rate",
        "fraction",
        "",
        "prompt tokens the prefill step read from the shared L3 store",
        "§1.13.1",
    ),
    _m("mean_replica_kv_gb", "GB", "", "replica blocks per decode instance, time-weighted mean"),
    _m("peak_replica_kv_gb", "GB", "", "largest replica footprint of any decode instance"),
    _m("peak_kv_used_gb", "GB", "", "largest replicas + reservations of any decode instance"),
    # decode cache tiers
    _m("hbm_hit_rate", "fraction", "", "chain blocks served from decode HBM"),
    _m("host_hit_rate", "fraction", "", "chain blocks served from the host-DRAM tier"),
    _m("l3_hit_rate", "fraction", "", "chain blocks read from the shared L3 store", "§1.13.1"),
    _m("miss_rate", "fraction", "", "chain blocks sent over the link or recomputed"),
    _m("host_mb_per_request", "MB", "", "host-tier promotions per request"),
    _m("mean_host_kv_gb", "GB", "", "host-tier blocks per decode instance, time-weighted mean"),
    _m("peak_host_kv_gb", "GB", "", "largest host-tier footprint of any decode instance"),
    # hand-off per request and its waits
    _m("transfer_mb_per_request", "MB", "", "KV bytes moved over the link per request"),
    _m("recompute_tokens_per_request", "tokens", "", "prefix tokens recomputed per request"),
    _m("link_wait_ms", "ms", "", "admission → transfer start (waiting for NICs or a channel)"),
    _m("transfer_ms", "ms", "", "transfer start → end"),
    _m("recompute_ms", "ms", "", "recompute start → end"),
    _m("decode_queue_ms", "ms", "", "ready → joined the decode batch"),
    # utilisation
    _m("link_util", "fraction", "", "busy time of the busiest NIC group over the window"),
    _m("prefill_util", "fraction", "", "prefill step time over window · P"),
    _m("decode_util", "fraction", "", "decode instances with a sequence in the batch, busy share"),
    _m("mean_decode_batch", "sequences", "", "time-average sequences in a decode batch"),
    _m("host_path_util", "fraction", "", "busy time of the busiest decode host path"),
    _m("host_path_gb", "GB", "", "bytes over all host paths after warm-up"),
    _m("l3_util", "fraction", "", "busy time of the shared L3 store's queue", "§1.13.1"),
    _m("l3_gb", "GB", "", "bytes read from and written to the L3 store after warm-up"),
    # energy and power (§2.11)
    _m("energy_per_token_j", "J", "lower", "energy per output token", "§2.11"),
    _m("power_mean_w", "W", "lower", "mean power of every instance together", "§2.11"),
    _m("prefill_power_mean_w", "W", "", "mean power of the prefill pool", "§2.11"),
    _m("decode_power_mean_w", "W", "", "mean power of the decode pool", "§2.11"),
    _m(
        "prefill_capped_share",
        "fraction",
        "",
        "prefill step time the power cap slowed, per instance",
        "§2.11",
    ),
    _m(
        "decode_capped_share",
        "fraction",
        "",
        "decode step time the power cap slowed, per instance",
        "§2.11",
    ),
)

_BY_COLUMN = {m.column: m for m in METRICS}


def metric(column: str) -> Metric:
    """The entry for ``column`` (KeyError if it is not registered)."""
    return _BY_COLUMN[column]


def lower_is_better() -> frozenset[str]:
    """Columns where a smaller value wins."""
    return frozenset(m.column for m in METRICS if m.better == "lower")
