"""Weight formats, KV dtypes and config.json layouts (catalog/formats.py, catalog/layout.py).

Expected byte counts are written out from the config numbers; the code under test only
supplies the parameter split it was already tested on (tests/test_hfconfig_real.py).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from prefixbench.catalog import ACCELERATORS, MODELS
from prefixbench.catalog.formats import with_formats
from prefixbench.catalog.hfconfig import load_hf_config
from prefixbench.errors import CatalogError, ScenarioError, SimulationError
from prefixbench.physics.costmodel import (
    Efficiency,
    InstanceCost,
    kv_bytes,
    kv_bytes_per_token,
    param_counts,
    weight_bytes,
)
from prefixbench.scenario.loader import load_scenario

CONFIGS = Path(__file__).parent / "data" / "configs"


def cfg(name: str) -> dict:
    return json.loads((CONFIGS / f"{name}.json").read_text())


def write(tmp_path, data: dict, name: str = "m.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return path


def load(tmp_path, data: dict):
    return load_hf_config(write(tmp_path, data))


def one_line_error(tmp_path, data: dict, *words: str) -> str:
    with pytest.raises(CatalogError) as err:
        load(tmp_path, data)
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith(str(tmp_path))
    for word in words:
        assert word in msg, msg
    return msg


# Llama-3.1-8B: the weights a quantized checkpoint keeps in bf16 (embedding, untied head,
# norms), by hand from its config; everything else is a linear layer.
LLAMA8_FULL_WIDTH = 2 * 128256 * 4096 + 32 * 2 * 4096 + 4096
LLAMA8_TOTAL = 8_030_261_248  # pinned against the card in test_hfconfig_real.py


# ---------------------------------------------------------------- KV dtype


def test_fp8_kv_halves_bytes_per_token():
    m = MODELS["llama-3.1-8b"]
    assert kv_bytes_per_token(with_formats(m, kv_dtype="fp8")) == 2 * 32 * 8 * 128 * 1
    assert kv_bytes_per_token(with_formats(m, kv_dtype="int8")) == 65536
    assert kv_bytes_per_token(with_formats(m, kv_dtype="bf16")) == 131072
    assert with_formats(m) is m  # no override, same spec


def test_kv_dtype_default_follows_torch_dtype(tmp_path):
    m = load(tmp_path, dict(cfg("llama-3.1-8b-instruct"), torch_dtype="float32"))
    assert kv_bytes_per_token(m) == 2 * 32 * 8 * 128 * 4


@pytest.mark.parametrize(
    "overrides",
    [
        ["model.kv_dtype=fp8"],
        ["model_format.kv_dtype=fp8"],
        ["model.kv_dtype=fp8", "model=qwen2-1.5b"],  # a sweep sets the model after --set
    ],
)
def test_set_model_kv_dtype(overrides):
    s = load_scenario("tool_call", overrides)
    assert s.model == "qwen2-1.5b"
    assert s.model_format.kv_dtype == "fp8"


def test_model_mapping_in_yaml(tmp_path):
    preset = Path(__file__).parents[1] / "scenarios" / "tool_call.yaml"
    text = preset.read_text().replace(
        "model: qwen2-1.5b", "model: {name: llama-3.1-8b, kv_dtype: fp8, weights: int4}"
    )
    assert "kv_dtype" in text
    path = tmp_path / "s.yaml"
    path.write_text(text)
    s = load_scenario(str(path))
    assert s.model == "llama-3.1-8b"
    assert (s.model_format.kv_dtype, s.model_format.weights) == ("fp8", "int4")
    again = load_scenario(str(path), ["model=qwen2-0.5b"])  # a sweep's model keeps the format
    assert again.model == "qwen2-0.5b" and again.model_format.kv_dtype == "fp8"


def test_bad_kv_dtype_is_one_line():
    with pytest.raises(ScenarioError) as err:
        load_scenario("tool_call", ["model.kv_dtype=fp4"])
    assert "kv_dtype" in str(err.value) and "\n" not in str(err.value)


def test_prepare_uses_the_kv_dtype():
    from prefixbench.system.runner import prepare

    small = ["run.requests=300", "run.warmup_requests=50"]
    bf16 = prepare(load_scenario("tool_call", small))
    fp8 = prepare(load_scenario("tool_call", [*small, "model.kv_dtype=fp8"]))
    assert fp8.kv_bpt * 2 == bf16.kv_bpt == 28672  # Qwen2-1.5B: 2·28·2·128·2


# ---------------------------------------------------------------- weight formats


def test_gptq_int4_g128_bytes(tmp_path):
    qc = {"quant_method": "gptq", "bits": 4, "group_size": 128, "desc_act": False, "sym": True}
    m = load(tmp_path, dict(cfg("llama-3.1-8b-instruct"), quantization_config=qc))
    # 4 bits per weight, plus per group of 128: one fp16 scale and one packed 4-bit zero.
    per_weight = 0.5 + (2 + 0.5) / 128
    expected = LLAMA8_FULL_WIDTH * 2 + (LLAMA8_TOTAL - LLAMA8_FULL_WIDTH) * per_weight
    assert weight_bytes(m) == pytest.approx(expected, rel=1e-12)
    assert m.weight_format == "gptq int4 g128"


def test_awq_without_zero_point(tmp_path):
    qc = {"quant_method": "awq", "bits": 4, "group_size": 64, "zero_point": False}
    m = load(tmp_path, dict(cfg("llama-3.1-8b-instruct"), quantization_config=qc))
    per_weight = 0.5 + 2 / 64
    expected = LLAMA8_FULL_WIDTH * 2 + (LLAMA8_TOTAL - LLAMA8_FULL_WIDTH) * per_weight
    assert weight_bytes(m) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize(
    ("weights", "per_weight"),
    [
        ({"num_bits": 8, "type": "float", "strategy": "channel"}, 1.0),
        ({"num_bits": 4, "type": "int", "strategy": "group", "group_size": 128}, 0.5 + 2 / 128),
        (
            {"num_bits": 8, "type": "float", "strategy": "block", "block_structure": [128, 128]},
            1.0 + 2 / (128 * 128),
        ),
    ],
)
def test_compressed_tensors(tmp_path, weights, per_weight):
    qc = {
        "quant_method": "compressed-tensors",
        "config_groups": {"group_0": {"targets": ["Linear"], "weights": weights}},
        "ignore": ["lm_head"],
    }
    m = load(tmp_path, dict(cfg("llama-3.1-8b-instruct"), quantization_config=qc))
    expected = LLAMA8_FULL_WIDTH * 2 + (LLAMA8_TOTAL - LLAMA8_FULL_WIDTH) * per_weight
    assert weight_bytes(m) == pytest.approx(expected, rel=1e-12)


def test_unmodelled_quant_method_is_never_sized_silently(tmp_path):
    qc = {"quant_method": "mxfp4", "modules_to_not_convert": ["model.layers.*.self_attn"]}
    m = load(tmp_path, dict(cfg("llama-3.1-8b-instruct"), quantization_config=qc))
    with pytest.raises(CatalogError) as err:
        weight_bytes(m)
    assert "quant_method 'mxfp4'" in str(err.value) and "model.weights" in str(err.value)
    with pytest.raises(CatalogError):
        InstanceCost.build(m, ACCELERATORS["h100-sxm"], 1, Efficiency())
    # model.weights replaces the unknown format, and then the model can be sized.
    sized = with_formats(m, weights="int4")
    expected = LLAMA8_FULL_WIDTH * 2 + (LLAMA8_TOTAL - LLAMA8_FULL_WIDTH) * (0.5 + 2.5 / 128)
    assert weight_bytes(sized) == pytest.approx(expected, rel=1e-12)


def test_unmodelled_quant_method_in_a_run_is_one_line(tmp_path):
    from prefixbench.system.runner import prepare

    qc = {"quant_method": "mxfp4"}
    path = write(tmp_path, dict(cfg("llama-3.1-8b-instruct"), quantization_config=qc))
    base = [f"model={path}", "run.requests=200", "run.warmup_requests=20"]
    base += [f"cluster.{r}.accelerator=h100-sxm" for r in ("prefill", "decode")]
    with pytest.raises(CatalogError, match="mxfp4"):
        prepare(load_scenario("tool_call", base))
    assert prepare(load_scenario("tool_call", [*base, "model.weights=fp8"])).model.quant_bytes


def test_mlp_bias_is_a_note(tmp_path):
    m = load(tmp_path, dict(cfg("llama-3.1-8b-instruct"), mlp_bias=True))
    assert any("mlp_bias" in n for n in m.notes)


@pytest.mark.parametrize(
    ("qc", "key"),
    [
        ({"quant_method": "gptq", "bits": 5}, "bits"),
        ({"quant_method": "fp8", "weight_block_size": [128]}, "weight_block_size"),
        ("fp8", "quantization_config"),
        (
            {
                "quant_method": "compressed-tensors",
                "config_groups": {
                    "a": {"weights": {"num_bits": 8, "strategy": "channel"}},
                    "b": {"weights": {"num_bits": 4, "strategy": "group", "group_size": 128}},
                },
            },
            "config_groups",
        ),
    ],
)
def test_unmodelled_quantization_is_one_line(tmp_path, qc, key):
    data = dict(cfg("llama-3.1-8b-instruct"), quantization_config=qc)
    one_line_error(tmp_path, data, key, "model.weights")


def test_weights_override_sizes_memory_and_reads():
    m = MODELS["llama-3.1-70b"]
    fp8 = with_formats(m, weights="fp8")
    total = param_counts(m)["total"]
    full_width = 2 * 128256 * 8192 + 80 * 2 * 8192 + 8192
    expected = full_width * 2 + (total - full_width) * (1 + 4 / (128 * 128))
    assert weight_bytes(fp8) == pytest.approx(expected, rel=1e-12)
    # 70B in bf16 (141 GB) does not fit one 80 GB H100; in fp8 (~71 GB) it does.
    h100 = ACCELERATORS["h100-sxm"].memory_gb * 1e9
    assert weight_bytes(m) > h100 > weight_bytes(fp8)
    # A decode step reads every weight once but the untied input table (only its tokens'
    # rows, neglected; docs/model.md §2.7), which stays at full width: fp8 halves the rest.
    dev, eff = ACCELERATORS["h100-sxm"], Efficiency()
    table = 128256 * 8192 * 2
    assert InstanceCost.build(fp8, dev, 2, eff).weights == pytest.approx(weight_bytes(fp8) - table)
    assert InstanceCost.build(m, dev, 2, eff).weights == weight_bytes(m) - table


def test_moe_expert_reads_use_the_quantized_width():
    m = load_hf_config(CONFIGS / "deepseek-v3.json")
    cost = InstanceCost.build(m, ACCELERATORS["h200"], 8, Efficiency())
    assert cost.expert_weights == pytest.approx(param_counts(m)["experts"] * (1 + 4 / 16384))
    # everything resident is read but the untied input table (129,280 × 7,168, bf16)
    table = 129280 * 7168 * 2
    assert cost.weights + cost.expert_weights == pytest.approx(weight_bytes(m) - table)


# DeepSeek-R1 in FP8 is 673 GB of weights. 8×H100 is 640 GB (80 GB each, datasheet), so it
# does not fit; serving guides run it on 8×H200 or two 8×H100 nodes
# (docs.sglang.io/docs/basic_usage/deepseek_v3, docs.vllm.ai recipes DeepSeek-V3).
@pytest.mark.parametrize(
    ("accelerator", "devices", "fits"),
    [("h100-sxm", 8, False), ("h200", 8, True), ("h100-sxm", 16, True)],
)
def test_deepseek_fp8_memory_fit(accelerator, devices, fits):
    from prefixbench.system.runner import prepare

    sets = [
        f"model={CONFIGS / 'deepseek-v3.json'}",
        *(f"cluster.{role}.accelerator={accelerator}" for role in ("prefill", "decode")),
        *(f"cluster.{role}.devices={devices}" for role in ("prefill", "decode")),
        "run.requests=200",
        "run.warmup_requests=20",
    ]
    s = load_scenario("tool_call", sets)
    if fits:
        assert prepare(s).model.weight_format == "fp8 block 128x128"
    else:
        with pytest.raises(SimulationError, match=r"673\.2 GB"):
            prepare(s)


# ---------------------------------------------------------------- MoE layouts


def test_qwen2_moe_sparse_step_and_shared_expert(tmp_path):
    base = dict(cfg("qwen3-30b-a3b"), decoder_sparse_step=2, mlp_only_layers=[1])
    base["shared_expert_intermediate_size"] = 4096
    m = load(tmp_path, base)
    # Layers i with (i+1) % 2 == 0 are MoE (24 of 48); layer 1 is listed as dense too.
    assert m.first_dense_layers == 48 - 23
    h = 2048
    dense, expert, shared = 3 * h * 6144, 3 * h * 768, 3 * h * 4096
    p = param_counts(m)
    assert p["experts"] == 23 * 128 * expert
    body_mlp = p["body"] - 48 * (h * 32 * 128 + 2 * h * 4 * 128 + 32 * 128 * h) - (48 * 2 * h + h)
    assert body_mlp == 25 * dense + 23 * (shared + h * 128)


def test_llama4_interleaved_moe(tmp_path):
    data = dict(cfg("mixtral-8x7b-v0.1"), model_type="llama4_text")
    data.update(num_local_experts=16, num_experts_per_tok=1, interleave_moe_layer_step=2)
    data.update(intermediate_size=8192, intermediate_size_mlp=16384)
    m = load(tmp_path, data)
    assert (m.first_dense_layers, m.moe_intermediate_size, m.intermediate_size) == (16, 8192, 16384)
    assert m.shared_expert_intermediate_size == 8192  # Llama-4 MoE layers add one shared expert


def test_deepseek_moe_layer_freq(tmp_path):
    m = load(tmp_path, dict(cfg("deepseek-v3"), moe_layer_freq=2))
    # Layers 3..60 with i % 2 == 0: 4, 6, ..., 60 -> 29 MoE layers.
    assert m.first_dense_layers == 61 - 29


@pytest.mark.parametrize(
    ("change", "key"),
    [
        ({"num_local_experts": None}, "num_experts_per_tok"),  # experts per token, no experts
        ({"num_experts": 16}, "num_experts"),  # two expert counts that disagree
        ({"num_experts_per_tok": 9}, "num_experts_per_tok"),
        ({"attn_layer_period": 8, "attn_layer_offset": 4}, "attn_layer_period"),  # Jamba
        ({"mamba_d_state": 16}, "mamba_d_state"),
        ({"full_attention_interval": 4}, "full_attention_interval"),  # Qwen3-Next
        ({"mlp_only_layers": [99]}, "mlp_only_layers"),
    ],
)
def test_size_changing_keys_never_fall_back_to_dense(tmp_path, change, key):
    data = dict(cfg("mixtral-8x7b-v0.1"), **change)
    one_line_error(tmp_path, {k: v for k, v in data.items() if v is not None}, f"'{key}'")


# ---------------------------------------------------------------- attention layouts


def test_mistral_v01_sliding_window_every_layer(tmp_path):
    m = load(tmp_path, dict(cfg("mistral-7b-instruct-v0.3"), sliding_window=4096))
    assert (m.sliding_layers, m.sliding_window) == (32, 4096)
    assert kv_bytes(m, 10_000) == 2 * 32 * 8 * 128 * 2 * 4096
    assert kv_bytes(m, 1_000) == 2 * 32 * 8 * 128 * 2 * 1_000


def test_qwen2_use_sliding_window(tmp_path):
    base = cfg("qwen2.5-7b-instruct")
    assert load(tmp_path, base).sliding_layers == 0  # use_sliding_window false
    on = dict(base, use_sliding_window=True, sliding_window=4096, max_window_layers=20)
    assert load(tmp_path, on).sliding_layers == 8  # layers 20..27 slide


def test_layer_types_list(tmp_path):
    kinds = ["sliding_attention"] * 5 + ["full_attention"]
    data = dict(cfg("llama-3.1-8b-instruct"), num_hidden_layers=6, layer_types=kinds)
    m = load(tmp_path, dict(data, sliding_window=1024))
    assert (m.sliding_layers, m.full_layers, m.sliding_window) == (5, 1, 1024)
    bad = dict(data, layer_types=["full_attention"] * 5 + ["mamba"])
    one_line_error(tmp_path, bad, "'layer_types'")
    linear = dict(data, layer_types=["linear_attention"] * 6)
    one_line_error(tmp_path, linear, "'layer_types'", "linear")


def test_window_as_long_as_context_is_full_attention(tmp_path):
    m = load(tmp_path, dict(cfg("mistral-7b-instruct-v0.3"), sliding_window=32768))
    assert m.sliding_layers == 0 and kv_bytes_per_token(m) == 131072


def test_gemma_untied_when_the_config_says_so(tmp_path):
    tied = load(tmp_path, cfg("gemma-2-9b-it"))
    untied = load(tmp_path, dict(cfg("gemma-2-9b-it"), tie_word_embeddings=False))
    assert param_counts(untied)["total"] - param_counts(tied)["total"] == 256000 * 3584


def test_gemma_head_dim_default(tmp_path):
    data = {k: v for k, v in cfg("gemma-2-9b-it").items() if k != "head_dim"}
    assert load(tmp_path, data).head_dim == 256  # Gemma2Config default, not 3584 / 16


# ---------------------------------------------------------------- config sanity


def test_kv_heads_must_divide_heads(tmp_path):
    data = dict(cfg("llama-3.1-8b-instruct"), num_key_value_heads=6)
    one_line_error(tmp_path, data, "'num_key_value_heads'", "does not divide", "32")


@pytest.mark.parametrize("value", [10**30, 2**31])
def test_huge_integer_is_one_line(tmp_path, value):
    data = dict(cfg("llama-3.1-8b-instruct"), hidden_size=value)
    msg = one_line_error(tmp_path, data, "'hidden_size'", "too large")
    assert len(msg) < 300


def test_integer_python_cannot_convert(tmp_path):
    path = tmp_path / "m.json"
    text = json.dumps(cfg("llama-3.1-8b-instruct")).replace("4096", "9" * 5000, 1)
    path.write_text(text)
    with pytest.raises(CatalogError) as err:
        load_hf_config(path)
    msg = str(err.value)
    assert "\n" not in msg and len(msg) < 300 and "too large" in msg


def test_absurd_layer_count_answers_at_once(tmp_path):
    # Layer patterns are counted arithmetically: 2^31 - 1 layers must not loop.
    m = load(tmp_path, dict(cfg("deepseek-v3"), num_hidden_layers=2**31 - 1, moe_layer_freq=3))
    assert m.layers - m.first_dense_layers == (2**31 - 2) // 3 - (3 - 1) // 3


def test_unknown_format_names_are_one_line():
    with pytest.raises(CatalogError, match="unknown KV dtype 'fp4'; use one of bf16"):
        with_formats(MODELS["qwen2-1.5b"], kv_dtype="fp4")
    with pytest.raises(CatalogError, match="unknown weight format"):
        with_formats(MODELS["qwen2-1.5b"], weights="nf4")


def test_crossover_at_fp8_kv_halves_the_tie_bandwidth():
    from prefixbench.study.crossover import analytic_row

    bf16 = analytic_row("qwen2-1.5b", "l4", "eth-25g")
    fp8 = analytic_row("qwen2-1.5b", "l4", "eth-25g", kv_dtype="fp8")
    assert fp8["kv_bytes_per_token"] == 2 * 28 * 2 * 128 * 1
    # Same recompute time, half the bytes to move: the tie bandwidth halves exactly.
    assert fp8["recompute_ms_at_ref"] == bf16["recompute_ms_at_ref"]
    assert fp8["tie_bandwidth_gbytes_per_s"] == pytest.approx(bf16["tie_bandwidth_gbytes_per_s"] / 2)
    latency_ms = 30e-3  # eth-25g, 30 µs
    moved = (bf16["transfer_ms_at_ref"] - latency_ms) / 2
    assert fp8["transfer_ms_at_ref"] == pytest.approx(moved + latency_ms)


def test_fp8_kv_halves_every_transfer():
    # End to end through the engine: the same requests, each transfer's bytes halved.
    from prefixbench.system.runner import prepare, simulate_policy

    sets = ["run.requests=400", "run.warmup_requests=50"]
    moved = {}
    for kv in ("bf16", "fp8"):
        prep = prepare(load_scenario("tool_call", [*sets, f"model.kv_dtype={kv}"]))
        cols = simulate_policy(prep, "transfer_per_request").columns
        latency = prep.base.link_latency_s
        moved[kv] = cols["t_transfer_end"] - cols["t_transfer_start"] - latency
    assert moved["bf16"].size == 400 and (moved["bf16"] > 0).all()
    assert moved["fp8"] == pytest.approx(moved["bf16"] / 2, rel=1e-9)


def test_not_a_config_file(tmp_path):
    big = tmp_path / "big.json"
    with big.open("wb") as f:
        f.truncate(17 * 2**20)  # sparse: no disk used
    with pytest.raises(CatalogError, match="more than the 16,777,216 allowed"):
        load_hf_config(big)
    with pytest.raises(CatalogError, match="not a regular file"):
        load_hf_config(tmp_path)
