"""Power, the power cap and DVFS (docs/model.md §2.11): hand-calculated
coefficients, energy conservation, and seed 003's three qualitative findings."""

from __future__ import annotations

import math

import numpy as np
import pytest

from prefixbench.catalog.specs import AcceleratorSpec
from prefixbench.errors import CatalogError, PrefixbenchError
from prefixbench.physics.costmodel import Efficiency, InstanceCost
from prefixbench.physics.power import with_power
from prefixbench.scenario.loader import load_scenario
from prefixbench.study.runs import run_scenario
from prefixbench.system.runner import prepare

# H100 SXM, by hand from the datasheet (700 W, 989.5 dense TFLOP/s, 3,350 GB/s), the stated
# idle share (11.5 % of TDP) and HBM energy (3.9 pJ/bit), default efficiency (MBU 0.7,
# MFU 0.5): memory power 3.9e-12 * 8 * 3350e9 * 0.7 = 73.164 W, compute power
# 700 - 80.5 - 73.164 = 546.336 W.
H100_IDLE, H100_MEM = 80.5, 3.9e-12 * 8 * 3350e9 * 0.7
H100_COMP = 700.0 - H100_IDLE - H100_MEM

SEED = [  # seed 003's defaults (scenarios/seed003.yaml), short, at the GEMM MFU 0.5 the
    # figures below are written with
    "run.requests=400",
    "run.warmup_requests=40",
    "efficiency.mfu_prefill=0.5",
    "efficiency.mfu_decode=0.5",
]


def _row(*sets, policy="transfer_per_request"):
    s = load_scenario("seed003", [*SEED, *sets])
    return run_scenario(s, [policy], keep_requests=True, track_gaps=True)


def _summary(t) -> dict:
    return t.summary.to_dicts()[0]


def test_h100_figures_by_hand():
    prep = prepare(load_scenario("seed003", SEED))
    c = prep.base.decode_cost
    assert H100_MEM == pytest.approx(73.164, abs=1e-3)
    assert c.idle_w == pytest.approx(4 * 80.5)
    assert c.j_per_byte == pytest.approx(31.2e-12)
    assert c.j_per_flop == pytest.approx(H100_COMP / (989.5e12 * 0.5), rel=1e-12)
    assert c.clock == 1.0  # uncapped: capped at TDP, which a ridge step exactly draws


def test_cap_clock_by_hand():
    """400 W on an H100: (400 - 80.5 - 73.164) / 546.336 = 0.450887 of full compute power,
    above the voltage floor's 0.5^3, so clock = 0.450887^(1/3) = 0.766813."""
    x = (400 - H100_IDLE - H100_MEM) / H100_COMP
    assert x == pytest.approx(0.450887, abs=1e-6)
    prep = prepare(load_scenario("seed003", [*SEED, "cluster.prefill.power_cap_w=400"]))
    p = prep.base.prefill_cost
    assert p.clock == pytest.approx(0.766813, abs=1e-6)
    assert p.flops_rate_prefill == pytest.approx(989.5e12 * 4 * 0.5 * 0.766813, rel=1e-6)
    assert p.byte_rate == pytest.approx(3350e9 * 4 * 0.7)  # the memory clock is not capped
    # below the voltage floor: 160 W -> x = 6.336 / 546.336 = 0.011597 < 0.125, so the
    # clock is x / 0.5^2 = 0.046389
    prep = prepare(load_scenario("seed003", [*SEED, "cluster.decode.power_cap_w=160"]))
    assert prep.base.decode_cost.clock == pytest.approx(0.046389, abs=1e-6)


@pytest.mark.parametrize(
    "cap,message",
    [("701", "above the device's TDP"), ("150", "at or below idle plus memory power")],
)
def test_impossible_caps_refused(cap, message):
    with pytest.raises(PrefixbenchError, match=message):
        prepare(load_scenario("seed003", [*SEED, f"cluster.decode.power_cap_w={cap}"]))


