"""The shared L3 store under the decode tiers (docs/model.md §1.13.1): what the decode node
writes to it, the run it serves at admission, its queue, its hit rate, and off by default.

Hand-written numbers come from the raw configs: Qwen2-0.5B has 24 layers, 2 KV heads of
64 dims in bf16, so one token's KV is 2 (K and V) x 24 x 2 x 64 x 2 bytes = 12,288 bytes.
The store here moves 2e7 B/s (slow on purpose, so that its queue is visible); the link's
latency is 0 (EngineConfig's default), so a move lands when it ends.
"""

from __future__ import annotations

import pytest
from enginecases import instance_cost, make_requests

from prefixbench.engine import EngineConfig, simulate
from prefixbench.engine import layout as L
from prefixbench.engine.audit import audit
from prefixbench.metrics.summary import requests_frame, summarize
from prefixbench.scenario.loader import load_scenario
from prefixbench.system.runner import prepare, simulate_policy

KV = 2 * 24 * 2 * 64 * 2  # bytes per token, Qwen2-0.5B
L3_BPS = 2e7
COST = instance_cost("qwen2-0.5b", "l4", 1, (0.5, 0.5, 0.7, 1.0, 1.0))
A, B, C, D, E, F, G, H, I, J = ((h, 64) for h in range(1, 11))


def _cfg(l3_tokens: int, policy: str = "replicate_tiered") -> EngineConfig:
    return EngineConfig(
        policy=policy, prefill_cost=COST, decode_cost=COST, cache_generated=True,
        budget_tokens=400, host_kv_tokens=64, on_full="wait",
        l3_store_tokens=l3_tokens, l3_store_bytes_per_s=L3_BPS,
    )  # fmt: skip


def _three():
    """Turn 0 (t = 0): chain A, B + 10 tokens, 200 output: its answer is C, D, E (as in
    tests/test_generated.py). Request 1 (t = 50): chain F..J + 10, 2 output. Turn 1 of the
    first conversation (t = 50.0001): chain A..E + 48 tokens, 2 output."""
    return make_requests(
        [0.0, 50.0, 50.0001],
        [138, 330, 368],
        [200, 2, 2],
        [[A, B], [F, G, H, I, J], [A, B, C, D, E]],
        [[C, D, E], [], []],
    )


def _step(new: int, cached: int) -> float:
    """One prefill step's time by the reference roofline (tests/reference_roofline.py)."""
    from reference_sim import roofline
    from test_engine_reference import efficiency

    from prefixbench import catalog

    acc, model = catalog.get_accelerator("l4"), catalog.get_model("qwen2-0.5b")
    return roofline(model, acc, 1, efficiency((0.5, 0.5, 0.7, 1.0, 1.0))).prefill_step(
        [(new, cached)]
    )


def test_blocks_evicted_from_hbm_and_host_are_read_back_from_l3_at_its_rate_and_queue():
    """The budget is 400 tokens, the host pool 64 (one block), the store large.

    Turn 0 finishes (long before t = 50): its answer C, D, E joins HBM (A..E idle, 320
    tokens), and its chain and answer, A..E, are written to the store. Request 1 is
    admitted when its prefill ends (t1) and needs 332 with 80 free: the trim takes E, D, C,
    B (LRU: the answer first, then the chain tail first), each demoted to the host pool,
    which keeps only the last (B): C, D, E are now in neither HBM nor the host tier.

    Prefill side: turn 1's step starts at t1. Its prefix cache holds A, B (128 tokens); the
    store continues with C, D, E, so the prefill reads 192 tokens (192 x 12,288 B / 2e7 B/s
    = 118 ms, the queue idle) and computes from t1 + 192·KV/rate, 48 new tokens over 320
    cached. Request 1 finishes meanwhile (t1f): F..J (320 tokens) are written, queued
    behind that read.

    Decode side: turn 1 is admitted at its prefill end (t2): HBM run A, host run B
    (promoted), then the L3 run C, D, E (192 tokens), read behind request 1's writes: its
    KV is in at max(t2, t1 + (192 + 320)·KV/rate) + 192·KV/rate, and only its 48-token
    suffix crosses the link."""
    res = simulate(_three(), _cfg(10_000), keep_state=True)
    cols = res.columns
    assert cols["outcome"].tolist() == [L.OUT_COMPLETED] * 3
    assert cols["prefill_hit_tokens"].tolist() == [0, 0, 128]
    assert cols["l3_prefill_tokens"].tolist() == [0, 0, 192]
    assert cols["hbm_hit_blocks"].tolist() == [0, 0, 1]
    assert cols["host_hit_blocks"].tolist() == [0, 0, 1]
    assert cols["l3_hit_blocks"].tolist() == [0, 0, 3]
    assert cols["link_blocks"].tolist() == [2, 5, 0]
    assert cols["transfer_tokens"].tolist() == [138, 330, 48]
    t1, t2 = cols["t_admit"][1], cols["t_admit"][2]
    assert cols["t_prefill_start"][2] == t1 == cols["t_prefill_end"][1]
    computes = t1 + 192 * KV / L3_BPS
    assert cols["t_prefill_end"][2] == pytest.approx(computes + _step(48, 320), rel=1e-9)
    assert t1 < cols["t_done"][1] < computes  # request 1's writes queue behind the read
    assert t2 == cols["t_prefill_end"][2]
    queued = t1 + (192 + 320) * KV / L3_BPS
    assert queued > t2  # the decode read waits for the store's queue
    land = queued + 192 * KV / L3_BPS
    assert cols["t_transfer_end"][2] == pytest.approx(land, rel=1e-12, abs=1e-12)
    st = res.stats
    assert st["l3_store_tokens"] == 10_000
    assert st["peak_l3_tokens"] == 10 * 64  # A..E, then F..J
    assert audit(res.state) == []


