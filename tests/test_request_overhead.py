"""The per-request costs outside any step (docs/model.md §2.14): client-side TTFT and E2E
carry ``efficiency.request_overhead_ms`` and ``prompt_overhead_us`` per prompt token on top
of the simulated steps; no instance is busy for them, so every simulated timestamp is
unchanged."""

from __future__ import annotations

import pytest

from prefixbench.physics.costmodel import Efficiency
from prefixbench.scenario.loader import load_scenario
from prefixbench.study.runs import run_scenario


def test_default_is_the_measured_gap():
    # BLIS ground truth, llama-2-7b TP1 (tests/data/measured/blis_vllm_h100_sync.csv, the two
    # fit rows): client TTFT 13.9 ms for a 354-token prompt over a 6.698 ms prefill step and
    # 67.1 ms for 2,048 tokens over a 43.816 ms step. Gaps 7.202 and 23.284 ms: per token
    # (23.284 - 7.202) / (2048 - 354) = 9.49 µs, per request 7.202 - 354 * 0.0095 = 3.84 ms.
    assert Efficiency().prompt_overhead_us == 9.5
    assert Efficiency().request_overhead_ms == 3.8


def _run(ms: float, us: float = 0.0):
    s = load_scenario(
        "medium_chat",
        [
            "run.requests=120",
            "run.warmup_requests=20",
            f"efficiency.request_overhead_ms={ms}",
            f"efficiency.prompt_overhead_us={us}",
        ],
    )
    return run_scenario(s, ["transfer_per_request"], keep_requests=True)


def test_the_prompt_token_cost_is_per_prompt_token():
    a, b = _run(0.0), _run(0.0, 20.0)
    ra, rb = a.requests, b.requests
    assert ra["t_first_token"].to_list() == rb["t_first_token"].to_list()
    d = (rb["ttft_ms"] - ra["ttft_ms"]).to_list()
    want = [n * 20.0 / 1000 for n in ra["prompt_tokens"].to_list()]  # 20 µs each
    assert all(x == pytest.approx(w, abs=1e-9) for x, w in zip(d, want, strict=True) if x == x)
    assert len({round(w, 6) for w in want}) > 1  # prompts differ, so the costs do


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
