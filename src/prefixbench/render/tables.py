"""Rich rendering of results for the terminal (no simulation logic here).

Every table must read at 80 columns without cutting a policy, model or workload name or a
number: name columns never wrap (they fold only if a name is wider than the terminal),
metric tables keep at most six narrow numeric columns, and prose goes under the table.
"""

from __future__ import annotations

from rich import box
from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from prefixbench.registry.metrics import lower_is_better

# (column, short header, format) per group of the run comparison, in display order; the
# group title carries the unit so the headers stay short enough for 80 columns
RUN_GROUPS: list[tuple[str, list[tuple[str, str, str]]]] = [
    (
        "stability (an unstable run is not a result: docs/model.md)",
        [
            ("stable", "stable", "{}"),
            ("bottleneck_stage", "bottleneck", "{}"),
            ("rho_bottleneck", "load ρ", "{:.2f}"),
            ("capacity_rps", "stable below\nreq/s", "{:.3g}"),
        ],
    ),
    (
        "latency (ms)",
        [
            ("ttft_mean_ms", "TTFT\nmean", "{:.1f}"),
            ("ttft_p50_ms", "TTFT\np50", "{:.1f}"),
            ("ttft_p99_ms", "TTFT\np99", "{:.1f}"),
            ("ttft_prefill_mean_ms", "prefill\ndone", "{:.1f}"),
            ("tpot_mean_ms", "TPOT\nmean", "{:.2f}"),
            ("tpot_p99_ms", "TPOT\np99", "{:.2f}"),
            ("e2e_mean_ms", "E2E\nmean", "{:.0f}"),
        ],
    ),
    (
        "throughput, SLOs, inter-token latency (ms)",
        [
            ("throughput_rps", "req/s", "{:.2f}"),
            ("throughput_tok_s", "out\ntok/s", "{:.0f}"),
            ("goodput_rps", "goodput\nreq/s", "{:.2f}"),
            ("reject_rate", "rejected", "{:.1%}"),
            ("slo_attainment", "SLO\nmet", "{:.1%}"),
            ("itl_p50_ms", "ITL\np50", "{:.1f}"),
            ("itl_p99_ms", "ITL\np99", "{:.1f}"),
        ],
    ),
    (
        "reuse (fractions) and memory (GB)",
        [
            ("shared_request_fraction", "shared\nreqs", "{:.3f}"),
            ("replica_hit_rate", "replica\nhits", "{:.3f}"),
            ("prefill_hit_rate", "prefill\nhits", "{:.3f}"),
            ("mean_replica_kv_gb", "replica\nmean", "{:.3f}"),
            ("peak_replica_kv_gb", "replica\npeak", "{:.3f}"),
            ("peak_kv_used_gb", "KV\npeak", "{:.3f}"),
        ],
    ),
    (
        "decode cache tiers: chain blocks served (fractions), host DRAM (MB, GB)",
        [
            ("hbm_hit_rate", "HBM\nhits", "{:.3f}"),
            ("host_hit_rate", "host\nhits", "{:.3f}"),
            ("miss_rate", "miss", "{:.3f}"),
            ("host_mb_per_request", "host MB\n/ req", "{:.2f}"),
            ("mean_host_kv_gb", "host KV\nmean", "{:.3f}"),
            ("peak_host_kv_gb", "host KV\npeak", "{:.3f}"),
        ],
    ),
    (
        "hand-off per request and its waits (ms)",
        [
            ("transfer_mb_per_request", "link MB\nmoved", "{:.2f}"),
            ("recompute_tokens_per_request", "tokens\nrecomp.", "{:.0f}"),
            ("link_wait_ms", "link\nwait", "{:.2f}"),
            ("transfer_ms", "transfer", "{:.2f}"),
            ("recompute_ms", "recompute", "{:.2f}"),
            ("decode_queue_ms", "decode\nslot", "{:.2f}"),
        ],
    ),
    (
        "utilisation",
        [
            ("link_util", "link\nbusy", "{:.1%}"),
            ("prefill_util", "prefill\nbusy", "{:.1%}"),
            ("decode_util", "decode\nbusy", "{:.1%}"),
            ("mean_decode_batch", "decode\nbatch", "{:.1f}"),
            ("host_path_util", "host\npath", "{:.1%}"),
            ("host_path_gb", "host\npath GB", "{:.2f}"),
        ],
    ),
]

# (column, label, format) of every metric the run comparison shows, in display order
RUN_ROWS: list[tuple[str, str, str]] = [m for _, group in RUN_GROUPS for m in group]

# --- l3: the shared L3 store's figures, shown when a row used one (docs/model.md §1.13.1)
L3_GROUP: tuple[str, list[tuple[str, str, str]]] = (
    "shared L3 store: what it served (fractions), its queue",
    [
        ("l3_hit_rate", "decode\nL3 hits", "{:.3f}"),
        ("l3_prefill_rate", "prefill\nL3 hits", "{:.3f}"),
        ("l3_util", "L3\nbusy", "{:.1%}"),
        ("l3_gb", "L3 GB", "{:.2f}"),
    ],
)