def test_device_without_power_figures():
    dev = AcceleratorSpec(name="x", peak_tflops=100, hbm_gbps=1000, memory_gb=80)
    from prefixbench.catalog.models import MODELS

    m = next(iter(MODELS.values()))
    cost = InstanceCost.build(m, dev, 1, Efficiency())
    assert with_power(cost, dev, 1, Efficiency(), None, False, "cluster.decode") is cost
    with pytest.raises(CatalogError, match="no power figures"):
        with_power(cost, dev, 1, Efficiency(), 300.0, False, "cluster.decode")


def test_energy_is_conserved():
    """Per instance: idle power x window + the engine's dynamic joules; uncapped and without
    DVFS the dynamic joules exceed J/FLOP x FLOPs + J/byte x bytes of the engine's
    independent FLOP and byte counters, with the coefficients written by hand: those count
    the steady window (to the last arrival), energy the drain after it too (the exact
    account is test_energy_is_the_integral_of_power_over_the_whole_window)."""
    t = _row()
    row = _summary(t)
    st = t.stats["transfer_per_request"]
    window = st["t_end"] - st["t_warm"]
    j_flop, j_byte = H100_COMP / (989.5e12 * 0.5), 31.2e-12
    for role in ("prefill", "decode"):
        dyn = sum(st[f"{role}_energy_dyn_j"])
        by_hand = sum(st[f"{role}_flops"]) * j_flop + sum(st[f"{role}_bytes"]) * j_byte
        assert by_hand < dyn < 1.15 * by_hand  # the drain: 0.2% (prefill), 9.5% (decode)
        joules = 4 * 80.5 * window * len(st[f"{role}_flops"]) + dyn
        assert row[f"{role}_energy_j"] == pytest.approx(joules, rel=1e-9)
        assert row[f"{role}_power_mean_w"] * window == pytest.approx(joules, rel=1e-9)
    total = row["prefill_energy_j"] + row["decode_energy_j"] + row["link_energy_j"]
    assert row["energy_j"] == pytest.approx(total, rel=1e-12)
    assert row["power_mean_w"] * window == pytest.approx(total, rel=1e-9)
    # per output token of the measured (post-warm-up) requests that completed
    req = t.requests.filter(~t.requests["warmup"] & (t.requests["outcome"] == "completed"))
    tokens = req["output_tokens"].sum()
    assert row["energy_per_token_j"] == pytest.approx(total / tokens, rel=1e-9)
    # no step draws more than TDP (4 devices): the ridge calibration
    assert row["prefill_power_peak_w"] <= 4 * 700 * (1 + 1e-12)
    assert row["decode_power_peak_w"] <= 4 * 700 * (1 + 1e-12)


def test_dvfs_lowers_energy_not_latency():
    """Seed 003, experiment 5: DVFS on, energy per token drops, latency does not move."""
    base = _row()
    dvfs = _row("cluster.prefill.dvfs=true", "cluster.decode.dvfs=true")
    a, b = base.requests, dvfs.requests
    for col in ("t_first_token", "t_done"):
        assert a[col].to_list() == b[col].to_list()  # bit for bit
    ra, rb = _summary(base), _summary(dvfs)
    assert rb["energy_per_token_j"] < 0.97 * ra["energy_per_token_j"]
    assert rb["decode_power_mean_w"] < ra["decode_power_mean_w"]


def test_decode_cap_has_a_knee():
    """Seed 003: lowering the decode pool's cap barely changes TPOT until a knee, then it
    collapses. Here the knee sits between 250 and 200 W, above idle + HBM power (153.7 W on
    an H100): a small decode batch's GEMMs run at eff(b) = MFU · b / (b + 96), the compute
    of b + 96 tokens, which a lowered clock turns compute-bound."""
    tpot = {}
    for cap in (None, 300, 250, 200, 160):
        sets = [] if cap is None else [f"cluster.decode.power_cap_w={cap}"]
        tpot[cap] = _summary(_row(*sets))["tpot_p50_ms"]
    assert tpot[300] == pytest.approx(tpot[None], rel=0.01)
    assert tpot[250] == pytest.approx(tpot[None], rel=0.01)
    assert tpot[200] > 1.5 * tpot[None]
    assert tpot[160] > 2 * tpot[200]


