"""Output invariants (metrics/invariants.py): every summary row is checked before it is
written; a violation raises in tests and --debug and is reported otherwise."""

from __future__ import annotations

import warnings

import pytest

from prefixbench.metrics import invariants as inv
from prefixbench.scenario.loader import load_scenario
from prefixbench.study.runs import run_scenario

GOOD = {"decode_util": 0.5, "decode_mbu_busy": 1.0, "ttft_mean_ms": 3.0, "prewarm_s": 0.0,
        "replica_hit_rate": 0.0, "goodput_rps": 2.0, "throughput_rps": 2.0,
        "wait_growth_ms": -4.0, "bound_share": -2.0, "rho_decode_slots": 1.7}  # fmt: skip


@pytest.mark.parametrize(
    "key,value",
    [("decode_mbu_busy", 1.37), ("prefill_mfu_inst_max", 1.12), ("decode_mfu_inst_min", 141204.0),
     ("decode_util_max", -0.1), ("prefill_hit_rate", 1.5), ("ttft_mean_ms", -1.0),
     ("e2e_p99_ms", float("inf")), ("goodput_rps", 3.0), ("slo_attainment", 2.0)],
)  # fmt: skip
def test_each_broken_invariant_is_caught(key, value):
    assert inv.violations(GOOD) == []
    bad = {**GOOD, key: value}
    assert len(inv.violations(bad)) == 1 and key in inv.violations(bad)[0]
    with pytest.raises(inv.InvariantError, match=key):
        inv.check_row(bad, "policy x")


def test_outside_strict_mode_a_violation_is_reported_not_silent(monkeypatch):
    monkeypatch.delenv("PREFIXBENCH_STRICT")
    with pytest.warns(RuntimeWarning, match="decode_mbu_busy = 1.37"):
        inv.check_row({**GOOD, "decode_mbu_busy": 1.37}, "policy x")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        inv.check_row(GOOD, "policy x")


@pytest.mark.parametrize(
    "preset,sets",
    [("tool_call", []), ("enterprise_hotset", ["cluster.decode_instances=3"]),
     ("medium_chat", ["cluster.mode=colocated"])],
)  # fmt: skip
def test_decode_util_lies_between_its_own_min_and_max(preset, sets):
    """decode_util (the mean of the instances' busy fractions) and decode_util_min/max are
    one figure: with one instance all three agree, with several the mean lies between."""
    s = load_scenario(preset, ["run.requests=400", "run.warmup_requests=40", *sets])
    for row in run_scenario(s, ["recompute_on_decode"], keep_requests=False).summary.to_dicts():
        for role in ("decode", "prefill"):
            lo, mid, hi = row[f"{role}_util_min"], row[f"{role}_util"], row[f"{role}_util_max"]
            assert lo - 1e-12 <= mid <= hi + 1e-12, (role, lo, mid, hi)


@pytest.mark.parametrize(
    "preset,sets,policy",
    [("tool_call", ["run.requests=3", "run.warmup_requests=0"], "transfer_per_request"),
     ("tool_call", ["run.requests=3", "run.warmup_requests=0", "workload.arrivals.rate=100"],
      "conditional_disagg"),
     ("multi_turn_chat", ["run.requests=5", "run.warmup_requests=1",
                          "workload.arrivals.rate=100"], "conditional_disagg"),
     ("tool_call", ["run.requests=10", "run.warmup_requests=1", "workload.arrivals.rate=100",
                    "cluster.chunk_token_budget=65536"], "recompute_on_decode"),
     ("medium_chat", ["run.requests=5", "run.warmup_requests=1", "cluster.mode=colocated",
                      "workload.arrivals.rate=100"], "transfer_per_request")],
)  # fmt: skip
def test_work_of_a_step_past_the_window_is_clipped_like_its_busy_time(preset, sets, policy):
    """A step (a prefill, a recompute-only step on an empty decode batch, a local prefill)
    that starts in the steady window and runs past its end counts only its share of FLOPs
    and bytes inside: no instance does more work than its busy time at the datasheet peak,
    so MFU, MBU and decode_mbu_busy stay in [0, 1] even when the window is one step long."""
    from prefixbench import catalog
    from prefixbench.system.runner import prepare, simulate_policy

    prep = prepare(load_scenario(preset, sets))
    st = simulate_policy(prep, policy).stats
    c = prep.scenario.cluster
    roles = [("decode", c.decode)] + ([] if c.mode == "colocated" else [("prefill", c.prefill)])
    for role, spec in roles:
        dev = catalog.get_accelerator(spec.accelerator)
        flops_peak = dev.peak_tflops * 1e12 * spec.devices * 2.01  # FP8 peak: 2.004x (L4)
        bw = dev.hbm_gbps * 1e9 * spec.devices
        work = zip(st[f"{role}_busy_s"], st[f"{role}_flops"], st[f"{role}_bytes"], strict=True)
        for busy, fl, by in work:
            assert by <= busy * bw * (1 + 1e-9), (role, by, busy * bw)
            assert fl <= busy * flops_peak * (1 + 1e-9), (role, fl, busy * flops_peak)
    rows = run_scenario(load_scenario(preset, sets), [policy], keep_requests=False).summary
    for row in rows.to_dicts():
        assert inv.violations(row) == [], inv.violations(row)


@pytest.mark.parametrize(
    "preset,sets,policy",
    [("tool_call", ["workload.arrivals.rate=0.5"], "recompute_on_decode"),
     ("multi_turn_chat", ["cluster.decode_instances=2"], "conditional_disagg")],
)  # fmt: skip
def test_busy_time_counts_every_step_that_runs_empty_batch_included(preset, sets, policy):
    """A decode instance's busy time is the length of every decode segment and every stall
    (recompute-only and local-prefill steps on an empty batch included) started in the
    steady window, clipped at its end: read independently off the timeline's records."""
    import numpy as np

    from prefixbench.engine import layout as lay
    from prefixbench.engine.recorder import Recorder
    from prefixbench.system.runner import prepare, simulate_policy

    prep = prepare(load_scenario(preset, ["run.requests=60", "run.warmup_requests=6", *sets]))
    rec = Recorder()
    st = simulate_policy(prep, policy, recorder=rec).stats
    tlf = rec.tlf[: 2 * rec.records].reshape(-1, 2)
    tli = rec.tli[: lay.NTL_I * rec.records].reshape(-1, lay.NTL_I)
    steps = np.isin(tli[:, 0], [lay.REC_DECODE, lay.REC_STALL])
    empty = steps & (tli[:, 0] == lay.REC_STALL) & (tli[:, 2] == 0)
    assert empty.any()  # the case under test happens: steps on an empty batch
    tw, ts = st["t_warm"], st["t_steady"]
    for d, busy in enumerate(st["decode_busy_s"]):
        m = steps & (tli[:, 1] == d) & (tlf[:, 0] >= tw) & (tlf[:, 0] < ts)
        assert busy == pytest.approx(float(np.sum(np.minimum(tlf[m, 1], ts) - tlf[m, 0])), rel=1e-9)
