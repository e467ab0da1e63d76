"""How the transfer path moves the study's transfer-vs-recompute finding: a small
fixed comparison the report runs itself, cheap enough for every report.

The study runs with the KV moving after prefill (``cluster.link.streaming: after_prefill``,
the default). Re-running its 384 points with layer-wise streaming would double a report's
cost, so the report runs one fixed point per model instead: the ``tool_call`` preset
(short outputs, so the hand-off is a large share of each request's life) at its own load,
300 requests after 30 warm-up, seed 0, under transfer_per_request and recompute_on_decode,
with the KV after prefill and layer by layer. Only stable runs give numbers.
"""

from __future__ import annotations

import polars as pl

from prefixbench.scenario.loader import load_scenario

from .runs import run_scenario

WORKLOAD = "tool_call"
POINT = ["run.requests=300", "run.warmup_requests=30", "seed=0"]
POLICIES = ["transfer_per_request", "recompute_on_decode"]
STREAMING = ("after_prefill", "layerwise")


def streaming_comparison(models: list[str]) -> pl.DataFrame:
    """Mean TTFT (ms) and stability of each model × streaming mode × policy at the fixed
    point."""
    rows = []
    for model in models:
        for mode in STREAMING:
            s = load_scenario(
                WORKLOAD, [f"model={model}", *POINT, f"cluster.link.streaming={mode}"]
            )
            t = run_scenario(s, POLICIES, keep_requests=False)
            for r in t.summary.iter_rows(named=True):
                rows.append(
                    {
                        "model": model,
                        "streaming": mode,
                        "policy": r["policy"],
                        "ttft_mean_ms": r["ttft_mean_ms"],
                        "stable": bool(r["stable"]),
                    }
                )
    return pl.DataFrame(rows)


def _winner(t: dict, mode: str) -> str:
    return "transfer" if t[(mode, POLICIES[0])] <= t[(mode, POLICIES[1])] else "recompute"


def streaming_md(models: list[str]) -> list[str]:
    """The report's section: one line per model, the TTFT of both policies in both modes
    and whether the winner changes."""
    df = streaming_comparison(models)
    out = [
        "## Layer-wise streaming (fixed comparison)",
        "",
        f"The sweep moves KV after prefill. One `{WORKLOAD}` point per model (300 requests, "
        "seed 0; `cluster.link.streaming` after_prefill vs layerwise; docs/model.md §1.7.1), "
        "mean TTFT:",
        "",
    ]
    for model in models:
        sub = df.filter(pl.col("model") == model)
        if not sub["stable"].all():
            out.append(f"- `{model}`: not stable at this point; no figures (see Stability).")
            continue
        t = {(r["streaming"], r["policy"]): r["ttft_mean_ms"] for r in sub.iter_rows(named=True)}
        a, b = (_winner(t, mode) for mode in STREAMING)
        moved = "the winner stays" if a == b else "the winner changes"
        out.append(
            f"- `{model}`: transfer {t[('after_prefill', POLICIES[0])]:.1f} → "
            f"{t[('layerwise', POLICIES[0])]:.1f} ms, recompute "
            f"{t[('after_prefill', POLICIES[1])]:.1f} → {t[('layerwise', POLICIES[1])]:.1f} ms "
            f"(after prefill → layer-wise); {moved} ({a} → {b})."
        )
    out += [
        "",
        "Recompute on the decode node runs as chunked prefill inside decode iterations, "
        "batched and deduplicated (docs/model.md §1.9), in the sweep above as here.",
        "",
    ]
    return out
