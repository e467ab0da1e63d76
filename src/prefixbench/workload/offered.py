"""The arrival rate a scenario offers, as written (requests per second)."""

from __future__ import annotations


def nominal_rate(s) -> float | None:
    """Requests per second the scenario offers as written (a session's expected turns
    counted); None for a trace replayed at its own pace."""
    from prefixbench.scenario.models import SessionWorkload, TraceWorkload
    from prefixbench.workload.distributions import mean

    w = s.workload
    if isinstance(w, TraceWorkload):
        return w.rate
    if isinstance(w, SessionWorkload):
        return w.arrivals.rate * max(mean(w.turns), 1.0)
    return w.arrivals.rate
