"""The per-request fixed cost (docs/model.md §2.14): client-side TTFT and E2E carry
``efficiency.request_overhead_ms`` on top of the simulated steps; no instance is busy for it,
so every simulated timestamp is unchanged."""

from __future__ import annotations

import pytest

from prefixbench.physics.costmodel import Efficiency
from prefixbench.scenario.loader import load_scenario
from prefixbench.study.runs import run_scenario


def test_default_is_the_measured_gap():
    # BLIS ground truth, llama-2-7b TP1 chat: client TTFT 13.9 ms, prefill step 6.7 ms
    assert Efficiency().request_overhead_ms == 7.0


def _run(ms: float):
    s = load_scenario(
        "medium_chat",
        ["run.requests=120", "run.warmup_requests=20", f"efficiency.request_overhead_ms={ms}"],
    )
    return run_scenario(s, ["transfer_per_request"], keep_requests=True)


def test_ttft_and_e2e_carry_the_overhead_and_nothing_else_moves():
    a, b = _run(0.0), _run(12.5)
    ra, rb = a.requests, b.requests
    for col in ("t_first_token", "t_done", "t_prefill_end", "t_transfer_end"):
        assert ra[col].to_list() == rb[col].to_list()
    d_ttft = (rb["ttft_ms"] - ra["ttft_ms"]).to_list()
    d_e2e = (rb["e2e_ms"] - ra["e2e_ms"]).drop_nans().to_list()
    assert all(x == pytest.approx(12.5, abs=1e-9) for x in d_ttft if x == x)
    assert all(x == pytest.approx(12.5, abs=1e-9) for x in d_e2e)
    sa, sb = a.summary.row(0, named=True), b.summary.row(0, named=True)
    assert sb["ttft_mean_ms"] - sa["ttft_mean_ms"] == pytest.approx(12.5, abs=1e-9)
    assert sb["tpot_mean_ms"] == sa["tpot_mean_ms"]
    assert (sa["request_overhead_ms"], sb["request_overhead_ms"]) == (0.0, 12.5)
