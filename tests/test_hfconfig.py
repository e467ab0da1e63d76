"""Reading a Hugging Face config.json from disk."""

from __future__ import annotations

import json

import pytest

from prefixbench.catalog import MODELS, get_model
from prefixbench.catalog.hfconfig import load_hf_config
from prefixbench.errors import CatalogError
from prefixbench.physics.costmodel import kv_bytes_per_token, param_counts

# Qwen/Qwen2-1.5B config.json (as published on the Hub).
QWEN2_15B = {
    "architectures": ["Qwen2ForCausalLM"],
    "attention_dropout": 0.0,
    "bos_token_id": 151643,
    "eos_token_id": 151643,
    "hidden_act": "silu",
    "hidden_size": 1536,
    "initializer_range": 0.02,
    "intermediate_size": 8960,
    "max_position_embeddings": 131072,
    "max_window_layers": 28,
    "model_type": "qwen2",
    "num_attention_heads": 12,
    "num_hidden_layers": 28,
    "num_key_value_heads": 2,
    "rms_norm_eps": 1e-06,
    "rope_theta": 1000000.0,
    "sliding_window": 131072,
    "tie_word_embeddings": True,
    "torch_dtype": "bfloat16",
    "transformers_version": "4.40.1",
    "use_cache": True,
    "use_sliding_window": False,
    "vocab_size": 151936,
}

# deepseek-ai/DeepSeek-V2-Lite config.json, the keys that matter.
DEEPSEEK_V2_LITE = {
    "architectures": ["DeepseekV2ForCausalLM"],
    "attention_bias": False,
    "first_k_dense_replace": 1,
    "hidden_size": 2048,
    "intermediate_size": 10944,
    "kv_lora_rank": 512,
    "max_position_embeddings": 163840,
    "model_type": "deepseek_v2",
    "moe_intermediate_size": 1408,
    "moe_layer_freq": 1,
    "n_routed_experts": 64,
    "n_shared_experts": 2,
    "num_attention_heads": 16,
    "num_experts_per_tok": 6,
    "num_hidden_layers": 27,
    "num_key_value_heads": 16,
    "q_lora_rank": None,
    "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "v_head_dim": 128,
    "vocab_size": 102400,
}


def write(tmp_path, cfg, folder="model", name="config.json"):
    d = tmp_path / folder
    d.mkdir(parents=True, exist_ok=True)
    path = d / name
    path.write_text(cfg if isinstance(cfg, str) else json.dumps(cfg, indent=2))
    return path


def test_qwen2_config_reproduces_preset(tmp_path):
    path = write(tmp_path, QWEN2_15B, folder="Qwen2-1.5B")
    m = load_hf_config(path)
    preset = MODELS["qwen2-1.5b"]
    assert m.name == "qwen2-1.5b"
    assert m.source == str(path)
    assert kv_bytes_per_token(m) == kv_bytes_per_token(preset) == 28672
    assert param_counts(m)["total"] == param_counts(preset)["total"]
    assert m.qkv_bias and m.tied_embeddings
    assert (m.head_dim, m.kv_heads, m.max_context) == (128, 2, 131072)


def test_mla_moe_config(tmp_path):
    m = load_hf_config(write(tmp_path, DEEPSEEK_V2_LITE, folder="DeepSeek-V2-Lite"))
    preset = MODELS["deepseek-v2-lite"]
    assert m.is_mla and m.is_moe
    assert m.q_lora_rank == 0  # null in the file
    assert kv_bytes_per_token(m) == 27 * (512 + 64) * 2 == 31104
    assert param_counts(m) == param_counts(preset)
    assert not m.qkv_bias


def test_defaults_for_absent_keys(tmp_path):
    cfg = {k: v for k, v in QWEN2_15B.items() if k not in ("num_key_value_heads", "torch_dtype")}
    cfg.update(architectures=["LlamaForCausalLM"], model_type="llama")
    del cfg["tie_word_embeddings"]
    m = load_hf_config(write(tmp_path, cfg))
    assert m.kv_heads == m.heads == 12  # MHA when num_key_value_heads is absent
    assert m.head_dim == 1536 // 12
    assert not m.tied_embeddings and not m.qkv_bias
    assert m.weight_bytes == m.kv_bytes == 2.0


def test_explicit_head_dim_and_attention_bias(tmp_path):
    cfg = dict(QWEN2_15B, model_type="llama", architectures=["LlamaForCausalLM"])
    cfg.update(head_dim=64, attention_bias=True)
    m = load_hf_config(write(tmp_path, cfg))
    assert m.head_dim == 64 and m.qkv_bias


