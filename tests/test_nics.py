"""Shared NIC groups (docs/model.md, "NICs"): hand-calculated link figures.

qwen2-0.5b's KV per token, from its config.json (24 layers, 2 KV heads, head_dim 64,
bf16): 2 (K and V) × 24 × 2 × 64 × 2 bytes = 12,288 bytes, so a 64-token prompt moves
786,432 bytes.
"""

from __future__ import annotations

import numpy as np
import pytest

from prefixbench import catalog
from prefixbench.physics.costmodel import Efficiency, InstanceCost
from prefixbench.scenario.loader import load_scenario
from prefixbench.study.runs import run_scenario
from prefixbench.system.runner import EngineConfig, prepare, simulate
from prefixbench.workload.requests import Requests

KV_BPT = 2 * 24 * 2 * 64 * 2  # 12,288 bytes per token
PROMPT = 64
NBYTES = PROMPT * KV_BPT  # 786,432 bytes


def _requests(arrival: np.ndarray) -> Requests:
    n = len(arrival)
    return Requests(
        arrival=arrival,
        prompt_len=np.full(n, PROMPT, dtype=np.int64),
        output_len=np.full(n, 1, dtype=np.int64),
        blk_ptr=np.zeros(n + 1, dtype=np.int64),
        blk_hash=np.zeros(0, dtype=np.int64),
        blk_tokens=np.zeros(0, dtype=np.int64),
        prefix_id=np.full(n, -1, dtype=np.int64),
    )


def _cfg(p_dev: int = 8, d_dev: int = 1, **kw) -> EngineConfig:
    eff = Efficiency(prefill_overhead_ms=0.0, decode_overhead_ms=0.0)
    model = catalog.get_model("qwen2-0.5b")
    h100 = catalog.get_accelerator("h100-sxm")
    base = dict(
        policy="transfer_per_request",
        prefill_cost=InstanceCost.build(model, h100, p_dev, eff),
        decode_cost=InstanceCost.build(model, h100, d_dev, eff),
        link_latency_s=0.0,
        max_batch=10**6,
        prefill_token_budget=PROMPT,
        budget_tokens=10**12,
    )
    base.update(kw)
    return EngineConfig(**base)


def test_kv_bytes_per_token_is_the_hand_figure():
    assert _cfg().decode_cost.kv_bpt == KV_BPT


def test_1p2d_moves_twice_the_bytes_through_the_prefill_nic():
    """Same per-decode load (25 req/s each, 10 ms per transfer): each decode NIC is 25%
    busy, but the one prefill NIC carries both decodes' KV and is 50% busy. Periodic
    arrivals 20 ms apart never queue, so the figures are exact up to the window's edges."""
    bw = NBYTES / 0.010  # S = 10 ms per transfer on one NIC
    n = 4000
    one = simulate(_requests(np.arange(n) * 0.040), _cfg(link_bytes_per_s=bw))
    two = simulate(
        _requests(np.arange(2 * n) * 0.020),
        _cfg(link_bytes_per_s=bw, n_decode=2, decode_router="round_robin"),
    )
    assert one.stats["link_util"] == pytest.approx(0.25, rel=1e-3)
    assert two.stats["link_util_egress"] == pytest.approx(0.50, rel=1e-3)
    assert two.stats["link_util_ingress"] == pytest.approx(0.25, rel=1e-3)
    assert two.stats["link_util"] == pytest.approx(2 * one.stats["link_util"], rel=1e-3)
    # every byte of both decodes left through prefill instance 0
    moved = two.columns["transfer_tokens"].sum() * KV_BPT
    assert moved == 2 * n * NBYTES
    # the old private-path model reported 0.25 per path: capacity grew with D
    old = simulate(
        _requests(np.arange(2 * n) * 0.020),
        _cfg(
            link_bytes_per_s=bw, n_decode=2, decode_router="round_robin",
            link_topology="private_paths",
        ),
    )  # fmt: skip
    assert old.stats["link_util"] == pytest.approx(0.25, rel=1e-3)


@pytest.mark.parametrize("nics, seconds", [(1, 786_432 / 1e9), (8, 786_432 / 8 / 1e9)])
def test_kv_is_sharded_across_an_instances_nics(nics, seconds):
    """8 devices with 8 NICs of 1 GB/s: each NIC moves 1/8 of the 786,432 bytes in
    parallel, 98.304 µs instead of 786.432 µs."""
    cfg = _cfg(8, 8, link_bytes_per_s=1e9, nics_prefill=nics, nics_decode=nics)
    c = simulate(_requests(np.array([0.0])), cfg).columns
    assert c["t_transfer_end"][0] - c["t_transfer_start"][0] == pytest.approx(seconds, rel=1e-12)


def test_the_smaller_nic_group_bounds_a_transfer():
    """8 NICs out, 1 NIC in: the receiving NIC takes every byte (786.432 µs)."""
    cfg = _cfg(8, 1, link_bytes_per_s=1e9, nics_prefill=8, nics_decode=1)
    c = simulate(_requests(np.array([0.0])), cfg).columns
    assert c["t_transfer_end"][0] - c["t_transfer_start"][0] == pytest.approx(786.432e-6)


