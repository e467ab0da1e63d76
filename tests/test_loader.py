"""Scenario loading: presets, YAML files, --set overrides, error messages."""

from __future__ import annotations

import pytest

from prefixbench.errors import ScenarioError
from prefixbench.scenario.loader import apply_overrides, load_scenario, parse_override, preset_names

SEED_WORKLOADS = {"enterprise_hotset", "long_context_support", "medium_chat", "tool_call"}


def test_presets_include_the_seed_workloads():
    assert SEED_WORKLOADS <= set(preset_names())


@pytest.mark.parametrize("name", sorted(SEED_WORKLOADS))
def test_every_preset_validates(name):
    s = load_scenario(name)
    assert s.name == name
    assert s.workload.kind == "synthetic"


def test_override_types_are_yaml():
    assert parse_override("memory.budget_factor=0.5") == (["memory", "budget_factor"], 0.5)
    assert parse_override("memory.on_full=wait") == (["memory", "on_full"], "wait")
    assert parse_override("a.b=[1, 2]") == (["a", "b"], [1, 2])


def test_override_applies_without_mutating():
    base = {"memory": {"budget_factor": 1.0}}
    new = apply_overrides(base, ["memory.budget_factor=0.35", "seed=4"])
    assert new == {"memory": {"budget_factor": 0.35}, "seed": 4}
    assert base == {"memory": {"budget_factor": 1.0}}


@pytest.mark.parametrize("bad", ["novalue", "=3", "a..b=1"])
def test_bad_override_syntax(bad):
    with pytest.raises(ScenarioError, match="bad override"):
        parse_override(bad)


def test_unknown_field_names_file_and_path(tmp_path):
    p = tmp_path / "s.yaml"
    p.write_text("workload: {kind: synthetic}\nmemroy: {budget_factor: 1}\n")
    with pytest.raises(ScenarioError) as e:
        load_scenario(p)
    msg = str(e.value)
    assert str(p) in msg


def test_bad_value_message(tmp_path):
    with pytest.raises(ScenarioError) as e:
        load_scenario("medium_chat", ["memory.budget_factor=-1"])
    msg = str(e.value)
    assert "memory.budget_factor" in msg and "-1" in msg and "must be > 0" in msg
    assert "scenarios/medium_chat.yaml" in msg


def test_unknown_model_in_scenario_suggests():
    with pytest.raises(ScenarioError, match="did you mean 'qwen2-1.5b'"):
        load_scenario("medium_chat", ["model=qwen2-15b"])


def test_yaml_syntax_error_has_line(tmp_path):
    p = tmp_path / "broken.yaml"
    p.write_text("name: x\nworkload: [unclosed\n")
    with pytest.raises(ScenarioError, match=r"broken.yaml:\d+"):
        load_scenario(p)


def test_yaml_is_data_not_code(tmp_path):
    p = tmp_path / "evil.yaml"
    p.write_text("!!python/object/apply:os.system ['echo pwned']\n")
    with pytest.raises(ScenarioError, match="YAML"):
        load_scenario(p)


def test_paths_in_a_scenario_file_are_relative_to_it(tmp_path, monkeypatch):
    """A trace and a model config.json named in a scenario YAML are read from the YAML's
    folder, whatever the current directory (as docker-compose and kustomize)."""
    import shutil
    from pathlib import Path

    data = Path(__file__).parent / "data"
    sub = tmp_path / "study"
    sub.mkdir()
    shutil.copy(data / "conversation_trace_head300.jsonl", sub / "t.jsonl")
    shutil.copy(data / "configs" / "llama-3.1-8b-instruct.json", sub / "cfg.json")
    (sub / "s.yaml").write_text(
        "model: cfg.json\nworkload: {kind: trace, path: t.jsonl}\n", encoding="utf-8"
    )
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    s = load_scenario(str(sub / "s.yaml"))
    assert s.workload.path == str(sub / "t.jsonl")
    assert s.model == str(sub / "cfg.json")


def test_a_misspelt_field_gets_a_did_you_mean():
    with pytest.raises(ScenarioError, match="did you mean 'rate'"):
        load_scenario("tool_call", ["workload.arrivals.rte=3"])
    with pytest.raises(ScenarioError, match="did you mean 'budget_factor'"):
        load_scenario("tool_call", ["memory.budget_factr=0.5"])
