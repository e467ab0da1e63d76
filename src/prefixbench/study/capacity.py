"""The highest arrival rate a system serves within its SLOs (a search, not a grid).

Goodput-style capacity (DistServe): the largest rate at which at least ``target`` of the
requests meet both the TTFT and the TPOT target. SLO attainment falls as load rises, so the
search brackets the rate by doubling, then bisects; each probe is a full simulation. A rate
whose run is unstable (docs/model.md, "Stability") does not meet the target, whatever its
attainment over a finite run says.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from prefixbench.scenario.models import Scenario, SessionWorkload, SyntheticWorkload

from ..errors import ScenarioError


@dataclass
class Probe:
    rate: float
    attainment: float
    goodput_rps: float
    ttft_p99_ms: float
    tpot_p99_ms: float
    stable: bool = True
    saturated_stage: str | None = None
    power_w: float | None = None  # --- power: mean power of the whole system
    energy_per_token_j: float | None = None

    def meets(self, target: float) -> bool:
        return self.stable and self.attainment >= target

    @property
    def goodput_per_kw(self) -> float | None:
        """Requests per second within the SLOs per kW drawn (None without power figures)."""
        return self.goodput_rps / self.power_w * 1e3 if self.power_w else None


def best_per_watt(probes: list[Probe], target: float) -> Probe | None:
    """The probe meeting ``target`` with the most goodput per watt: the rate at
    which the system turns energy into SLO-meeting requests best, which can sit below the
    highest rate when latency degrades before the idle power is amortised."""
    ok = [p for p in probes if p.meets(target) and p.goodput_per_kw is not None]
    return max(ok, key=lambda p: (p.goodput_per_kw, p.rate)) if ok else None


def _turns(w) -> float:
    """Requests per arrival: a session's expected turns (its arrivals are sessions)."""
    from ..workload.distributions import mean

    return max(mean(w.turns), 1.0) if isinstance(w, SessionWorkload) else 1.0


def _with_rate(s: Scenario, rate: float) -> Scenario:
    w = s.workload
    if isinstance(w, (SyntheticWorkload, SessionWorkload)):
        arrivals = w.arrivals.model_copy(update={"rate": rate / _turns(w)})
        w2 = w.model_copy(update={"arrivals": arrivals})
    else:
        w2 = w.model_copy(update={"rate": rate})
    out = s.model_copy(update={"workload": w2})
    # the same system at another rate: memory.budget_factor stays measured on the scenario
    # as stated, as with --set workload.arrivals.rate (docs/model.md §3.4), not on the probe
    out._reference = s.reference()
    return out


def probe(s: Scenario, policy: str, rate: float) -> Probe:
    from .runs import run_scenario

    row = run_scenario(_with_rate(s, rate), [policy], keep_requests=False).summary.to_dicts()[0]
    return Probe(
        rate,
        row["slo_attainment"],
        row["goodput_rps"],
        row["ttft_p99_ms"],
        row["tpot_p99_ms"],
        row["stable"],
        row["saturated_stage"],
        row.get("power_mean_w"),
        row.get("energy_per_token_j"),
    )


def max_rate(
    s: Scenario,
    policy: str,
    target: float = 0.9,
    start: float | None = None,
    rel_tol: float = 0.03,
    max_probes: int = 24,
    on_probe: Callable[[Probe], None] | None = None,
) -> tuple[float, list[Probe]]:
    """Largest rate (req/s) with SLO attainment ≥ ``target``, within ``rel_tol``; probes made."""
    if not 0 < target <= 1:
        raise ScenarioError(f"target attainment must be in (0, 1], got {target}", where="--target")
    w = s.workload
    rate = start or (
        w.arrivals.rate * _turns(w)
        if isinstance(w, (SyntheticWorkload, SessionWorkload))
        else (w.rate or 1.0)
    )
    probes: list[Probe] = []

    def run(r: float) -> bool:
        p = probe(s, policy, r)
        probes.append(p)
        if on_probe:
            on_probe(p)
        return p.meets(target)

    ok_rate, bad_rate = None, None
    if run(rate):
        ok_rate = rate
        while len(probes) < max_probes:
            rate *= 2
            if run(rate):
                ok_rate = rate
            else:
                bad_rate = rate
                break
    else:
        bad_rate = rate
        while len(probes) < max_probes:
            rate /= 2
            if run(rate):
                ok_rate = rate
                break
            bad_rate = rate
    if ok_rate is None or bad_rate is None:
        return (ok_rate or 0.0), probes
    while bad_rate - ok_rate > rel_tol * ok_rate and len(probes) < max_probes:
        mid = (ok_rate + bad_rate) / 2
        if run(mid):
            ok_rate = mid
        else:
            bad_rate = mid
    return ok_rate, probes