def test_default_nics_follow_the_device_count():
    """Scenario level: nics_per_instance defaults to one per device."""
    s = load_scenario(
        "medium_chat",
        [
            "run.requests=50",
            "run.warmup_requests=0",
            "cluster.prefill.devices=4",  # tp 4 divides qwen2-1.5b's 12 heads
            "cluster.decode.devices=4",
        ],
    )
    base = prepare(s).base
    assert (base.nics_prefill, base.nics_decode, base.link_topology) == (4, 4, "shared_nics")
    s1 = load_scenario(
        "medium_chat",
        ["run.requests=50", "run.warmup_requests=0", "cluster.link.nics_per_instance=1"],
    )
    assert prepare(s1).base.nics_decode == 1


def test_channels_need_private_paths():
    from prefixbench.errors import PrefixbenchError

    with pytest.raises((PrefixbenchError, ValueError), match="private_paths"):
        load_scenario("medium_chat", ["cluster.link.channels=2"])


def test_2p1d_link_wait_matches_md1_on_the_shared_ingress():
    """2P1D, Poisson at λ = 50 req/s, S = 10 ms: both prefills feed the decode's one
    ingress NIC group, ρ = 0.5. A transfer also holds its sender's egress, but that is
    never free later than the ingress (every transfer that set it also set the ingress),
    so the ingress is an M/D/1 queue: Pollaczek–Khinchine W = ρS / (2(1 − ρ)) = 5 ms.
    (Private paths would give ρ = 0.25 per path and W = 1.67 ms.) Prefill steps are
    ~53 µs, so link arrivals are Poisson up to tiny shifts (tests/test_engine_oracles.py)."""
    service, lam, n = 0.010, 50.0, 50_000
    arrival = np.cumsum(np.random.default_rng(11).exponential(1.0 / lam, n))
    cfg = _cfg(link_bytes_per_s=NBYTES / service, n_prefill=2, prefill_router="round_robin")
    c = simulate(_requests(arrival), cfg).columns
    wait = c["t_transfer_start"] - c["t_admit"]
    assert wait.mean() == pytest.approx(0.005, rel=0.05)
    assert np.mean(wait > 1e-12) == pytest.approx(0.5, abs=0.02)  # M/D/1: P(wait > 0) = ρ


SEED3_EXP3 = [  # seed 003 experiment 3: Llama-3-70B, 4×H100 each, 2P1D, 6 req/s, 25 GbE
    "cluster.prefill.accelerator=h100-sxm",
    "cluster.decode.accelerator=h100-sxm",
    "cluster.prefill_instances=2",
    "workload.arrivals.rate=6",
    "cluster.link.name=eth-25g",
    "run.requests=800",
    "run.warmup_requests=100",
]


def test_seed3_experiment3_saturates_one_shared_nic():
    """The seed's simulator has one 25 GbE link per node. Per request: ~2,048 tokens ×
    327,680 bytes (Llama-3.1-70B: 80 layers × 8 KV heads × 128 × 2 × 2 bytes) = 671 MB,
    215 ms at 3.125 GB/s; at 6 req/s into the one decode node's NIC ρ ≈ 1.3 > 1."""
    s = load_scenario("optical_mac", [*SEED3_EXP3, "cluster.link.nics_per_instance=1"])
    row = run_scenario(s, ["transfer_per_request"], keep_requests=False).summary.to_dicts()[0]
    assert row["link_util"] > 0.9
    assert row["link_util_ingress"] == row["link_util"]  # the decode node's NIC is the hot spot
    assert row["stable"] is False and row["saturated_stage"] == "link"
    assert row["slo_attainment"] < 0.2


def test_seed3_experiment3_with_one_nic_per_h100_keeps_up():
    """Default NICs (one per H100, 4 per instance): 671 MB over 4 × 3.125 GB/s is 54 ms,
    ρ ≈ 0.32 at the decode node's ingress."""
    s = load_scenario("optical_mac", SEED3_EXP3)
    row = run_scenario(s, ["transfer_per_request"], keep_requests=False).summary.to_dicts()[0]
    assert 0.2 < row["link_util"] < 0.45


def test_crossover_shards_the_prefix_over_the_decode_instances_nics():
    """qwen2-0.5b over 25 GbE (3.125 GB/s, latency from the catalog): a 2,048-token prefix
    is 2,048 × 12,288 = 25,165,824 bytes, 8.053 ms on one NIC and 1.007 ms on 8."""
    from prefixbench.study.crossover import analytic_row

    lat_ms = catalog.get_link("eth-25g").latency_us / 1e3
    one = analytic_row("qwen2-0.5b", "h100-sxm", "eth-25g", devices=8, nics=1)
    eight = analytic_row("qwen2-0.5b", "h100-sxm", "eth-25g", devices=8)
    assert eight["nics"] == 8 and one["nics"] == 1
    assert one["transfer_ms_at_ref"] == pytest.approx(25_165_824 / 3.125e9 * 1e3 + lat_ms)
    assert eight["transfer_ms_at_ref"] == pytest.approx(25_165_824 / 8 / 3.125e9 * 1e3 + lat_ms)
    assert eight["recompute_ms_at_ref"] == one["recompute_ms_at_ref"]
    # the tie bandwidth is per NIC: 8 NICs tie at an eighth of one NIC's figure
    assert eight["tie_bandwidth_gbytes_per_s"] == pytest.approx(
        one["tie_bandwidth_gbytes_per_s"] / 8
    )