def test_capping_everything_hurts_ttft():
    """Seed 003: a 400 W cap on every device hurts TTFT (prefill is compute-bound and runs
    near TDP) while TPOT barely moves (decode is memory-bound)."""
    base = _summary(_row())
    cap = _summary(_row("cluster.prefill.power_cap_w=400", "cluster.decode.power_cap_w=400"))
    assert cap["ttft_p50_ms"] > 1.3 * base["ttft_p50_ms"]
    assert cap["tpot_p50_ms"] == pytest.approx(base["tpot_p50_ms"], rel=0.01)
    assert cap["prefill_capped_share"] > 0.3 and base["prefill_capped_share"] == 0.0
    assert cap["prefill_power_peak_w"] <= 4 * 400 * (1 + 1e-9)  # the cap holds
    assert not math.isnan(cap["energy_per_token_j"])


def test_best_per_watt_by_hand():
    """capacity --per-watt: among probes within the SLOs, the most req/s per kW."""
    from prefixbench.study.capacity import Probe, best_per_watt

    probes = [
        Probe(4.0, 0.99, 4.0, 900, 18, power_w=2000.0),  # 2.0 req/s per kW
        Probe(5.0, 0.95, 5.0, 950, 19, power_w=2200.0),  # 2.273
        Probe(6.0, 0.80, 5.0, 1500, 19, power_w=2300.0),  # misses the target
        Probe(5.5, 0.92, 5.2, 990, 19, stable=False, power_w=2000.0),  # unstable
    ]
    best = best_per_watt(probes, 0.9)
    assert best.rate == 5.0
    assert best.goodput_per_kw == pytest.approx(5.0 / 2200.0 * 1e3)
    assert best_per_watt([Probe(4.0, 0.99, 4.0, 900, 18)], 0.9) is None  # no power figures


def test_user_hardware_file_with_power(tmp_path):
    """A hardware file's power figures load with the catalog's validation and drive the
    cap: 500 W TDP, 50 W idle, 4 pJ/bit at 2,000 GB/s and MBU 0.7 -> memory 44.8 W,
    compute 405.2 W; a 300 W cap gives x = (300 - 94.8) / 405.2 = 0.50642, clock 0.79708."""
    f = tmp_path / "chip.yaml"
    f.write_text(
        "hardware: accelerator\nname: chip\npeak_tflops: 500\nhbm_gbps: 2000\n"
        "memory_gb: 96\ntdp_w: 500\nidle_w: 50\nmemory_pj_per_bit: 4\nsource: user\n"
    )
    sets = [*SEED, f"cluster.decode.accelerator={f}", "cluster.decode.power_cap_w=300"]
    cost = prepare(load_scenario("seed003", sets)).base.decode_cost
    assert cost.clock == pytest.approx(((300 - 50 - 44.8) / 405.2) ** (1 / 3), rel=1e-9)
    assert cost.clock == pytest.approx(0.79708, abs=1e-5)
    f.write_text(f.read_text().replace("idle_w: 50", "idle_w: -5"))
    with pytest.raises(PrefixbenchError, match="idle_w"):
        prepare(load_scenario("seed003", sets))


def test_compare_reports_energy_beside_latency():
    """`compare` rows (and so its table and --json) carry the energy figures of each system;
    a pool on a device without power figures gets none and no totals are made up."""
    from prefixbench.study.compare import compare

    c = compare(load_scenario("seed003", SEED), "transfer_per_request")
    for row in c.rows:
        assert row["energy_per_token_j"] > 0 and row["ttft_p50_ms"] > 0, row["system"]
        assert row["power_mean_w"] * 0 == 0
    colocated = c.rows[1]
    assert colocated["prefill_energy_j"] is None  # one pool of colocated instances


def test_no_totals_without_every_pool(tmp_path):
    f = tmp_path / "bare.yaml"
    f.write_text(
        "hardware: accelerator\nname: bare\npeak_tflops: 989.5\nhbm_gbps: 3350\n"
        "memory_gb: 80\nsource: user\n"
    )
    row = _summary(_row(f"cluster.prefill.accelerator={f}"))
    assert row["decode_energy_j"] > 0 and row["prefill_energy_j"] is None
    assert row["energy_j"] is None and row["energy_per_token_j"] is None