# --- power: `compare` shows it beside latency (`run` prints one line per policy)
ENERGY_GROUP: tuple[str, list[tuple[str, str, str]]] = (
    "energy and power (W per pool; docs/model.md §2.11)",
    [
        ("energy_per_token_j", "J per\ntoken", "{:.3f}"),
        ("power_mean_w", "W\nall", "{:.0f}"),
        ("prefill_power_mean_w", "W\nprefill", "{:.0f}"),
        ("decode_power_mean_w", "W\ndecode", "{:.0f}"),
        ("prefill_capped_share", "capped\nprefill", "{:.1%}"),
        ("decode_capped_share", "capped\ndecode", "{:.1%}"),
    ],
)

LOWER_IS_BETTER = set(lower_is_better())  # prefixbench/registry/metrics.py

_NAME = {"no_wrap": True, "overflow": "fold"}


def safe_text(value) -> str:
    """A user-supplied string (scenario, workload, file name) with control characters made
    visible, so an escape sequence in a name cannot retitle or clear the terminal."""
    s = str(value)
    return "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in s)


def unit_names(obj):
    """Keys that say GB/s unambiguously: the catalog's ``*_gbps`` fields hold gigabytes per
    second, which network people read as gigabits, so they are shown as ``*_gbytes_per_s``."""
    if isinstance(obj, dict):
        return {
            (k[: -len("_gbps")] + "_gbytes_per_s" if k.endswith("_gbps") else k): unit_names(v)
            for k, v in obj.items()
        }
    if isinstance(obj, list):
        return [unit_names(v) for v in obj]
    return obj


def _cell(value) -> Text:
    return Text(safe_text(value))


def _fmt(fmt: str, v) -> str:
    if v is None or (isinstance(v, float) and (v != v or v in (float("inf"), float("-inf")))):
        return "–"
    if isinstance(v, bool):  # the stability flag: an unstable run is not a result
        return "yes" if v else "NO"
    if fmt in ("{:.1f}", "{:.2f}") and isinstance(v, float) and abs(v) >= 1000:
        fmt = "{:.0f}"  # decimals of a number this large only widen the column at 80
    return fmt.format(v)


def _metric_table(rows: list[dict], title: str, metrics, label: str) -> Table:
    t = Table(
        title=title,
        title_justify="left",
        box=box.SIMPLE_HEAD,
        show_edge=False,
        pad_edge=False,
    )
    t.add_column(label, style="bold", **_NAME)
    for _col, header, _f in metrics:
        t.add_column(header, justify="right", no_wrap=False, overflow="fold")
    columns = []
    for col, _, fmt in metrics:
        vals = [r.get(col) for r in rows]
        nums = [v for v in vals if isinstance(v, (int, float)) and v == v]
        best = min(nums) if col in LOWER_IS_BETTER and nums and len(set(nums)) > 1 else None
        columns.append(
            [
                Text(
                    _fmt(fmt, v),
                    style="bold red"
                    if v is False
                    else "bold green"
                    if best is not None and v == best
                    else "",
                )
                for v in vals
            ]
        )
    for i, r in enumerate(rows):
        t.add_row(_cell(r[label]), *(c[i] for c in columns))
    return t


def run_table(rows: list[dict], title: str, label: str = "policy", energy: bool = False) -> Group:
    """Policies (or systems) as rows, metrics as columns in small themed tables; the best
    lower-is-better value of each column in green; with ``energy`` the energy table too
    when the rows have power figures."""
    parts = [Text(safe_text(title), style="bold")]
    reusable = [r.get("reusable_rate") for r in rows if r.get("reusable_rate") is not None]
    if reusable:  # a workload property, the same for every policy: the hit-rate ceiling
        parts.append(
            Text(
                f"reusable with an infinite cache: {_fmt('{:.3f}', reusable[0])} of prompt"
                " tokens (hit-rate ceiling)"
            )
        )
    l3 = [L3_GROUP] if any(r.get("l3_gb") for r in rows) else []
    for group_title, metrics in [*RUN_GROUPS, *l3, *([ENERGY_GROUP] if energy else [])]:
        if not any(r.get(col) is not None for r in rows for col, _, _ in metrics):
            continue  # a group no row has (energy without power figures)
        parts.append(_metric_table(rows, group_title, metrics, label))
    return Group(*parts)


def kv_table(title: str, rows: list[dict]) -> Table:
    """Rows of plain fields; values fold rather than being cut with an ellipsis."""
    t = Table(title=safe_text(title), title_justify="left")
    if not rows:
        return t
    for i, k in enumerate(rows[0]):
        t.add_column(k, overflow="fold", no_wrap=i == 0)
    for r in rows:
        t.add_row(*(_cell(v) for v in r.values()))
    return t


