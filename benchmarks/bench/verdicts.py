"""Each measurement against its target in docs/performance.md."""

from __future__ import annotations

from .common import TARGETS


def verdicts(r: dict) -> dict:
    m = r.get("million", {})
    g = lambda *keys: _dig(r, keys)  # noqa: E731
    figures = {
        "study_wall_s": g("study", "wall_s", "median"),
        "timeline_over_run": _first(
            g("timeline", "wall_s", "ratio"), g("commands", "timeline_over_run")
        ),
        "cold_first_over_warm_sweep_s": _minus(
            g("cold", "first_sweep_s"), g("cold", "second_sweep_s")
        ),
        "fast_requests_per_s_per_core_min": g("throughput", "fast_rps_cpu", "min"),
        "million_synthetic_wall_s": m.get("synthetic", {}).get("run_s", {}).get("max"),
        "million_trace_wall_s": m.get("trace", {}).get("run_s", {}).get("max"),
        "million_peak_rss_mb_max": max(
            (m[k]["peak_rss_mb"]["max"] for k in ("synthetic", "trace") if k in m), default=None
        ),
        "run_1m_all_policies_wall_s": g("scale", "run_1m_all_policies", "wall_s"),
        "run_10m_one_policy_wall_s": g("scale", "run_10m_one_policy", "wall_s"),
        "run_10m_one_policy_peak_rss_mb": g("scale", "run_10m_one_policy", "peak_rss_mb"),
        "events_over_floor_max": _over_floor(r.get("events")),
        "help_wall_s": g("help", "wall_s", "median"),
        "startup_first_run_cpu_s": g("startup", "first_run", "median"),
        "run_all_policies_wall_s": g(
            "startup_commands", "run_10k_all_policies", "wall_s", "median"
        ),
        "blis_w1_wall_ratio": g("blis", "w1", "blis_over_prefixbench_wall"),
    }
    out = {}
    for k, (op, target) in TARGETS.items():
        v = figures[k]
        ok = None if v is None else (v <= target if op == "<=" else v >= target)
        out[k] = {"value": v, "target": f"{op} {target:g}", "met": ok}
    return out


def _first(*values):
    return next((v for v in values if v is not None), None)


def _minus(a, b):
    return None if a is None or b is None else a - b


def _over_floor(events: dict | None):
    """The costliest batch's CPU ns per event over the bare heap loop's (the 3x target)."""
    if not events or "floor" not in events or not events.get("rows"):
        return None
    return max(row["ns_per_event"] for row in events["rows"]) / events["floor"]["ns_per_event"]


def _dig(d: dict, keys: tuple):
    for k in keys:
        if not isinstance(d, dict) or k not in d:
            return None
        d = d[k]
    return d
