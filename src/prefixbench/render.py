"""Rich rendering of results for the terminal (no simulation logic here)."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

# (column, label, format) of the run comparison, in display order
RUN_ROWS: list[tuple[str, str, str]] = [
    ("stable", "Stable run", "{}"),
    ("bottleneck_stage", "Bottleneck stage", "{}"),
    ("rho_bottleneck", "Bottleneck load ρ", "{:.2f}"),
    ("capacity_rps", "Stable below (req/s)", "{:.3g}"),
    ("ttft_mean_ms", "TTFT mean (ms)", "{:.1f}"),
    ("ttft_p50_ms", "TTFT p50 (ms)", "{:.1f}"),
    ("ttft_p99_ms", "TTFT p99 (ms)", "{:.1f}"),
    ("ttft_prefill_mean_ms", "TTFT to prefill done, mean (ms)", "{:.1f}"),
    ("tpot_mean_ms", "TPOT mean (ms)", "{:.2f}"),
    ("tpot_p99_ms", "TPOT p99 (ms)", "{:.2f}"),
    ("itl_max_p50_ms", "Worst token gap per request, p50 (ms)", "{:.1f}"),
    ("itl_max_p99_ms", "Worst token gap per request, p99 (ms)", "{:.1f}"),
    ("e2e_mean_ms", "E2E mean (ms)", "{:.0f}"),
    ("throughput_rps", "Throughput (req/s)", "{:.2f}"),
    ("throughput_tok_s", "Throughput (output tok/s)", "{:.0f}"),
    ("reject_rate", "Reject rate", "{:.1%}"),
    ("slo_attainment", "SLO attainment", "{:.1%}"),
    ("goodput_rps", "Goodput (req/s)", "{:.2f}"),
    ("shared_request_fraction", "Shared-request fraction", "{:.3f}"),
    ("replica_hit_rate", "Replica hit rate (tokens)", "{:.3f}"),
    ("prefill_hit_rate", "Prefill cache hit rate (tokens)", "{:.3f}"),
    ("reusable_rate", "Reusable, infinite cache (tokens)", "{:.3f}"),
    ("mean_replica_kv_gb", "Replica KV mean (GB)", "{:.3f}"),
    ("peak_replica_kv_gb", "Replica KV peak (GB)", "{:.3f}"),
    ("peak_kv_used_gb", "Decode KV peak (GB)", "{:.3f}"),
    ("transfer_mb_per_request", "Moved per request (MB)", "{:.2f}"),
    ("recompute_tokens_per_request", "Recomputed per request (tokens)", "{:.0f}"),
    ("link_wait_ms", "Link wait mean (ms)", "{:.2f}"),
    ("transfer_ms", "Transfer mean (ms)", "{:.2f}"),
    ("recompute_ms", "Recompute mean (ms)", "{:.2f}"),
    ("decode_queue_ms", "Wait for decode slot (ms)", "{:.2f}"),
    ("link_util", "Link utilisation", "{:.1%}"),
    ("prefill_util", "Prefill utilisation", "{:.1%}"),
    ("decode_util", "Decode busy fraction", "{:.1%}"),
    ("mean_decode_batch", "Decode batch, mean", "{:.1f}"),
]

LOWER_IS_BETTER = {
    "ttft_mean_ms",
    "ttft_p50_ms",
    "ttft_p99_ms",
    "tpot_mean_ms",
    "tpot_p99_ms",
    "e2e_mean_ms",
    "reject_rate",
    "itl_max_p50_ms",
    "itl_max_p99_ms",
}


def _fmt(fmt: str, v) -> str:
    if v is None or (isinstance(v, float) and v != v):
        return "–"
    if isinstance(v, bool):  # the stability flag: an unstable run is not a result
        return "yes" if v else "[bold red]NO[/]"
    return fmt.format(v)


def run_table(rows: list[dict], title: str, label: str = "policy") -> Table:
    """Policies (or systems) side by side as columns, metrics as rows; the best in green."""
    t = Table(title=title, title_justify="left")
    t.add_column("metric", style="bold")
    for r in rows:
        t.add_column(str(r[label]), justify="right")
    for col, label, fmt in RUN_ROWS:
        vals = [r.get(col) for r in rows]
        nums = [v for v in vals if isinstance(v, (int, float)) and v == v]
        best = None
        if col in LOWER_IS_BETTER and nums and len(set(nums)) > 1:
            best = min(nums)
        cells = [
            f"[bold green]{_fmt(fmt, v)}[/]" if best is not None and v == best else _fmt(fmt, v)
            for v in vals
        ]
        t.add_row(label, *cells)
    return t


def kv_table(title: str, rows: list[dict]) -> Table:
    t = Table(title=title, title_justify="left")
    if not rows:
        return t
    for k in rows[0]:
        t.add_column(k)
    for r in rows:
        t.add_row(*(str(v) for v in r.values()))
    return t


def print_rows(console: Console, rows: list[dict], title: str) -> None:
    console.print(kv_table(title, rows))


def recommend_table(rows: list[dict], title: str) -> Table:
    t = Table(title=title, title_justify="left")
    for c in ("workload", "recommended", "margin vs runner-up (mean TTFT)", "seeds agree", "why"):
        t.add_column(c)
    for r in rows:
        ci, m = r["margin_ci95_ms"], r["margin_ms"]
        pm = f" ± {ci:.1f}" if ci is not None and ci == ci else ""
        if m is None or m != m:
            margin = "–"
        elif m >= 0:
            margin = f"{m:.1f}{pm} ms faster than {r['runner_up']}"
        else:
            margin = f"{-m:.1f}{pm} ms slower than {r['runner_up']} (less memory or fewer rejects)"
        t.add_row(
            r["workload"],
            f"[bold]{r['recommended']}[/]" if r["recommended"] else "[bold red]none[/]",
            margin,
            "yes" if r["seeds_agree"] else "no",
            r["reason"],
        )
    return t
