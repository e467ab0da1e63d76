"""The scenario loader parses a preset's YAML once per process (a sweep loads the same
preset for every grid point) and hands each load its own copy, so one point's --set never
reaches another's scenario."""

from __future__ import annotations

from prefixbench.scenario import loader


def _count_parses(monkeypatch) -> list[str]:
    texts: list[str] = []
    real = loader.yaml.safe_load

    def counting(text):
        texts.append(text)
        return real(text)

    loader._yaml_cached.cache_clear()
    monkeypatch.setattr(loader.yaml, "safe_load", counting)
    return texts


def test_a_preset_is_parsed_once_for_every_point(monkeypatch):
    texts = _count_parses(monkeypatch)
    preset = loader._preset_text("tool_call")
    for seed in range(5):
        loader.load_scenario("tool_call", [f"seed={seed}", "memory.budget_factor=0.5"])
    assert texts.count(preset) == 1
    assert len(texts) <= 1 + 5 + 1  # the preset, each seed value, the budget value


def test_a_set_on_one_load_does_not_reach_the_next(monkeypatch):
    _count_parses(monkeypatch)
    sets = ["run.requests=4321", "run.warmup_requests=21", "cluster.decode_instances=3"]
    first = loader.load_scenario("tool_call", sets)
    again = loader.load_scenario("tool_call")
    assert (first.run.requests, first.cluster.decode_instances) == (4321, 3)
    assert again.run.requests != 4321 and again.cluster.decode_instances != 3
    data, _ = loader.scenario_source("tool_call")
    for v in data.values():  # a caller editing its mapping in place
        if isinstance(v, dict):
            v.clear()
    data.clear()
    assert loader.load_scenario("tool_call").model_dump() == again.model_dump()