def test_capacity_file_from_before_power_columns(tmp_path):
    """capacity --out appends to a capacity.parquet written before power_w existed."""
    import polars as pl

    from prefixbench.study.capacity import Probe
    from prefixbench.study.capacity_table import write_probes

    old = Probe(2.0, 0.95, 1.9, 500, 18)
    write_probes(tmp_path, "a", "transfer_per_request", 0.9, 2.0, [old])
    path = tmp_path / "capacity.parquet"
    from prefixbench.io.artifacts import write_atomic

    write_atomic(pl.read_parquet(path).drop("power_w", "energy_per_token_j"), path, "capacity")
    new = Probe(4.0, 0.95, 3.9, 500, 18, power_w=2000.0, energy_per_token_j=2.0)
    write_probes(tmp_path, "b", "transfer_per_request", 0.9, 4.0, [new])
    df = pl.read_parquet(path).sort("scenario")
    assert df["power_w"].to_list() == [None, 2000.0]


def test_energy_is_the_integral_of_power_over_the_whole_window():
    """Two requests on Qwen2-0.5B, one L4 each side (72 W TDP, 8.3 W idle, 7.8 pJ/bit; MFU
    0.5, MBU 0.7): memory power 62.4e-12 · 300e9 · 0.7 = 13.104 W, compute power 72 − 8.3 −
    13.104 = 50.596 W, so 50.596 / (121e12 · 0.5) J per FLOP and 62.4e-12 J per byte. The
    window runs from the first arrival (the end of warm-up) to the last token. Over it each
    instance draws idle power plus its steps' dynamic energy: two prefill steps (650 and
    4,000 new tokens) and three decode iterations per request (one sequence attending to
    prompt, prompt + 1, prompt + 2 tokens; the second joins after the first is done). All
    but the first prefill start after the last arrival, where energy once stopped while
    idle power ran to the end."""
    from test_engine_reference import DEFAULT_EFF, L4, QWEN05, efficiency
    from test_streaming import F_HEAD, F_LIN, WEIGHTS, A, K

    from prefixbench.engine import EngineConfig, simulate
    from prefixbench.physics.power import energy_figures
    from prefixbench.workload.requests import Requests

    e = efficiency(DEFAULT_EFF)
    cost = with_power(InstanceCost.build(QWEN05, L4, 1, e), L4, 1, e, None, False, "l4")
    cfg = EngineConfig(policy="transfer_per_request", prefill_cost=cost, decode_cost=cost)
    z = np.zeros(0, dtype=np.int64)
    prompts = np.array([650, 4000])
    two = np.ones(2, dtype=np.int64)
    req = Requests(np.array([0.5, 0.501]), prompts, 3 * two, np.zeros(3, np.int64), z, z, -two)
    res = simulate(req, cfg)
    st, cols = res.stats, res.columns
    assert cols["t_decode_start"][1] > cols["t_done"][0]  # no shared decode iteration
    window = float(cols["t_done"].max()) - 0.5
    assert st["t_warm"] == 0.5 and st["t_end"] - st["t_warm"] == pytest.approx(window)
    jf, jb = 50.596 / (121e12 * 0.5), 62.4e-12
    prefill = sum(
        (p * F_LIN + F_HEAD + A * p * (p + 1) / 2) * jf + (WEIGHTS + K * p) * jb for p in prompts
    )
    decode = sum(
        (F_LIN + F_HEAD + A * c) * jf + (WEIGHTS + K * c) * jb
        for p in prompts
        for c in (p, p + 1, p + 2)
    )
    out = energy_figures(st, cost, cost, 6, 4650 * K)
    assert out["prefill_energy_j"] == pytest.approx(8.3 * window + prefill, rel=1e-9)
    assert out["decode_energy_j"] == pytest.approx(8.3 * window + decode, rel=1e-9)
