"""Real config.json files nobody here wrote (tests/data/configs/, sources in its README).

Totals are pinned within 1 % of the model card's stated count (card figure and source in each
row). KV bytes per token are hand-calculated from the config numbers in the row itself:
2 (K and V) · KV layers · kv_heads · head_dim · 2 bytes (bf16), or the MLA latent.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from prefixbench.catalog.hfconfig import load_hf_config
from prefixbench.physics.costmodel import (
    kv_bytes,
    kv_bytes_per_token,
    param_counts,
    state_bytes_per_sequence,
    weight_bytes,
)

CONFIGS = Path(__file__).parent / "data" / "configs"

# name, card total, where the card says so, KV bytes/token by hand from the config
CASES = [
    # huggingface.co/meta-llama/Llama-3.1-8B-Instruct: "8.03B params"
    ("llama-3.1-8b-instruct", 8.03e9, 2 * 32 * 8 * 128 * 2),
    # huggingface.co/meta-llama/Llama-3.1-70B-Instruct: "70.6B params"
    ("llama-3.1-70b-instruct", 70.6e9, 2 * 80 * 8 * 128 * 2),
    # huggingface.co/Qwen/Qwen2.5-7B-Instruct card: "Number of Parameters: 7.61B"
    ("qwen2.5-7b-instruct", 7.61e9, 2 * 28 * 4 * 128 * 2),
    # huggingface.co/mistralai/Mistral-7B-Instruct-v0.3: "7.25B params"
    ("mistral-7b-instruct-v0.3", 7.25e9, 2 * 32 * 8 * 128 * 2),
    # mistral.ai/news/mixtral-of-experts: "46.7B total parameters"
    ("mixtral-8x7b-v0.1", 46.7e9, 2 * 32 * 8 * 128 * 2),
    # huggingface.co/Qwen/Qwen3-30B-A3B card: "30.5B in total and 3.3B activated"
    ("qwen3-30b-a3b", 30.5e9, 2 * 48 * 4 * 128 * 2),
    # github.com/deepseek-ai/DeepSeek-V3 README: "671B total parameters"; MLA latent per layer
    ("deepseek-v3", 671e9, 61 * (512 + 64) * 2),
    # huggingface.co/google/gemma-2-9b-it: "9.24B params"; all 42 layers below the window
    ("gemma-2-9b-it", 9.24e9, 2 * 42 * 8 * 256 * 2),
    # github.com/MiniMax-AI/MiniMax-M1 README: "456 billion parameters"; only the 10 softmax
    # layers of 80 (attn_type_list 1 every 8th) keep KV
    ("minimax-m1", 456e9, 2 * 10 * 8 * 128 * 2),
]


def load(name):
    return load_hf_config(CONFIGS / f"{name}.json")


@pytest.mark.parametrize(("name", "card_total", "kv"), CASES, ids=[c[0] for c in CASES])
def test_total_params_within_one_percent_of_card(name, card_total, kv):
    assert param_counts(load(name))["total"] == pytest.approx(card_total, rel=0.01)


@pytest.mark.parametrize(("name", "card_total", "kv"), CASES, ids=[c[0] for c in CASES])
def test_kv_bytes_per_token(name, card_total, kv):
    assert kv_bytes_per_token(load(name)) == kv


def test_every_config_is_copied_with_a_source():
    readme = (CONFIGS / "README.md").read_text(encoding="utf-8")
    names = sorted(p.stem for p in CONFIGS.glob("*.json"))
    assert names == sorted(c[0] for c in CASES)
    for name in names:
        assert f"`{name}.json`" in readme


# ---------------------------------------------------------------- MoE: total and active


def test_mixtral_is_moe_not_dense():
    m = load("mixtral-8x7b-v0.1")
    p = param_counts(m)
    assert (m.n_routed_experts, m.experts_per_token, m.moe_intermediate_size) == (8, 2, 14336)
    assert m.first_dense_layers == 0
    # Hand count: 32 layers of attention (q, k, v, o) + 8 experts of 3·4096·14336 + router,
    # untied 32000-token embedding and head, two norms per layer and a final one.
    attn = 4096 * 4096 + 2 * 4096 * 1024 + 4096 * 4096
    expert = 3 * 4096 * 14336
    common = 32 * (attn + 4096 * 8 + 2 * 4096) + 4096 + 2 * 32000 * 4096
    assert p["total"] == common + 32 * 8 * expert
    assert p["active"] == common + 32 * 2 * expert
    # mistral.ai/news/mixtral-of-experts: "only uses 12.9B parameters per token"
    assert p["active"] == pytest.approx(12.9e9, rel=0.01)


def test_qwen3_moe_active():
    m = load("qwen3-30b-a3b")
    assert (m.n_routed_experts, m.experts_per_token, m.moe_intermediate_size) == (128, 8, 768)
    # Card: "3.3B activated". The count with embedding and LM head is 3.353B; the card rounds
    # it down, so the tolerance is 2 % here.
    assert param_counts(m)["active"] == pytest.approx(3.3e9, rel=0.02)


def test_deepseek_v3_hand_count_and_active():
    m = load("deepseek-v3")
    p = param_counts(m)
    h, n, vocab = 7168, 128, 129280
    attn = (
        h * 1536 + 1536 + 1536 * n * (128 + 64)  # q_a, its norm, q_b
        + h * (512 + 64) + 512 + 512 * n * (128 + 128)  # kv_a (+ rope key), its norm, kv_b
        + n * 128 * h  # o_proj
    )  # fmt: skip
    expert = 3 * h * 2048
    moe_layers = 61 - 3  # first_k_dense_replace 3
    total = (
        61 * attn
        + 3 * 3 * h * 18432  # dense MLP of the first 3 layers
        + moe_layers * (256 * expert + 1 * expert + h * 256)  # routed, shared, router
        + 2 * vocab * h  # untied embedding and head
        + 61 * 2 * h + h  # norms
    )  # fmt: skip
    assert p["total"] == total
    # DeepSeek-V3 README_WEIGHTS.md: "Activation parameters: 36.6B (including 0.9B for the
    # output Head)" -- the head counts, the input embedding lookup does not.
    active = total - moe_layers * 248 * expert - vocab * h
    assert p["active"] - p["embedding"] == active
    assert active == pytest.approx(36.6e9, rel=0.01)


def test_minimax_m1_hybrid_layers_and_active():
    m = load("minimax-m1")
    assert (m.linear_layers, m.full_layers, m.sliding_layers) == (70, 10, 0)
    # The naive 80-layer KV would be 8x too large.
    assert kv_bytes_per_token(m) * 8 == 2 * 80 * 8 * 128 * 2
    # Lightning attention keeps a 128x128 state per head per layer instead.
    assert state_bytes_per_sequence(m) == 70 * 64 * 128 * 128 * 2
    p = param_counts(m)
    # README: "45.9 billion parameters activated per token", counted without the embedding
    # and the LM head (2 x 200064 x 6144 = 2.46B).
    assert p["active"] - p["embedding"] - p["lm_head"] == pytest.approx(45.9e9, rel=0.01)


# ---------------------------------------------------------------- windows and defaults


def test_gemma2_alternating_window_caps_kv():
    m = load("gemma-2-9b-it")
    assert (m.sliding_layers, m.sliding_window, m.full_layers) == (21, 4096, 21)
    per_layer = 2 * 8 * 256 * 2  # K and V of one layer, bf16
    # Up to the window every layer holds every token...
    assert kv_bytes(m, 4096) == 42 * per_layer * 4096
    # ...beyond it the 21 sliding layers hold only the last 4096.
    assert kv_bytes(m, 8192) == 21 * per_layer * 8192 + 21 * per_layer * 4096
    assert kv_bytes_per_token(m, 8192) == pytest.approx((21 * 8192 + 21 * 4096) * per_layer / 8192)


def test_gemma2_ties_embeddings_by_default():
    # The config has no tie_word_embeddings key; Gemma2Config defaults it to true.
    m = load("gemma-2-9b-it")
    assert m.tied_embeddings
    assert m.head_dim == 256  # given; hidden/heads would be 224


def test_deepseek_fp8_weight_bytes():
    m = load("deepseek-v3")
    assert m.weight_format == "fp8 block 128x128"
    p = param_counts(m)
    # Embedding, head, norms and router stay bf16; every other weight is 1 byte plus one
    # float32 scale per 128x128 block.
    h, vocab = 7168, 129280
    full_width = 2 * vocab * h + (61 * 2 * h + h) + 58 * h * 256
    expected = full_width * 2 + (p["total"] - full_width) * (1 + 4 / (128 * 128))
    assert weight_bytes(m) == pytest.approx(expected, rel=1e-12)
    assert 672e9 < weight_bytes(m) < 674e9  # not 1,342 GB (bf16)


# ---------------------------------------------------------------- catalog show


@pytest.mark.parametrize("name", [c[0] for c in CASES])
def test_catalog_show_every_config(name):
    import json
    import math

    from typer.testing import CliRunner

    from prefixbench.cli import app

    runner = CliRunner(env={"COLUMNS": "80", "NO_COLOR": "1", "TERM": "dumb"})
    path = str(CONFIGS / f"{name}.json")
    r = runner.invoke(app, ["catalog", "show", path, "--json"])
    assert r.exit_code == 0, r.output
    info = json.loads(r.stdout, parse_constant=lambda c: pytest.fail(f"non-strict JSON {c}"))
    m = load(name)
    assert info["params"] == param_counts(m)["total"]
    assert info["active_params"] == param_counts(m)["active"]
    assert info["weight_bytes"] == weight_bytes(m)
    assert info["kv_bytes_per_token"] == kv_bytes_per_token(m)
    assert all(math.isfinite(v) for v in info.values() if isinstance(v, float))
    table = runner.invoke(app, ["catalog", "show", path])
    assert table.exit_code == 0
    assert max(len(line) for line in table.stdout.splitlines()) <= 80
    for field in ("params", "active_params", "weight_bytes", "kv_bytes_per_token"):
        assert field in table.stdout
