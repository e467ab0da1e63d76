"""Warm-up traffic (engine/warmup.py): the hot set crossing the link at the start."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from enginecases import make_requests
from test_engine_reference import _compare

from prefixbench.scenario.loader import load_scenario
from prefixbench.system.runner import prepare, simulate_policy

A, B = (1, 512), (2, 512)


def test_requests_queue_behind_the_prewarm_and_hit_once_it_lands():
    """Qwen2-0.5B (12,288 KV bytes/token), one NIC at 1 GB/s, 50 µs latency. The hot set
    (A, B: 1,024 tokens = 12.58 MB) leaves at the first arrival (t = 0) and occupies the
    NICs for 12,582,912 / 1e9 = 12.58 ms, landing 50 µs later. Request 0 (no prefix) ends its
    prefill first: its KV waits for the NICs until 12.58 ms. Request 2 (chain A, B) is
    admitted after the landing: a hit on both blocks."""
    req = make_requests([0.0, 0.0, 0.5], [40, 1100, 1100], [2, 2, 2], [[], [A, B], [A, B]])
    kw = dict(
        policy="replicate_hotset",
        hot_blocks=[A, B],
        link_bytes_per_s=1e9,
        link_latency_s=50e-6,
        prewarm="link",
    )
    cols, _ = _compare(req, **kw)
    occupy = 1024 * 12_288 / 1e9
    assert cols["t_prefill_end"][0] < occupy
    assert cols["t_transfer_start"][0] == pytest.approx(occupy, rel=1e-12)
    assert cols["replica_hit_tokens"][2] == 1024
    free, _ = _compare(req, **{**kw, "prewarm": "free"})
    assert free["t_transfer_start"][0] == free["t_admit"][0]  # nothing ahead of it


def test_a_request_before_the_landing_gets_no_hit():
    """A 10 MB/s link: the hot set takes 1.26 s, so request 1 (chain A, B), admitted long
    before, finds the blocks resident but not ready and transfers its whole prompt."""
    req = make_requests([0.0, 0.01], [40, 1100], [2, 2], [[], [A, B]])
    cols, _ = _compare(
        req, policy="replicate_hotset", hot_blocks=[A, B], link_bytes_per_s=1e7, prewarm="link"
    )
    assert cols["replica_hit_tokens"][1] == 0 and cols["transfer_tokens"][1] == 1100
    assert cols["t_admit"][1] < 1024 * 12_288 / 1e7


@pytest.mark.parametrize("preset", ["enterprise_hotset", "tool_call", "multi_turn_chat"])
def test_free_prewarm_is_todays_result_bit_for_bit(preset):
    """prewarm: free (the default) runs exactly the run without the option; link costs."""
    s = load_scenario(preset, ["run.requests=1500"])
    prep = prepare(s)
    free = prepare(load_scenario(preset, ["run.requests=1500", "cluster.link.prewarm=free"]))
    a = simulate_policy(prep, "replicate_hotset")
    b = simulate_policy(free, "replicate_hotset")
    for k, v in a.columns.items():
        assert np.array_equal(v, b.columns[k], equal_nan=True), k
    assert a.stats["prewarm_s"] == 0.0 and a.stats["prewarm_gb"] > 0
    link = dataclasses.replace(prep, base=dataclasses.replace(prep.base, prewarm="link"))
    c = simulate_policy(link, "replicate_hotset")
    # the hot set's bytes over the link rate, plus its latency
    rate = prep.base.link_bytes_per_s * min(prep.base.nics_prefill, prep.base.nics_decode)
    want = a.stats["prewarm_gb"] * 1e9 / prep.base.n_decode / rate + prep.base.link_latency_s
    assert c.stats["prewarm_s"] == pytest.approx(want, rel=1e-9)


def test_a_refresh_warms_what_became_hot():
    """The first hot set is A; requests 0-2 use B only; the refresh at 0.05 s ranks B first
    (3 uses; A: 0) and warms it, so request 3 (chain B, at 0.1 s) hits B. Without a refresh
    B is never kept (only hot blocks are), and with warm-up over a slow link (1.26 s for B)
    request 3 comes before B lands."""
    req = make_requests([0.0, 0.01, 0.02, 0.1], [600] * 4, [2] * 4, [[B], [B], [B], [B]])
    kw = dict(policy="replicate_hotset", hot_blocks=[A], hot_cap_tokens=600)
    fixed, _ = _compare(req, **kw)
    fresh, _ = _compare(req, **kw, hot_refresh_s=0.05)
    slow, _ = _compare(req, **kw, hot_refresh_s=0.05, prewarm="link", link_bytes_per_s=5e6)
    assert fixed["replica_hit_tokens"].tolist() == [0, 0, 0, 0]
    assert fresh["replica_hit_tokens"].tolist() == [0, 0, 0, 512]
    assert slow["replica_hit_tokens"][3] == 0
