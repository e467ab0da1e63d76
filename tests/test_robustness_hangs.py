"""Inputs that used to hang: periods with no floor, a stalled event loop, unbounded futures
sets, grids and worker counts without bounds, a gzip of blank lines (docs/reliability.md)."""

from __future__ import annotations

import pytest
from enginecases import make_requests
from test_engine_reference import _pair

from prefixbench.engine.api import simulate
from prefixbench.errors import PrefixbenchError, ScenarioError, SimulationError
from prefixbench.scenario.loader import load_scenario

A = (1, 512)


@pytest.mark.parametrize("period", ["1e-300", "1e-9", "0.0005"])
def test_a_refresh_period_below_a_millisecond_is_refused_with_its_range(period):
    with pytest.raises(ScenarioError, match=r"hotset_refresh_s.*>= 0.001 and <= 1000000000"):
        load_scenario("enterprise_hotset", [f"memory.hotset_refresh_s={period}"])


def test_the_engine_config_refuses_a_tiny_refresh_period_too():
    cfg, _ = _pair(policy="replicate_hotset", hot_blocks=[A], hot_refresh_s=1e-300)
    req = make_requests([0.0], [600], [2], [[A]])
    with pytest.raises(PrefixbenchError, match="hotset_refresh_s"):
        simulate(req, cfg)


def test_a_refresh_that_cannot_advance_the_clock_stops_with_the_field_named():
    """At t = 1e16 s a 1 ms period is below the clock's resolution (ulp(1e16) = 2 s):
    t + period == t, so the refresh event would repeat for ever; the progress guard stops it."""
    assert 1e16 + 1e-3 == 1e16
    cfg, _ = _pair(policy="replicate_hotset", hot_blocks=[A], hot_refresh_s=1e-3)
    req = make_requests([1e16, 1e16 + 4.0], [600, 600], [2, 2], [[A], [A]])
    with pytest.raises(SimulationError, match=r"memory.hotset_refresh_s.*stopped advancing"):
        simulate(req, cfg)
