"""Catalog presets: valid, cited, keyed by the names users type."""

from __future__ import annotations

import pytest

from prefixbench.catalog import (
    ACCELERATORS,
    LINKS,
    MODELS,
    AcceleratorSpec,
    LinkSpec,
    ModelSpec,
    get_accelerator,
    get_link,
    get_model,
)
from prefixbench.errors import CatalogError

REGISTRIES = [(MODELS, ModelSpec), (ACCELERATORS, AcceleratorSpec), (LINKS, LinkSpec)]
ALL_SPECS = [(key, spec, cls) for registry, cls in REGISTRIES for key, spec in registry.items()]
IDS = [key for key, _, _ in ALL_SPECS]


@pytest.mark.parametrize(("key", "spec", "cls"), ALL_SPECS, ids=IDS)
def test_preset_validates(key, spec, cls):
    assert isinstance(spec, cls)
    assert cls.model_validate(spec.model_dump()) == spec


@pytest.mark.parametrize(("key", "spec", "cls"), ALL_SPECS, ids=IDS)
def test_preset_is_cited(key, spec, cls):
    assert spec.source.strip()
    assert "http" in spec.source


@pytest.mark.parametrize(("key", "spec", "cls"), ALL_SPECS, ids=IDS)
def test_key_is_lowercase_name(key, spec, cls):
    assert key == key.lower() == spec.name


def test_expected_presets_present():
    assert set(MODELS) == {
        "qwen2-0.5b", "qwen2-1.5b", "qwen2-7b", "llama-3.1-8b", "llama-3.1-70b", "mistral-7b",
        "deepseek-v2-lite", "llama-2-7b", "llama-2-13b", "llama-2-70b",
    }  # fmt: skip
    assert set(ACCELERATORS) == {
        "l4", "a10g", "l40s", "a100-40gb", "a100-80gb", "h100-sxm", "h200", "b200",
    }  # fmt: skip
    assert set(LINKS) == {
        "pcie3-x16", "pcie4-x16", "pcie5-x16", "nvlink3", "nvlink4", "ib-ndr400",
        "roce-100g", "roce-200g", "eth-10g", "eth-25g", "eth-100g",
    }  # fmt: skip


def test_every_model_reports_params():
    assert all(m.params_reported > 0 for m in MODELS.values())


def test_qwen2_shape_flags():
    for name in ("qwen2-0.5b", "qwen2-1.5b", "qwen2-7b"):
        assert MODELS[name].qkv_bias
    assert MODELS["qwen2-0.5b"].tied_embeddings and MODELS["qwen2-1.5b"].tied_embeddings
    assert not MODELS["qwen2-7b"].tied_embeddings


def test_deepseek_v2_lite_is_mla_moe():
    m = MODELS["deepseek-v2-lite"]
    assert m.is_mla and m.is_moe
    assert (m.kv_lora_rank, m.q_lora_rank, m.qk_rope_head_dim) == (512, 0, 64)
    assert (m.qk_nope_head_dim, m.v_head_dim) == (128, 128)
    assert (m.n_routed_experts, m.experts_per_token, m.n_shared_experts) == (64, 6, 2)
    assert (m.moe_intermediate_size, m.first_dense_layers, m.intermediate_size) == (1408, 1, 10944)


@pytest.mark.parametrize(
    ("name", "gbps"),
    [
        ("pcie3-x16", 15.75), ("pcie4-x16", 31.5), ("pcie5-x16", 63.0),
        ("nvlink3", 300.0), ("nvlink4", 450.0), ("ib-ndr400", 50.0),
        ("roce-100g", 12.5), ("roce-200g", 25.0),
        ("eth-10g", 1.25), ("eth-25g", 3.125), ("eth-100g", 12.5),
    ],
)  # fmt: skip
def test_link_bandwidth_per_direction(name, gbps):
    assert LINKS[name].bandwidth_gbps == pytest.approx(gbps)


def test_links_rdma_faster_than_tcp():
    tcp = min(link.latency_us for link in LINKS.values() if link.kind == "ethernet")
    rdma = max(link.latency_us for link in LINKS.values() if link.kind in ("roce", "infiniband"))
    assert rdma < tcp


def test_accelerators_dense_bf16():
    # Dense peaks are half the sparsity figure NVIDIA prints first.
    assert ACCELERATORS["h100-sxm"].peak_tflops == pytest.approx(1979 / 2)
    assert ACCELERATORS["a100-80gb"].peak_tflops == 312.0
    assert ACCELERATORS["l4"].peak_tflops == pytest.approx(242 / 2)


def test_lookup_is_case_insensitive():
    assert get_model(" Qwen2-1.5B ") is MODELS["qwen2-1.5b"]
    assert get_accelerator("H100-SXM") is ACCELERATORS["h100-sxm"]
    assert get_link("RoCE-200G") is LINKS["roce-200g"]


def test_unknown_model_suggests_closest():
    with pytest.raises(CatalogError) as err:
        get_model("qwen2-15b")
    assert "did you mean 'qwen2-1.5b'" in str(err.value)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(("lookup", "name"), [(get_accelerator, "h10"), (get_link, "nvlink5x")])
def test_unknown_hardware_raises(lookup, name):
    with pytest.raises(CatalogError, match=name):
        lookup(name)
