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


def test_a_block_evicted_from_hbm_and_host_is_read_back_from_l3_at_its_rate_and_queue():
    """The budget is 400 tokens, the host pool 64 (one block), the store large.

    Turn 0 finishes: its answer C, D, E joins HBM (A, B, C, D, E idle, 320 tokens) and is
    written to the store (3 x 64 tokens on its queue). Request 1 needs 332 with 80 free:
    the trim takes E, D, C, B (LRU: the answer first, then the chain tail first), each
    demoted to the host pool, which keeps only the last (B); each written to the store
    (E, D, C are there already: only B moves, 64 x 12,288 B = 39.3 ms from its admission
    t1). Turn 1 waits for room and is admitted when request 1 finishes (t2): HBM run A,
    host run B (promoted), then the trim of F..J (5 x 64 tokens written to the store), then
    the L3 run C, D, E (192 tokens), read after those writes. Its KV is in when the read
    lands: max(t2, t1 + 64·KV/rate) + (320 + 192)·KV/rate; only its 48-token suffix
    crosses the link."""
    res = simulate(_three(), _cfg(10_000), keep_state=True)
    cols = res.columns
    assert cols["outcome"].tolist() == [L.OUT_COMPLETED] * 3
    assert cols["hbm_hit_blocks"].tolist() == [0, 0, 1]
    assert cols["host_hit_blocks"].tolist() == [0, 0, 1]
    assert cols["l3_hit_blocks"].tolist() == [0, 0, 3]
    assert cols["link_blocks"].tolist() == [2, 5, 0]
    assert cols["transfer_tokens"].tolist() == [138, 330, 48]
    t1, t2 = cols["t_admit"][1], cols["t_admit"][2]
    assert t2 == cols["t_done"][1]  # it waited for request 1's memory
    b_write = 64 * KV / L3_BPS
    assert t1 + b_write > t2  # B's write is still on the store's queue: turn 1 queues
    land = max(t2, t1 + b_write) + (320 + 192) * KV / L3_BPS
    assert cols["t_transfer_end"][2] == pytest.approx(land, rel=1e-12, abs=1e-12)
    st = res.stats
    assert st["l3_store_tokens"] == 10_000
    assert st["peak_l3_tokens"] == 9 * 64  # C, D, E, B, then F..J (A never left HBM)
    assert audit(res.state) == []


def test_without_the_store_the_same_blocks_cross_the_link():
    """Off (capacity 0): turn 1 finds A in HBM, B in the host pool, and sends C, D, E and
    its suffix over the link: 192 + 48 = 240 tokens; nothing is read from a store."""
    cols = simulate(_three(), _cfg(0)).columns
    assert cols["l3_hit_blocks"].tolist() == [0, 0, 0]
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