@pytest.mark.parametrize(
    ("dtype", "nbytes"), [("float32", 4.0), ("float16", 2.0), ("bfloat16", 2.0)]
)
def test_dtype_bytes(tmp_path, dtype, nbytes):
    m = load_hf_config(write(tmp_path, dict(QWEN2_15B, torch_dtype=dtype)))
    assert m.weight_bytes == m.kv_bytes == nbytes


def test_text_config_nested(tmp_path):
    text = {k: v for k, v in QWEN2_15B.items() if k != "torch_dtype"}
    cfg = {"architectures": ["SomeVLM"], "torch_dtype": "float32", "text_config": text}
    m = load_hf_config(write(tmp_path, cfg))
    assert m.layers == 28 and m.kv_heads == 2
    assert m.weight_bytes == 4.0  # top-level dtype still applies


def test_name_from_file_stem(tmp_path):
    path = write(tmp_path, QWEN2_15B, folder="configs", name="My-Qwen.json")
    assert load_hf_config(path).name == "my-qwen"


def test_get_model_accepts_a_path(tmp_path):
    path = write(tmp_path, QWEN2_15B, folder="qwen")
    assert get_model(str(path)).layers == 28


# ---------------------------------------------------------------- errors


def assert_one_line(err, path, *words):
    msg = str(err.value)
    assert "\n" not in msg
    assert err.value.where == str(path)
    assert msg.startswith(str(path))
    for word in words:
        assert word in msg


def test_missing_file(tmp_path):
    path = tmp_path / "nope" / "config.json"
    with pytest.raises(CatalogError) as err:
        load_hf_config(path)
    assert_one_line(err, path, "not found")


def test_invalid_json_gives_line_and_column(tmp_path):
    path = write(tmp_path, '{\n  "hidden_size": 1536,\n  "vocab_size": \n}')
    with pytest.raises(CatalogError) as err:
        load_hf_config(path)
    assert_one_line(err, path, "invalid JSON", "line 4", "column 1")


def test_not_an_object(tmp_path):
    path = write(tmp_path, "[1, 2]")
    with pytest.raises(CatalogError) as err:
        load_hf_config(path)
    assert_one_line(err, path, "JSON object")


@pytest.mark.parametrize(
    "key",
    [
        "num_hidden_layers", "hidden_size", "num_attention_heads", "intermediate_size",
        "vocab_size", "max_position_embeddings",
    ],
)  # fmt: skip
def test_missing_required_key(tmp_path, key):
    cfg = {k: v for k, v in QWEN2_15B.items() if k != key}
    path = write(tmp_path, cfg)
    with pytest.raises(CatalogError) as err:
        load_hf_config(path)
    assert_one_line(err, path, f"'{key}'", "missing", "add")


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("hidden_size", 0), ("num_hidden_layers", -2), ("vocab_size", "big"),
        ("num_key_value_heads", 0), ("intermediate_size", True), ("head_dim", 1.5),
    ],
)  # fmt: skip
def test_non_positive_or_wrong_type(tmp_path, key, value):
    path = write(tmp_path, dict(QWEN2_15B, **{key: value}))
    with pytest.raises(CatalogError) as err:
        load_hf_config(path)
    assert_one_line(err, path, f"'{key}'", "positive integer", repr(value))


def test_unsupported_dtype(tmp_path):
    path = write(tmp_path, dict(QWEN2_15B, torch_dtype="int3"))
    with pytest.raises(CatalogError) as err:
        load_hf_config(path)
    assert_one_line(err, path, "'torch_dtype'", "bfloat16")


def test_mla_width_missing(tmp_path):
    cfg = {k: v for k, v in DEEPSEEK_V2_LITE.items() if k != "qk_rope_head_dim"}
    path = write(tmp_path, cfg)
    with pytest.raises(CatalogError) as err:
        load_hf_config(path)
    assert_one_line(err, path, "'qk_rope_head_dim'", "missing")


def test_moe_key_missing(tmp_path):
    cfg = {k: v for k, v in DEEPSEEK_V2_LITE.items() if k != "num_experts_per_tok"}
    path = write(tmp_path, cfg)
    with pytest.raises(CatalogError) as err:
        load_hf_config(path)
    assert_one_line(err, path, "'num_experts_per_tok'", "missing")


def test_nested_key_named_with_prefix(tmp_path):
    text = {k: v for k, v in QWEN2_15B.items() if k != "vocab_size"}
    path = write(tmp_path, {"text_config": text})
    with pytest.raises(CatalogError) as err:
        load_hf_config(path)
    assert_one_line(err, path, "'text_config.vocab_size'")


def test_head_dim_not_derivable(tmp_path):
    path = write(tmp_path, dict(QWEN2_15B, num_attention_heads=7))
    with pytest.raises(CatalogError) as err:
        load_hf_config(path)
    assert_one_line(err, path, "'head_dim'", "divisible")
