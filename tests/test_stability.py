"""The stability verdict (docs/model.md, "Stability"), on both sides of the limit.

Expected utilisations are written from the raw numbers: Qwen2-0.5B keeps
2 · 24 layers · 2 KV heads · 64 head dims · 2 bytes = 12,288 bytes of KV per token
(its config.json: num_hidden_layers 24, num_key_value_heads 2, hidden_size 896 /
num_attention_heads 14 = head_dim 64, bfloat16).
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from prefixbench.cli import app
from prefixbench.metrics.stability import TREND_Z, queue_lengths, trend
from prefixbench.scenario.loader import load_scenario
from prefixbench.scenario.models import POLICIES
from prefixbench.study.runs import run_scenario

KV_BPT = 2 * 24 * 2 * 64 * 2  # bytes per token, Qwen2-0.5B (see the module docstring)
PROMPT = 1000  # tokens, fixed: every transfer is the same size (deterministic service)
BANDWIDTH = 0.1e9  # bytes/s, one channel
SERVICE_S = PROMPT * KV_BPT / BANDWIDTH  # 0.12288 s per transfer

runner = CliRunner(env={"COLUMNS": "80", "NO_COLOR": "1", "TERM": "dumb"})


def md1_link(rho: float, seed: int = 0, requests: int = 20_000) -> dict:
    """An M/D/1 queue on the KV link: Poisson arrivals, fixed transfers, one channel; the
    prefill and decode sides on H100s with a tiny output and ample memory."""
    sets = [
        "model=qwen2-0.5b",
        "cluster.prefill.accelerator=h100-sxm",
        "cluster.decode.accelerator=h100-sxm",
        f"cluster.link.bandwidth_gbps={BANDWIDTH / 1e9}",
        "cluster.link.latency_us=0",
        "cluster.link.channels=1",
        "memory.kv_budget_gb=60",  # the link queue never fills the decode memory
        "workload.share_fraction=0",
        f"workload.suffix_length={{kind: fixed, value: {PROMPT}}}",
        "workload.output_length={kind: fixed, value: 4}",
        f"workload.arrivals.rate={rho / SERVICE_S}",
        f"run.requests={requests}",
        "run.warmup_requests=1000",
        f"seed={seed}",
    ]
    s = load_scenario("medium_chat", sets)
    return run_scenario(s, ["transfer_per_request"], keep_requests=False).summary.to_dicts()[0]


@pytest.mark.parametrize("rho", [0.5, 0.9, 1.2])
def test_link_utilisation_is_offered_bytes_over_bandwidth(rho):
    row = md1_link(rho)
    # λ is measured from the arrivals, so ρ matches the nominal value to sampling error
    assert row["rho_link"] == pytest.approx(rho, rel=0.03)
    assert row["capacity_rps"] == pytest.approx(1 / SERVICE_S, rel=1e-9)  # B / bytes
    assert row["rho_decode_slots"] < 0.05 and row["rho_prefill"] < 0.05


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_md1_link_at_rho_09_over_a_long_run_is_stable(seed):
    row = md1_link(0.9, seed)
    assert row["stable"] is True and row["saturated_stage"] is None
    assert row["bottleneck_stage"] == "link"
    # the premise: a real M/D/1 queue, Pollaczek-Khinchine mean wait ρS / 2(1-ρ)
    rho = row["rho_link"]
    assert row["link_wait_ms"] == pytest.approx(rho * SERVICE_S / (2 * (1 - rho)) * 1e3, rel=0.2)


def test_md1_link_at_rho_05_raises_no_alarm():
    for seed in (0, 1):
        row = md1_link(0.5, seed)
        assert row["stable"] is True and row["saturated_stage"] is None


def test_md1_link_at_rho_12_is_unstable_on_both_counts():
    row = md1_link(1.2)
    assert row["stable"] is False and row["saturated_stage"] == "link"
    # the trend alone says so too: the link wait grows far beyond its noise
    assert row["wait_growth_stage"] == "link" and row["wait_growth_z"] > TREND_Z
    # a fluid queue: each arrival waits S − 1/λ longer than the one before, so the last third
    # of 19,000 steady requests waits about 2/3 · 19,000 · S · (1 − 1/ρ) more than the first
    expect = 2 / 3 * 19_000 * SERVICE_S * (1 - 1 / 1.2) * 1e3
    assert row["wait_growth_ms"] == pytest.approx(expect, rel=0.1)


def test_queue_length_is_littles_law():
    row = md1_link(0.9)
    lam = row["offered_rps"]
    assert row["queue_link_mean"] == pytest.approx(lam * row["link_wait_ms"] / 1e3, rel=0.05)


# ------------------------------------------------------------------ the statistics alone


def lindley_md1(rho: float, n: int, rng) -> np.ndarray:
    """Waits of an M/D/1 queue with unit service (Lindley recursion), warm-up dropped."""
    gaps = rng.exponential(1 / rho, n)
    w = np.zeros(n)
    for i in range(1, n):
        w[i] = max(0.0, w[i - 1] + 1.0 - gaps[i])
    return w[n // 10 :]


def test_trend_does_not_false_alarm_on_a_stable_md1():
    rng = np.random.default_rng(7)
    for rho in (0.5, 0.9):
        flagged = [trend(lindley_md1(rho, 10_000, rng), 1.0).growing for _ in range(30)]
        assert not any(flagged), rho


def test_trend_flags_an_overloaded_md1():
    rng = np.random.default_rng(7)
    flagged = [trend(lindley_md1(1.2, 10_000, rng), 1.0).growing for _ in range(10)]
    assert all(flagged)


def test_trend_needs_magnitude_as_well_as_significance():
    # a perfectly clean but tiny drift (1% of the service time) is not a runaway queue
    w = np.linspace(0.0, 0.01, 5000)
    t = trend(w, 1.0)
    assert t.z > TREND_Z and not t.growing


def test_queue_lengths_by_hand():
    # waits [0, 2), [1, 3), [2.5, 4) over the window [0, 4]: areas 2 + 2 + 1.5 = 5.5
    enter = np.array([0.0, 1.0, 2.5])
    leave = np.array([2.0, 3.0, 4.0])
    mean, peak = queue_lengths(enter, leave, 0.0, 4.0)
    assert mean == pytest.approx(5.5 / 4)
    assert peak == 2.0
    # a zero-length wait is no one waiting; NaN (never reached) is skipped
    mean, peak = queue_lengths(np.array([1.0, np.nan]), np.array([1.0, 2.0]), 0.0, 4.0)
    assert mean == 0.0 and peak == 0.0


# ------------------------------------------------------------------ the overloaded example

OVERLOADED = ["--set", "model=qwen2-7b", "--set", "memory.kv_budget_gb=8"]


def test_overloaded_example_is_flagged_with_the_decode_slots(tmp_path):
    # the example as filed, under the seed's reserve admission (its batch is full all
    # the time, so the hand figure below holds; paged preempts and stalls the batch instead)
    r = runner.invoke(
        app,
        [
            "run",
            "medium_chat",
            "-p",
            "transfer_per_request",
            *OVERLOADED,
            "--set",
            "memory.admission=reserve",
            "--set",
            "run.requests=3000",
            "--set",
            "run.warmup_requests=300",
            "--out",
            str(tmp_path),
            "--json",
        ],
    )
    assert r.exit_code == 0, r.stderr
    (res,) = json.loads(r.stdout)["results"]
    row = res["prefixbench"]
    assert row["stable"] is False and row["saturated_stage"] == "decode_slots"
    # Little's law by hand: λ · E[output] · (time per iteration of the full batch) / 64 slots,
    # the iteration time read off the run's own TPOT (the batch is full all the time)
    lam = row["offered_rps"]
    hand = lam * 160 * row["tpot_mean_ms"] / 1e3 / 64  # medium_chat: mean output 160 tokens
    assert hand > 2.0
    assert row["rho_decode_slots"] == pytest.approx(hand, rel=0.1)
    assert row["capacity_rps"] == pytest.approx(lam / row["rho_decode_slots"])
    assert "warning: transfer_per_request is unstable: the decode batch slots saturate" in r.stderr
    assert "it would be stable below about" in r.stderr


def test_recommend_refuses_to_rank_the_overloaded_example(tmp_path):
    import polars as pl

    from prefixbench.io.artifacts import read_artifact
    from prefixbench.study.crossover import run_crossover
    from prefixbench.study.report import write_report

    sweep = runner.invoke(
        app,
        [
            "sweep",
            "--models",
            "qwen2-7b",
            "--workloads",
            "medium_chat",
            "--budgets",
            "1.0",
            "--seeds",
            "0",
            "--set",
            "run.requests=1500",
            "--set",
            "run.warmup_requests=300",
            "--out",
            str(tmp_path),
            "-j",
            "1",
        ],
    )
    assert sweep.exit_code == 0, sweep.stderr
    assert "warning: 7 of 7 results (a policy on a scenario, over its seeds) are unstable (decode batch slots: 7)" in sweep.stderr
    agg = read_artifact(tmp_path / "agg.parquet", "agg")
    assert agg["stable"].to_list() == [False] * len(POLICIES)
    assert agg["unstable_seeds"].to_list() == [1] * len(POLICIES)
    assert set(agg["saturated_stage"]) == {"decode_slots"}
    runs = read_artifact(tmp_path / "runs.parquet", "runs")
    assert runs.filter(pl.col("stable")).height == 0

    base = [
        "recommend",
        "--results",
        str(tmp_path),
        "--model",
        "qwen2-7b",
        "--budget",
        "1",
        "--workload",
        "medium_chat",
    ]
    r = runner.invoke(app, [*base, "--json"])
    assert r.exit_code == 0, r.stderr
    (row,) = json.loads(r.stdout)
    assert row["recommended"] is None and row["runner_up"] is None
    assert "decode batch slots saturate" in row["reason"]
    assert "would be stable below about" in row["reason"]
    assert "warning: medium_chat: no recommendation" in r.stderr
    table = runner.invoke(app, base)
    assert table.exit_code == 0 and "none" in table.stdout

    run_crossover(tmp_path)
    text = write_report(tmp_path).read_text()
    assert "7 of 7 results (a policy on a scenario, over its seeds) are unstable" in text and "`none (unstable)`" in text


def test_admission_cliff_under_reject_is_a_loss_not_an_unstable_queue():
    # memory far below the offered KV demand rejects (a loss system: Erlang-style), but no
    # queue grows: the run is a steady state with a reject rate, not an overload
    s = load_scenario(
        "medium_chat",
        [
            "model=qwen2-1.5b",
            "memory.budget_factor=0.35",
            "memory.admission=reserve",
            "run.requests=3000",
            "run.warmup_requests=300",
        ],
    )
    (row,) = run_scenario(s, ["transfer_per_request"], keep_requests=False).summary.to_dicts()
    assert row["rho_decode_memory"] > 1.2 and row["reject_rate"] > 0.2
    assert row["rho_decode_slots"] < 1.0
    assert row["stable"] is True and row["bottleneck_stage"] == "decode_memory"


def test_admission_cliff_under_paged_is_an_unstable_queue():
    # the same run under paged KV (the default): what reserve rejected now queues for
    # memory, without end; the run is flagged, with memory as the saturated stage
    s = load_scenario(
        "medium_chat",
        [
            "model=qwen2-1.5b",
            "memory.budget_factor=0.35",
            "run.requests=3000",
            "run.warmup_requests=300",
        ],
    )
    assert s.memory.admission == "paged"
    (row,) = run_scenario(s, ["transfer_per_request"], keep_requests=False).summary.to_dicts()
    assert row["reject_rate"] == 0.0 and row["rho_decode_memory"] > 1.2
    assert row["stable"] is False and row["saturated_stage"] == "decode_memory"
    assert row["queue_admission_max"] > 100
    assert row["capacity_rps"] < row["offered_rps"]


def test_busy_union_by_hand():
    from prefixbench.metrics.stability import _union_length

    start, end = np.array([0.0, 1.0, 5.0, np.nan]), np.array([2.0, 3.0, 6.0, 1.0])
    assert _union_length(start, end, 0.0, 10.0) == pytest.approx(4.0)  # [0, 3) and [5, 6)
    assert _union_length(start, end, 2.5, 5.5) == pytest.approx(1.0)  # clipped


def test_two_prefill_instances_show_their_split():
    s = load_scenario(
        "enterprise_hotset",
        ["cluster.prefill_instances=2", "run.requests=2000", "run.warmup_requests=200"],
    )
    (row,) = run_scenario(s, ["transfer_per_request"], keep_requests=False).summary.to_dicts()
    # the engine's pool average is the mean of the two instances measured from timestamps
    assert row["prefill_util"] == pytest.approx(
        (row["prefill_util_min"] + row["prefill_util_max"]) / 2, rel=0.02
    )
    # least-tokens routing breaks ties to instance 0: at light load it takes most of the work
    assert row["prefill_util_max"] > 2 * row["prefill_util_min"]


def _queue_by_sort(enter, leave, t0, t1):
    """The queue sweep by its definition: every finite wait's leave and enter in one
    stable sort, leaves first at a tie, the count after each event."""
    ok = np.isfinite(enter) & np.isfinite(leave) & (leave > enter)
    a, z = enter[ok], leave[ok]
    area = float((np.clip(z, t0, t1) - np.clip(a, t0, t1)).clip(min=0.0).sum())
    if not len(a):
        return 0.0, 0.0
    times = np.concatenate([z, a])
    order = np.argsort(times, kind="stable")
    count = np.cumsum(np.where(order < len(z), -1.0, 1.0))
    t = times[order]
    inside = (t >= t0) & (t <= t1)
    before = np.searchsorted(t, t0, side="left")
    at_start = float(count[before - 1]) if before > 0 else 0.0
    peak = max(at_start, float(count[inside].max()) if inside.any() else 0.0)
    return area / max(t1 - t0, 1e-12), peak


def test_queue_sweep_matches_its_definition_with_ties():
    rng = np.random.default_rng(3)
    for n in (1, 7, 300):
        enter = rng.integers(0, 20, n).astype(np.float64)  # integer times: many ties
        leave = enter + rng.integers(0, 5, n)
        enter[rng.random(n) < 0.1] = np.nan
        for t0, t1 in ((0.0, 30.0), (5.0, 12.0), (12.0, 12.0)):
            assert queue_lengths(enter, leave, t0, t1) == _queue_by_sort(enter, leave, t0, t1)
