"""Each measurement against its target in docs/performance.md."""

from __future__ import annotations

from .common import TARGETS


def verdicts(r: dict) -> dict:
    m = r.get("million", {})
    g = lambda *keys: _dig(r, keys)  # noqa: E731
    figures = {
        "study_wall_s": g("study", "wall_s", "median"),
        "timeline_over_run": g("commands", "timeline_over_run"),
        "cold_first_sweep_s": g("cold", "first_sweep_s"),
        "fast_requests_per_s_per_core_min": g("throughput", "fast_rps_cpu", "min"),
        "million_synthetic_wall_s": m.get("synthetic", {}).get("run_s", {}).get("max"),
        "million_trace_wall_s": m.get("trace", {}).get("run_s", {}).get("max"),
        "million_peak_rss_mb_max": max(
            (m[k]["peak_rss_mb"]["max"] for k in ("synthetic", "trace") if k in m), default=None
        ),
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


def _dig(d: dict, keys: tuple):
    for k in keys:
        if not isinstance(d, dict) or k not in d:
            return None
        d = d[k]
    return d
