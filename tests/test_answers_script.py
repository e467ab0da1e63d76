"""benchmarks/answers.py (docs/validation.md "Re-measured"): its settings are valid, its
"before" settings reproduce the analytic figures recorded for the model before physics v2,
and its comparisons count what they say."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

from prefixbench.scenario.loader import load_scenario
from prefixbench.study.crossover import analytic_row

ROOT = Path(__file__).resolve().parents[1]


def _script():
    spec = importlib.util.spec_from_file_location("answers", ROOT / "benchmarks" / "answers.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


answers = _script()


def test_every_setting_is_a_valid_override_list():
    for overrides in answers.SETTINGS.values():
        s = load_scenario("tool_call", overrides)
        assert s.memory.prefill_hold is ("memory.prefill_hold=false" not in overrides)
    before = load_scenario("tool_call", answers.BEFORE)
    assert before.efficiency.gemm_half_tokens == 0 and before.efficiency.request_overhead_ms == 0
    assert before.cluster.link.spec().efficiency == 1 and before.cluster.link.spec().setup_us == 0


def test_before_reproduces_the_recorded_crossover_of_the_old_model():
    """docs/validation.md records, for the commit before the physics work (one max per
    step, flat MFU 0.5, line-rate links): qwen2-0.5b on h100-sxm over eth-25g, recompute
    wins from 396 to 28,194 prefix tokens; qwen2-1.5b over one ib-ndr400 NIC moves the
    2,048-token prefix in 1.18 ms and ties at 4.67 GB/s."""
    eff, link = answers._before_efficiency_and_link(answers.BEFORE)
    eth = analytic_row("qwen2-0.5b", "h100-sxm", "eth-25g", eff=eff, link_update=link)
    assert (eth["recompute_wins_from"], eth["recompute_wins_until"]) == (396, 28_194)
    ib = analytic_row("qwen2-1.5b", "h100-sxm", "ib-ndr400", eff=eff, link_update=link)
    assert round(ib["transfer_ms_at_ref"], 2) == 1.18
    assert round(ib["tie_bandwidth_gbytes_per_s"], 2) == 4.67
    now = analytic_row("qwen2-1.5b", "h100-sxm", "ib-ndr400")
    assert now["transfer_ms_at_ref"] > ib["transfer_ms_at_ref"]  # η and setup cost now


def test_recommend_changes_are_split_into_decisive_and_tied():
    def rec(p, tie=False):
        return {"recommended": p, "tie": tie, "tied_with": ""}

    b = {("m", "w", 0.5): rec("a"), ("m", "w", 1.0): rec("a", True), ("m", "v", 1.0): rec("c")}
    a = {("m", "w", 0.5): rec("b"), ("m", "w", 1.0): rec("b"), ("m", "v", 1.0): rec("c")}
    c = answers.compare_recommend(b, a)
    assert c["changed"] == 2
    assert c["decisive_both"] == ["m w 0.5: a → b"]


def test_map_changes_are_split_by_kind():
    cells_b = {
        (1, 1): ("win", "a"),
        (1, 2): ("tie", "a"),
        (2, 1): ("win", "a"),
        (2, 2): ("tie", "b"),
    }
    cells_a = {
        (1, 1): ("win", "b"),
        (1, 2): ("tie", "c"),
        (2, 1): ("tie", "a"),
        (2, 2): ("tie", "b"),
    }
    c = answers.compare_map(
        {"cells": cells_b, "breakeven_gbps": [0.6]}, {"cells": cells_a, "breakeven_gbps": [0.8]}
    )
    assert (c["changed"], c["state_changed"], c["win_flips"]) == (3, 1, 1)


def test_runs_compare_only_runs_stable_on_both_sides():
    def run(ttft, stable=True):
        return {"ttft_mean_ms": ttft, "tpot_mean_ms": 10.0, "stable": stable}

    b = {1: run(100.0), 2: run(100.0, False), 3: run(50.0)}
    a = {1: run(110.0), 2: run(1.0), 3: run(40.0, False)}
    c = answers.compare_runs(b, a)
    assert c["stable_in_both"] == 1 and c["ttft_mean_ms_change"].startswith("+10.0 to +10.0")
    assert (c["became_unstable"], c["became_stable"]) == (1, 1)
    assert not math.isnan(float(c["tpot_mean_pct_change"].split()[0].replace("+", "")))
