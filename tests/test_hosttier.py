"""Decode cache tiers: delta transfer, the host-DRAM tier (replicate_tiered), its path.

Hand-written numbers come from the raw configs: Qwen2-0.5B has 24 layers, 2 KV heads of
64 dims in bf16, so one token's KV is 2 (K and V) x 24 x 2 x 64 x 2 bytes = 12,288 bytes;
the default link is 3.125 GB/s; PCIe Gen5 x16 is 32 GT/s x 16 x 128/130 / 8 = 63.0 GB/s.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from enginecases import instance_cost, make_requests
from typer.testing import CliRunner

from prefixbench.catalog.hostpaths import get_host_path
from prefixbench.cli import app
from prefixbench.engine import EngineConfig, simulate
from prefixbench.engine import layout as L
from prefixbench.engine.audit import audit
from prefixbench.errors import CatalogError, ScenarioError
from prefixbench.scenario.loader import load_scenario
from prefixbench.system.runner import prepare, simulate_policy

KV = 2 * 24 * 2 * 64 * 2  # bytes per token, Qwen2-0.5B
LINK = 3.125e9
PCIE5 = 63.0e9  # the catalog's rounding of 32e9 x 16 x 128 / 130 / 8 = 63.02e9
COST = instance_cost("qwen2-0.5b", "l4", 1, (0.5, 0.5, 0.7, 1.0, 1.0))
A, B, C, D, E = ((h, 64) for h in range(1, 6))


def _cfg(policy: str, **kw) -> EngineConfig:
    return EngineConfig(policy=policy, prefill_cost=COST, decode_cost=COST, **kw)


def test_pcie_and_c2c_presets_from_their_specs():
    assert get_host_path("pcie4-x16").bandwidth_gbps == pytest.approx(
        16 * 16 * 128 / 130 / 8, abs=0.05
    )
    assert get_host_path("pcie5-x16").bandwidth_gbps == pytest.approx(
        32 * 16 * 128 / 130 / 8, abs=0.05
    )
    assert get_host_path("nvlink-c2c").bandwidth_gbps == 900 / 2  # GH200: 900 GB/s both ways
    with pytest.raises(CatalogError, match="did you mean 'pcie5-x16'"):
        get_host_path("pcie5-x61")


def test_three_of_five_blocks_resident_moves_two_blocks_plus_suffix():
    """r0 leaves A, B, C resident; r1's chain is A..E plus a 40-token suffix: it is served 3
    blocks from HBM and moves 2 x 64 + 40 = 168 tokens = 2,064,384 bytes, which occupy the
    link for 2,064,384 / 3.125e9 s."""
    req = make_requests(
        [0.0, 1.0], [3 * 64 + 10, 5 * 64 + 40], [2, 2], [[A, B, C], [A, B, C, D, E]]
    )
    for policy in ("replicate_all_lru", "replicate_tiered"):
        cols = simulate(req, _cfg(policy, link_latency_s=1e-4)).columns
        assert cols["hbm_hit_blocks"].tolist() == [0, 3]
        assert cols["link_blocks"].tolist() == [3, 2]
        assert cols["host_hit_blocks"].tolist() == [0, 0]
        assert cols["transfer_tokens"][1] == 168
        moved = cols["t_transfer_end"][1] - cols["t_transfer_start"][1]
        assert moved == pytest.approx(168 * 12_288 / LINK + 1e-4, rel=1e-12)
    cols = simulate(req, _cfg("transfer_per_request")).columns
    assert cols["link_blocks"].tolist() == [3, 5] and cols["transfer_tokens"][1] == 360


def _spill_then_hit(**kw):
    """r0 leaves A, B, C (192 tokens) idle in HBM; r1 (no chain) needs 392 of a 400-token
    budget, so all three are trimmed (demoted under replicate_tiered); r2 wants A, B, C again
    long after r1 finished."""
    req = make_requests([0.0, 1.0, 3.0], [200, 390, 200], [2, 2, 2], [[A, B, C], [], [A, B, C]])
    cfg = _cfg("replicate_tiered", budget_tokens=400, host_kv_tokens=1000, **kw)
    return req, simulate(req, cfg, keep_state=True)


def test_host_hit_costs_the_promotion_time_of_the_path():
    """r2's 3 blocks come back from host DRAM: 192 x 12,288 bytes over PCIe Gen5 x16 plus its
    1 µs latency, which lands after the 8-token suffix crosses the link (31 µs), so r2's KV is
    ready 192 x 12,288 / 63.0e9 s + 1 µs after admission."""
    req, res = _spill_then_hit()
    cols = res.columns
    assert cols["host_hit_blocks"].tolist() == [0, 0, 3]
    assert cols["host_hit_tokens"][2] == 192
    assert cols["hbm_hit_blocks"][2] == 0 and cols["link_blocks"][2] == 0
    assert cols["transfer_tokens"][2] == 8
    ready = cols["t_transfer_end"][2] - cols["t_admit"][2]
    assert ready == pytest.approx(192 * 12_288 / PCIE5 + 1e-6, rel=1e-9)
    # the demotions of A, B, C at r1's admission and the promotion: 2 x 192 tokens
    assert res.stats["host_path_bytes"] == 2 * 192 * 12_288
    assert res.stats["peak_host_tokens"] == 192
    assert audit(res.state) == []


def test_a_promotion_slower_than_the_link_falls_back_to_the_transfer():
    """At 0.1 GB/s the promotion would take 192 x 12,288 / 1e8 = 23.6 ms, the whole 200-token
    prompt crosses the 3.125 GB/s link in 0.79 ms: r2 sends everything and its host copies
    leave the pool (the blocks are in HBM now; a block is in one tier at a time)."""
    req, res = _spill_then_hit(host_path_bytes_per_s=0.1e9)
    cols = res.columns
    assert cols["host_hit_blocks"][2] == 0 and cols["link_blocks"][2] == 3
    assert cols["transfer_tokens"][2] == 200
    moved = cols["t_transfer_end"][2] - cols["t_transfer_start"][2]
    assert moved == pytest.approx(200 * 12_288 / LINK, rel=1e-12)
    assert res.state.IS[L.DI0 + L.D_HUSED] == 0
    assert audit(res.state) == []


def test_all_lru_drops_what_tiered_demotes():
    req = make_requests([0.0, 1.0, 3.0], [200, 390, 200], [2, 2, 2], [[A, B, C], [], [A, B, C]])
    cols = simulate(req, _cfg("replicate_all_lru", budget_tokens=400)).columns
    assert cols["link_blocks"][2] == 3 and cols["transfer_tokens"][2] == 200


def _tight(*over: str):
    return load_scenario(
        "multi_turn_chat",
        ["run.requests=400", "run.warmup_requests=40", "memory.budget_factor=0.35", *over],
    )


def test_no_host_pool_is_all_lru_bit_for_bit():
    prep = prepare(_tight("memory.host_kv_gb=0"))
    lru = simulate_policy(prep, "replicate_all_lru", track_gaps=True)
    tiered = simulate_policy(prep, "replicate_tiered", track_gaps=True)
    for k, a in lru.columns.items():
        assert np.array_equal(a, tiered.columns[k], equal_nan=True), k
    assert lru.stats == tiered.stats


def test_tiers_are_disjoint_and_within_capacity_on_a_tight_multi_turn_run():
    prep = prepare(_tight("memory.host_kv_gb=0.05"))
    res = simulate(
        prep.requests, dataclasses.replace(prep.base, policy="replicate_tiered"), keep_state=True
    )
    assert res.columns["host_hit_blocks"].sum() > 0  # the tier is exercised
    assert 0 < res.stats["peak_host_tokens"] <= prep.base.host_kv_tokens
    assert audit(res.state) == []  # includes: no block in HBM and host at once


def test_host_pool_larger_than_host_memory_is_refused():
    with pytest.raises(ScenarioError) as e:
        prepare(_tight("memory.host_kv_gb=300"))  # an L4 instance: 256 GB of host DRAM
    assert e.value.where == "memory.host_kv_gb"
    prep = prepare(_tight("memory.host_kv_gb=300", "cluster.decode.host_memory_gb=512"))
    assert prep.base.host_kv_tokens == int(300e9 / (2 * 28 * 2 * 128 * 2))  # qwen2-1.5b


def test_cli_refuses_bad_host_tier_input_in_one_line():
    r = CliRunner().invoke(
        app,
        [
            "run",
            "multi_turn_chat",
            "--set",
            "memory.host_kv_gb=300",
            "--set",
            "run.requests=50",
            "--set",
            "run.warmup_requests=0",
        ],
    )
    assert r.exit_code != 0
    assert "memory.host_kv_gb" in r.output and "Traceback" not in r.output
    r = CliRunner().invoke(
        app,
        [
            "run",
            "multi_turn_chat",
            "--set",
            "cluster.decode.host_path=pcie5",
            "--set",
            "run.requests=50",
            "--set",
            "run.warmup_requests=0",
        ],
    )
    assert r.exit_code != 0
    assert "did you mean" in r.output and "host_path" in r.output and "Traceback" not in r.output


def test_a_promotion_queues_behind_the_demotion_its_admission_caused():
    """r2 leaves X (256 tokens) idle; r3 wants A, B, C back from host DRAM but needs room, so
    X is trimmed first and its demotion holds the host path: the promotion starts when that
    copy is done, and r3's KV is ready (256 + 192) x 12,288 / 63.0e9 s + 1 µs after
    admission (the demotion's own latency is pipelined, as on the link)."""
    x = (9, 256)
    req = make_requests(
        [0.0, 1.0, 2.0, 3.0],
        [200, 390, 300, 200],
        [2, 2, 2, 2],
        [[A, B, C], [], [x], [A, B, C]],
    )
    cfg = _cfg("replicate_tiered", budget_tokens=400, host_kv_tokens=1000)
    res = simulate(req, cfg, keep_state=True)
    cols = res.columns
    assert cols["host_hit_blocks"][3] == 3 and cols["persisted_tokens"][2] == 256
    ready = cols["t_transfer_end"][3] - cols["t_admit"][3]
    assert ready == pytest.approx((256 + 192) * 12_288 / PCIE5 + 1e-6, rel=1e-9)
    assert res.state.IS[L.DI0 + L.D_HUSED] == 256  # X is in the pool now, A, B, C in HBM
    assert audit(res.state) == []


def _cost_aware_spill(**kw):
    """cost_aware keeps A, B, C from r0 (it keeps every block), r1 hits them in HBM, r2
    trims them into the host tier, and r3 wants them again: HBM miss, host hit,
    prefill-cache hit."""
    req = make_requests(
        [0.0, 0.5, 1.0, 3.0],
        [200, 200, 390, 200],
        [2, 2, 2, 2],
        [[A, B, C], [A, B, C], [], [A, B, C]],
    )
    cfg = _cfg("cost_aware", budget_tokens=400, host_kv_tokens=1000, **kw)
    return simulate(req, cfg, keep_state=True)


def test_cost_aware_promotes_from_the_host_tier_when_that_is_cheapest():
    """r3's options: send 200 tokens (200 x 12,288 / 3.125e9 = 0.79 ms), promote the 192
    host tokens over PCIe Gen5 (192 x 12,288 / 63.0e9 + 1 µs = 38.4 µs, after the 8-token
    suffix's 31.5 µs on the link), or rebuild 192 tokens on the L4 (milliseconds): it
    promotes, and its KV is ready when the promotion lands."""
    res = _cost_aware_spill()
    cols = res.columns
    assert cols["persisted_tokens"][0] == 192 and cols["hbm_hit_blocks"][1] == 3
    assert cols["host_hit_blocks"][3] == 3 and cols["host_hit_tokens"][3] == 192
    assert cols["transfer_tokens"][3] == 8 and cols["recompute_tokens"][3] == 0
    ready = cols["t_transfer_end"][3] - cols["t_admit"][3]
    assert ready == pytest.approx(192 * 12_288 / PCIE5 + 1e-6, rel=1e-9)
    assert audit(res.state) == []


def test_cost_aware_sends_when_the_host_path_is_slower_than_the_link():
    """At 0.1 GB/s the promotion takes 23.6 ms against 0.79 ms to send all 200 tokens:
    cost_aware sends them."""
    cols = _cost_aware_spill(host_path_bytes_per_s=0.1e9).columns
    assert cols["host_hit_blocks"][3] == 0 and cols["transfer_tokens"][3] == 200
    assert cols["recompute_tokens"][3] == 0


def _write_case(policy: str, budget: int):
    """r0 (t=0): chain A (64 tokens) + 6, 2 output tokens, keeps A. r1 (t=10): chain B + 6.
    With a budget of 100 r1's 72 tokens do not fit beside idle A (36 free): its admission
    trims A into the host pool. The host path is 1 GB/s (latency 1 us), so A's copy,
    64 x 12,288 = 786,432 bytes, takes 786.432 us; r1's 70 tokens take 860,160 / 3.125e9
    = 275.25 us on the link."""
    req = make_requests([0.0, 10.0], [70, 70], [2, 2], [[A], [B]])
    cfg = _cfg(
        "replicate_tiered",
        budget_tokens=budget,
        host_kv_tokens=10**6,
        host_path_bytes_per_s=1e9,
        host_path_latency_s=1e-6,
        host_write_policy=policy,
    )
    return simulate(req, cfg)


def test_write_back_reuses_the_trimmed_hbm_only_once_its_copy_is_done():
    """write_back (and write_through_selective, A never being reused): A's copy starts at
    r1's admission, and r1's KV is in when that copy lands, 787.432 us later, not when its
    own transfer does (275.25 us)."""
    for policy in ("write_back", "write_through_selective"):
        res = _write_case(policy, 100)
        c = res.columns
        assert c["t_transfer_end"][1] - c["t_admit"][1] == pytest.approx(
            64 * KV / 1e9 + 1e-6, rel=1e-9
        )
        assert res.stats["host_path_bytes"] == 64 * KV


def test_write_through_copies_at_finish_so_the_trim_waits_for_nothing():
    """write_through: A's copy is written when r0 finishes (long before t=10), so r1's trim
    queues no copy and its KV is in after its own transfer, 275.25 us. The path moves each
    kept block once, at its request's finish: A, then B."""
    res = _write_case("write_through", 100)
    c = res.columns
    assert c["t_transfer_end"][1] - c["t_admit"][1] == pytest.approx(70 * KV / LINK, rel=1e-9)
    assert res.stats["host_path_bytes"] == 2 * 64 * KV


def test_write_through_selective_writes_on_the_first_reuse():
    """With room for both (budget 1,000) and r1's chain A again: selective writes A when r1
    hits it; write_back never touches the path."""
    req = make_requests([0.0, 10.0], [70, 70], [2, 2], [[A], [A]])
    for policy, moved in (("write_through_selective", 64 * KV), ("write_back", 0)):
        cfg = _cfg(
            "replicate_tiered", budget_tokens=1000, host_kv_tokens=10**6,
            host_path_bytes_per_s=1e9, host_write_policy=policy,
        )  # fmt: skip
        res = simulate(req, cfg)
        assert res.columns["hbm_hit_blocks"].tolist() == [0, 1]
        assert res.stats["host_path_bytes"] == moved
