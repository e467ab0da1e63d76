"""benchmarks/bench/verdicts.py: each figure is read from the section that measures it and
judged against the target docs/performance.md states."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

from bench.verdicts import verdicts  # noqa: E402


def test_the_event_cost_is_the_costliest_batch_over_the_floor():
    r = {"events": {"rows": [{"ns_per_event": 400.0}, {"ns_per_event": 600.0}],
                    "floor": {"ns_per_event": 100.0}}}  # fmt: skip
    v = verdicts(r)["events_over_floor_max"]
    assert v["value"] == 6.0 and v["target"] == "<= 3" and v["met"] is False


def test_first_run_after_install_is_judged_against_the_warm_one():
    v = verdicts({"cold": {"first_sweep_s": 16.5, "second_sweep_s": 14.0}})
    assert v["cold_first_over_warm_sweep_s"]["value"] == 2.5
    assert v["cold_first_over_warm_sweep_s"]["met"] is True


def test_the_timeline_section_wins_over_the_commands_ratio_and_targets_1_5():
    r = {"timeline": {"wall_s": {"ratio": 1.6}}, "commands": {"timeline_over_run": 1.2}}
    v = verdicts(r)["timeline_over_run"]
    assert v["value"] == 1.6 and v["met"] is False and v["target"] == "<= 1.5"


def test_the_large_runs_are_read_from_the_scale_section():
    r = {"scale": {"run_1m_all_policies": {"wall_s": 9.0},
                   "run_10m_one_policy": {"wall_s": 31.0, "peak_rss_mb": 4000.0}}}  # fmt: skip
    v = verdicts(r)
    assert v["run_1m_all_policies_wall_s"]["met"] is True
    assert v["run_10m_one_policy_wall_s"]["met"] is False
    assert v["run_10m_one_policy_peak_rss_mb"]["met"] is True
    assert verdicts({})["study_wall_s"]["met"] is None  # not measured: no verdict