def test_without_the_store_the_same_blocks_cross_the_link():
    """Off (capacity 0): turn 1's prefill computes C, D, E and its suffix (240 new tokens
    over 128 cached); its decode finds A in HBM, B in the host pool, and C, D, E and the
    suffix cross the link: 240 tokens; nothing is read from a store."""
    cols = simulate(_three(), _cfg(0)).columns
    assert cols["l3_hit_blocks"].tolist() == [0, 0, 0]
    assert cols["l3_prefill_tokens"].tolist() == [0, 0, 0]
    step = cols["t_prefill_end"][2] - cols["t_prefill_start"][2]
    assert step == pytest.approx(_step(240, 128), rel=1e-9)
    assert cols["transfer_tokens"].tolist() == [138, 330, 240]
    assert cols["link_blocks"].tolist() == [2, 5, 3]


def test_only_replicate_tiered_uses_the_store():
    """replicate_all_lru has no tiers under HBM: a store configured is not used."""
    res = simulate(_three(), _cfg(10_000, "replicate_all_lru"))
    assert res.columns["l3_hit_blocks"].tolist() == [0, 0, 0]
    assert res.stats["l3_bytes"] == 0.0


def test_a_store_smaller_than_a_block_holds_nothing():
    cols = simulate(_three(), _cfg(63)).columns
    assert cols["l3_hit_blocks"].tolist() == [0, 0, 0]
    assert cols["transfer_tokens"].tolist() == [138, 330, 240]


def test_the_scenario_fields_reach_the_engine_and_the_summary_has_its_hit_rate():
    """memory.l3_store_gb is GB for the cluster, converted at the model's KV bytes per
    token; memory.l3_store_gbps is Gbit/s (200 → 25e9 B/s). The summary's l3_hit_rate is
    the admitted requests' chain blocks read from the store over all their chain blocks,
    and the miss rate is what no tier served."""
    over = ["model=qwen2-0.5b", "run.requests=400", "run.warmup_requests=50"]
    prep = prepare(load_scenario("multi_turn_chat", over + ["memory.l3_store_gb=12.288"]))
    assert prep.base.l3_store_tokens == 1_000_000  # 12.288e9 / 12,288
    assert prep.base.l3_store_bytes_per_s == 25e9
    res = simulate_policy(prep, "replicate_tiered")
    df = requests_frame(prep, "replicate_tiered", res)
    row = summarize(prep, "replicate_tiered", df, res)
    adm = df.filter(~df["warmup"] & (df["outcome"] == "completed"))
    n = adm["chain_blocks"].sum()
    assert row["l3_hit_rate"] == pytest.approx(adm["l3_hit_blocks"].sum() / n, rel=1e-12)
    tiers = row["hbm_hit_rate"] + row["host_hit_rate"] + row["l3_hit_rate"]
    assert row["miss_rate"] == pytest.approx(1 - tiers, abs=1e-12)
    assert row["l3_gb"] > 0 and 0 < row["l3_util"] < 1
    off = prepare(load_scenario("multi_turn_chat", over))
    assert off.base.l3_store_tokens == 0
    row = summarize(off, "replicate_tiered", *_run(off))
    assert row["l3_hit_rate"] == 0 and row["l3_gb"] == 0


def _run(prep):
    res = simulate_policy(prep, "replicate_tiered")
    return requests_frame(prep, "replicate_tiered", res), res


def test_l3_fields_are_validated():
    from prefixbench.errors import ScenarioError

    with pytest.raises(ScenarioError):
        load_scenario("multi_turn_chat", ["memory.l3_store_gb=-1"])
    with pytest.raises(ScenarioError):
        load_scenario("multi_turn_chat", ["memory.l3_store_gbps=0"])


def test_a_saturated_l3_store_makes_the_run_unstable_and_is_named():
    """The store's queue is a stage of the stability verdict (docs/model.md §5.4): at the
    default 200 Gbit/s its reads and writes keep it a sliver busy; at 0.2 Gbit/s
    (25 MB/s) they need more queue time than the run has: unstable, named."""
    from prefixbench.metrics.stability import assess, unstable_line

    over = ["model=qwen2-0.5b", "run.requests=600", "run.warmup_requests=60",
            "memory.l3_store_gb=50"]  # fmt: skip
    rows = {}
    for gbps in (200, 0.2):
        prep = prepare(load_scenario("multi_turn_chat", over + [f"memory.l3_store_gbps={gbps}"]))
        df, res = _run(prep)
        rows[gbps] = (assess(prep, df, res.stats), res.stats)
    ok, st = rows[200]
    assert ok.rho["l3_store"] is not None and ok.rho["l3_store"] < 0.1
    assert ok.saturated != "l3_store"
    bad, st = rows[0.2]
    assert bad.rho["l3_store"] > 1.0
    assert not bad.stable and bad.saturated == "l3_store"
    assert "L3 store saturates" in unstable_line("replicate_tiered", bad.columns())
