"""Hugging Face model ids: the catalog's own ids, then a fake hub cache in a temporary
HF_HOME (no network), then one line saying how to get the config."""

from __future__ import annotations

import json

import pytest

from prefixbench import catalog
from prefixbench.catalog.hub import cached_config, catalog_name, looks_like_hf_id
from prefixbench.errors import CatalogError

# a small Llama-shaped config, written by hand
CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "num_hidden_layers": 4,
    "hidden_size": 512,
    "num_attention_heads": 8,
    "num_key_value_heads": 2,
    "intermediate_size": 1024,
    "vocab_size": 1000,
    "max_position_embeddings": 4096,
    "torch_dtype": "bfloat16",
    "tie_word_embeddings": False,
}


def fake_hub(home, repo: str, revision: str = "abc123", config=CONFIG, ref=True):
    org, name = repo.split("/")
    root = home / "hub" / f"models--{org}--{name}"
    snap = root / "snapshots" / revision
    snap.mkdir(parents=True)
    (snap / "config.json").write_text(json.dumps(config))
    if ref:
        (root / "refs").mkdir()
        (root / "refs" / "main").write_text(revision)
    return snap / "config.json"


@pytest.fixture
def hf_home(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # never the network, extra or not
    return tmp_path


def test_catalog_models_answer_to_their_hf_ids(hf_home):
    assert catalog.get_model("meta-llama/Llama-3.1-8B").name == "llama-3.1-8b"
    assert catalog.get_model("Qwen/Qwen2-1.5B").name == "qwen2-1.5b"
    assert catalog_name("meta-llama/Llama-3.1-8B-Instruct") == "llama-3.1-8b"
    for name, spec in catalog.MODELS.items():
        assert catalog.get_model(spec.hf_id).name == name


def test_an_uncached_id_resolves_from_the_hub_cache(hf_home):
    fake_hub(hf_home, "acme/tiny-llama")
    m = catalog.get_model("acme/tiny-llama")
    assert (m.name, m.hf_id) == ("acme/tiny-llama", "acme/tiny-llama")
    assert (m.layers, m.hidden_size, m.kv_heads, m.head_dim) == (4, 512, 2, 64)  # 512/8


def test_refs_main_picks_the_snapshot(hf_home):
    old = fake_hub(hf_home, "acme/two", revision="old", ref=False)
    newer = dict(CONFIG, num_hidden_layers=6)
    root = old.parents[2]
    (root / "snapshots" / "new").mkdir()
    (root / "snapshots" / "new" / "config.json").write_text(json.dumps(newer))
    (root / "refs").mkdir()
    (root / "refs" / "main").write_text("old")
    assert cached_config("acme/two") == old
    assert catalog.get_model("acme/two").layers == 4


def test_offline_and_uncached_is_one_line_saying_how(hf_home):
    with pytest.raises(CatalogError) as e:
        catalog.get_model("acme/not-here")
    line = e.value.line()
    assert "\n" not in line and "huggingface-cli download acme/not-here config.json" in line
    assert "prefixbench[hf]" in line


def test_an_id_in_a_scenario_and_in_import(hf_home):
    from prefixbench.scenario.launch.importer import import_deployment
    from prefixbench.scenario.loader import validate

    fake_hub(hf_home, "acme/tiny-llama")
    r = import_deployment(
        serve="vllm serve acme/tiny-llama -dp 2",
        bench="vllm bench serve --request-rate 2 --num-prompts 100 --random-input-len 200",
    )
    assert validate(r.scenario, "test").model == "acme/tiny-llama"


def test_paths_are_not_ids(tmp_path):
    assert looks_like_hf_id("meta-llama/Llama-3.1-8B")
    assert not looks_like_hf_id("configs/model.json")
    (tmp_path / "org").mkdir()
    (tmp_path / "org" / "name").write_text("{}")
    assert not looks_like_hf_id(str(tmp_path / "org" / "name"))
