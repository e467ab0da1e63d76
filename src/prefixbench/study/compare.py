"""`prefixbench compare`: coupled (colocated) vs disaggregated serving on the same hardware.

Runs one scenario three ways — disaggregated (P prefill + D decode instances and the link),
colocated with prefill-priority scheduling and colocated with chunked prefill, each on P+D
instances — and says where the time goes.
"""

from __future__ import annotations

from dataclasses import dataclass

from prefixbench.scenario.models import Scenario

# TTFT components of the disaggregated path, in the order a request meets them
STAGES = [
    ("prefill_queue_ms", "prefill queue", "prefill"),
    ("prefill_ms", "prefill", "prefill"),
    ("admission_wait_ms", "admission wait", "decode memory"),
    ("link_wait_ms", "link wait", "link"),
    ("transfer_ms", "transfer", "link"),
    ("recompute_ms", "recompute", "decode"),
    ("decode_queue_ms", "wait for a decode slot", "decode"),
    ("first_iteration_ms", "first decode iteration", "decode"),
    ("request_overhead_ms", "API / proxy / scheduling", "server"),
]


@dataclass
class Comparison:
    rows: list[dict]  # one summary row per system
    breakdown: list[dict]  # disaggregated TTFT components
    verdict: str


def systems(s: Scenario) -> list[tuple[str, Scenario]]:
    def cluster(**kw):
        return s.model_copy(update={"cluster": s.cluster.model_copy(update=kw)})

    return [
        ("disaggregated", cluster(mode="disaggregated")),
        (
            "colocated priority",
            cluster(mode="colocated", colocated_scheduler="prefill_priority"),
        ),
        ("colocated chunked", cluster(mode="colocated", colocated_scheduler="chunked")),
    ]


def ttft_share(row: dict) -> tuple[list[dict], str]:
    """TTFT components of a disaggregated run and the resource taking the largest share, in
    words ("bottleneck" is the stability verdict's word: the stage whose queue saturates)."""
    parts = [
        {"stage": label, "resource": res, "ms": float(row.get(col) or 0.0)}
        for col, label, res in STAGES
    ]
    total = sum(p["ms"] for p in parts) or 1e-12
    for p in parts:
        p["share"] = p["ms"] / total
    by_res: dict[str, float] = {}
    for p in parts:
        by_res[p["resource"]] = by_res.get(p["resource"], 0.0) + p["ms"]
    res, ms = max(by_res.items(), key=lambda kv: kv[1])
    util = {
        "link": f"link utilisation {row['link_util']:.0%}",
        "prefill": f"prefill utilisation {row['prefill_util']:.0%}",
        "decode": f"decode batch {row['mean_decode_batch']:.1f}",
        "decode memory": f"reject rate {row['reject_rate']:.1%}",
        "server": "a fixed cost per request (efficiency.request_overhead_ms)",
    }[res]
    verdict = (
        f"the {res} takes the largest share of TTFT: {ms / total:.0%} of mean TTFT "
        f"({ms:.1f} of {total:.1f} ms), {util}"
    )
    return parts, verdict


def compare(s: Scenario, policy: str, on_system=None) -> Comparison:
    """The disaggregated system and its colocated counterparts; ``on_system(label)`` after
    each (a progress bar)."""
    from .runs import run_scenario

    rows = []
    for label, sc in systems(s):
        row = run_scenario(sc, [policy], keep_requests=False, track_gaps=True).summary.to_dicts()[0]
        row["system"] = label
        rows.append(row)
        if on_system:
            on_system(label)
    parts, verdict = ttft_share(rows[0])
    return Comparison(rows, parts, verdict)
