"""Asymmetric models: a causal encoder-decoder's prefill (issue 18; docs/model.md §2.12)."""

from __future__ import annotations

import dataclasses

import pytest
from reference_sim import ReferenceSim, scenario_config
from test_engine_reference import POLICIES, assert_same

from prefixbench.costmodel import prefill_time
from prefixbench.errors import PrefixbenchError
from prefixbench.loader import load_scenario
from prefixbench.runner import prepare, simulate_policy

IDEAL = ["cluster.prefill.fabric=ideal", "run.requests=50", "run.warmup_requests=5"]


def _prefill_ms(*sets) -> float:
    cost = prepare(load_scenario("seed003", [*IDEAL, *sets])).base.prefill_cost
    return prefill_time(cost, [8192], [0]) * 1e3


def test_seed_figure_8192_token_prefill():
    """Seed 003: on Llama-3-70B split 40 + 40, one 8,192-token prefill on 4x H100 takes
    288.3 ms instead of 564.3 ms (ratio 0.5109). The seed gives no tolerance; ours: the
    ratio within 1 %. The absolute times differ from the seed's by our causal-attention term,
    which the seed's figure leaves out: its 564.3 ms is the linear layers alone, by hand
    8192 x 2 x 68.452e9 body FLOPs / (4 x 989.5e12 x 0.5) = 566.7 ms (+1 ms overhead)."""
    full, ced = _prefill_ms(), _prefill_ms("model.ced_encoder_layers=40")
    assert ced / full == pytest.approx(288.3 / 564.3, rel=0.01)
    # by hand, Llama-3.1-70B config.json: per layer q,o 8192^2 each, k,v 8192x1024 each,
    # MLP 3 x 8192 x 28672, two norms of 8192; final norm 8192; LM head 128256 x 8192
    layer = 2 * 8192**2 + 2 * 8192 * 1024 + 3 * 8192 * 28672 + 2 * 8192
    body = 80 * layer + 8192
    rate = 4 * 989.5e12 * 0.5
    attn = 2 * 80 * 64 * (128 + 128) * 8192 * 8193 / 2  # QK^T + AV over the causal pairs
    head = 2 * 128256 * 8192
    assert full == pytest.approx(((8192 * 2 * body + head + attn) / rate + 1e-3) * 1e3, rel=1e-9)
    assert (8192 * 2 * body) / rate * 1e3 == pytest.approx(564.3, rel=0.01)
    enc = 40 * layer + 8192 + 40 * 2 * 8192 * 1024  # + decoder k_proj, v_proj
    want = (8192 * 2 * enc + head + attn / 2) / rate + 1e-3
    assert ced == pytest.approx(want * 1e3, rel=1e-9)


def test_ced_keeps_decode_and_kv():
    """Only prefill changes: decode coefficients and KV bytes per token are the full model's."""
    a = prepare(load_scenario("seed003", IDEAL))
    b = prepare(load_scenario("seed003", [*IDEAL, "model.ced_encoder_layers=40"]))
    assert a.base.decode_cost == b.base.decode_cost
    assert a.kv_bpt == b.kv_bpt == 2 * 80 * 8 * 128 * 2


def test_ced_matches_reference():
    """The reference simulator prices the encoder-only prefill with its own per-module
    arithmetic and agrees on every timestamp, every policy (qwen2-1.5b: QKV biases, tied
    embeddings)."""
    over = [
        "run.requests=80",
        "run.warmup_requests=8",
        "workload.output_length.min=2",
        "model.ced_encoder_layers=10",
    ]
    prep = prepare(load_scenario("medium_chat", over))
    ref_cfg = scenario_config(prep)
    for policy in POLICIES:
        res = simulate_policy(prep, policy, track_gaps=True)
        ref = ReferenceSim(prep.requests, dataclasses.replace(ref_cfg, policy=policy)).run()
        assert_same(res.columns, ref, f"ced {policy}")


@pytest.mark.parametrize(
    "sets,message",
    [
        (["model.ced_encoder_layers=80"], "between 1 and 79"),
        (["model.ced_encoder_layers=40", "model.ced_replay_on=decode"], "does not run"),
        (["model.ced_encoder_layers=40", "cluster.mode=colocated"], "colocated"),
        (["model=deepseek-v2-lite", "model.ced_encoder_layers=4"], "dense model"),
    ],
)
def test_ced_refusals(sets, message):
    with pytest.raises(PrefixbenchError, match=message):
        prepare(load_scenario("seed003", [*IDEAL, *sets]))