_UNIT_LABELS = (
    ("_gbytes_per_s", " GB/s"),
    ("_flops_per_byte", " FLOP/byte"),
    ("_per_token", " per token"),
    ("_tflops", " TFLOP/s"),
    ("_gb", " GB"),
    ("_us", " µs"),
    ("_b", " (billions)"),
)


def header_label(key: str) -> str:
    """A column key as a header that wraps at spaces: hbm_gbytes_per_s → hbm GB/s."""
    for suffix, unit in _UNIT_LABELS:
        if key.endswith(suffix):
            return key[: -len(suffix)].replace("_", " ") + unit
    return key.replace("_", " ")


def print_rows(console: Console, rows: list[dict], title: str) -> None:
    """A list of records as a compact table whose headers wrap at word boundaries."""
    t = Table(title=safe_text(title), title_justify="left", box=box.SIMPLE_HEAD)
    if rows:
        for i, k in enumerate(rows[0]):
            t.add_column(header_label(k), overflow="fold", no_wrap=i == 0)
        for r in rows:
            t.add_row(*(_cell(v) for v in r.values()))
    console.print(t)


def _margin(r: dict) -> str:
    ci, m = r.get("margin_ci95_ms"), r.get("margin_ms")
    if r.get("tie"):
        return "tie"
    if m is None or m != m:
        return "–"
    pm = f" ± {ci:.1f}" if ci is not None and ci == ci else ""
    return f"{m:+.1f}{pm}"


def _ms(v, digits: int = 0) -> str:
    return "–" if v is None or v != v else f"{v:.{digits}f}"


def _figures(r: dict) -> str:
    """The recommended policy's absolute latencies (mean · p50 · p99) and SLO attainment."""
    return (
        f"TTFT {_ms(r.get('ttft_ms'), 1)} · {_ms(r.get('ttft_p50_ms'), 1)} · "
        f"{_ms(r.get('ttft_p99_ms'), 1)} ms, TPOT {_ms(r.get('tpot_mean_ms'), 1)} · "
        f"{_ms(r.get('tpot_p50_ms'), 1)} · {_ms(r.get('tpot_p99_ms'), 1)} ms "
        f"(mean · p50 · p99), SLO attainment "
        + ("–" if r.get("slo_attainment") is None else f"{r['slo_attainment']:.0%}")
    )


def _side(r: dict) -> str:
    m, up = r.get("margin_ms"), r.get("runner_up")
    if r.get("tie"):
        return ""
    if up and m is not None and m == m:
        ci = r.get("margin_ci95_ms")
        pm = f" ± {ci:.1f}" if ci is not None and ci == ci else ""
        if m >= 0:
            return f"mean TTFT {m:.1f}{pm} ms lower than {up}'s; "
        return f"mean TTFT {-m:.1f}{pm} ms higher than {up}'s (less memory or fewer rejects); "
    return "no runner-up to compare with; "


def recommend_table(rows: list[dict], title: str, extra: dict | None = None) -> Group:
    """The recommended policy per workload in a narrow table (full names, never cut), its
    p99 TTFT, SLO attainment and margin against the runner-up; then per workload its
    figures, whether it meets the SLOs, a tie and the reasoning, as lines under the table."""
    t = Table(title=safe_text(title), title_justify="left", box=box.SIMPLE_HEAD)
    t.add_column("workload", **_NAME)
    t.add_column("recommended", style="bold", **_NAME)
    t.add_column("TTFT p99 ms", justify="right")
    t.add_column("SLO met", justify="right")
    t.add_column("margin ms", justify="right", **_NAME)
    notes: list[Text] = []
    for r in rows:
        att = r.get("slo_attainment")
        t.add_row(
            _cell(r["workload"]),
            _cell(r["recommended"]) if r["recommended"] else Text("none", style="bold red"),
            _ms(r.get("ttft_p99_ms")),
            "–" if att is None else f"{att:.0%}",
            _margin(r),
        )
        x = (extra or {}).get(r["workload"], {})
        head = f" ({x['rate']})" if x.get("rate") else ""
        body = [f"{safe_text(r['recommended'])}, {_figures(r)}"] if r["recommended"] else []
        body += [x[k] for k in ("slo", "tie") if x.get(k)]
        body.append(_side(r) + safe_text(r["reason"]))
        notes.append(
            Text.assemble(("• ", ""), (safe_text(r["workload"]), "bold"), head + ": "
                          + "; ".join(safe_text(b) for b in body))  # fmt: skip
        )
    from prefixbench.study.recommend import TIE_REL

    caption = Text(
        "SLO met: requests within the TTFT and TPOT targets. margin ms: runner-up's mean "
        "TTFT minus the recommended one's (paired over seeds, 95% CI); tie: within the CI "
        f"or under {TIE_REL:.0%} of the mean TTFT",
        style="dim",
    )
    return Group(t, caption, *notes)
