"""Fuzzing the scenario loader: random YAML documents, mutated presets, random ``--set``.

Every input either loads into a valid Scenario or raises one clear ScenarioError
(tests/robustness_util.assert_clear); no other exception type may escape. Mutated presets
that still validate are also prepared (workload generated, memory sized), which must end in
a prefixbench error or succeed.
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from robustness_util import assert_clear

from prefixbench.errors import PrefixbenchError, ScenarioError, one_line
from prefixbench.scenario.loader import (
    _preset_text,
    apply_overrides,
    load_scenario,
    parse_override,
    preset_names,
    scenario_source,
    validate,
)
from prefixbench.scenario.models import Scenario


def fuzz(n: int) -> settings:
    """``n`` generated examples, no deadline (a few inputs prepare a workload)."""
    return settings(max_examples=n, deadline=None, suppress_health_check=list(HealthCheck))


PRESETS = {name: scenario_source(name)[0] for name in preset_names()}
SYNTHETIC = sorted(n for n, d in PRESETS.items() if d["workload"]["kind"] == "synthetic")

FIELD_WORDS = [
    "name",
    "model",
    "policy",
    "seed",
    "workload",
    "kind",
    "arrivals",
    "process",
    "rate",
    "cv",
    "prefixes",
    "count",
    "zipf_s",
    "length",
    "value",
    "low",
    "high",
    "mean",
    "min",
    "max",
    "values",
    "weights",
    "share_fraction",
    "suffix_length",
    "output_length",
    "drift",
    "period_s",
    "shift",
    "cluster",
    "mode",
    "prefill",
    "decode",
    "accelerator",
    "devices",
    "link",
    "bandwidth_gbps",
    "latency_us",
    "channels",
    "decode_instances",
    "prefill_instances",
    "max_decode_batch",
    "block_size",
    "memory",
    "budget_factor",
    "kv_budget_gb",
    "hotset_share",
    "on_full",
    "wait_timeout_s",
    "slo",
    "ttft_ms",
    "tpot_ms",
    "run",
    "requests",
    "warmup_requests",
    "efficiency",
    "mbu",
    "path",
    "format",
    "overlay",
    "start_s",
    "end_s",
]
NAMES = [
    "synthetic",
    "trace",
    "fixed",
    "uniform",
    "lognormal",
    "empirical",
    "poisson",
    "gamma",
    "qwen2-0.5b",
    "qwen2-1.5b",
    "llama-2-70b",
    "l4",
    "h100-sxm",
    "eth-25g",
    "roce-200g",
    "reject",
    "wait",
    "colocated",
    "disaggregated",
    "transfer_per_request",
    "replicate_hotset",
]
EXTREME_NUMBERS = [
    0,
    1,
    -1,
    2,
    7,
    10**9,
    10**9 + 1,
    2**63 - 1,
    2**63,
    10**30,
    -(10**30),
    0.0,
    -0.0,
    0.5,
    1e-9,
    5e-324,
    1e-300,
    1e300,
    float("inf"),
    float("-inf"),
    float("nan"),
]

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.sampled_from(EXTREME_NUMBERS),
    st.floats(),
    st.text(max_size=12),
    st.sampled_from(NAMES),
)
keys = st.one_of(st.sampled_from(FIELD_WORDS), st.text(max_size=8))
values = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(keys, inner, max_size=4)),
    max_leaves=12,
)


def _paths(node, prefix=()):
    """Every key path of a nested mapping (inner nodes and leaves)."""
    if isinstance(node, dict):
        for k, v in node.items():
            yield (*prefix, k)
            yield from _paths(v, (*prefix, k))


@pytest.fixture(scope="module")
def fuzz_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("loader_fuzz")


def _loads_or_clear(fn, where: str | None = None) -> Scenario | None:
    try:
        s = fn()
    except PrefixbenchError as e:
        assert_clear(e, where)
        return None
    assert isinstance(s, Scenario)
    return s


# ------------------------------------------------------------------ random documents


@fuzz(350)
@given(doc=st.one_of(values, st.dictionaries(keys, values, max_size=8)))
def test_random_yaml_documents(fuzz_dir: Path, doc) -> None:
    path = fuzz_dir / "random.yaml"
    path.write_text(yaml.safe_dump(doc, allow_unicode=True), encoding="utf-8")
    _loads_or_clear(lambda: load_scenario(path), where=str(path))


@fuzz(300)
@given(
    raw=st.one_of(
        st.binary(max_size=300),
        st.text(max_size=300).map(lambda t: t.encode("utf-8", "surrogatepass")),
    )
)
def test_random_bytes_as_scenario_file(fuzz_dir: Path, raw: bytes) -> None:
    path = fuzz_dir / "bytes.yaml"
    path.write_bytes(raw)
    _loads_or_clear(lambda: load_scenario(path), where=str(path))


# ------------------------------------------------------------------ mutated presets


@st.composite
def mutated_preset(draw):
    name = draw(st.sampled_from(sorted(PRESETS)))
    data = copy.deepcopy(PRESETS[name])
    for _ in range(draw(st.integers(1, 3))):
        paths = list(_paths(data))
        if not paths:
            break
        path = draw(st.sampled_from(paths))
        parent = data
        for k in path[:-1]:
            parent = parent[k]
        if not isinstance(parent, dict) or path[-1] not in parent:
            continue
        op = draw(st.sampled_from(["delete", "replace", "rename", "add", "wrap"]))
        key = path[-1]
        if op == "delete":
            del parent[key]
        elif op == "replace":
            parent[key] = draw(values)
        elif op == "rename":
            parent[draw(keys)] = parent.pop(key)
        elif op == "add":
            parent[draw(keys)] = draw(values)
        else:
            parent[key] = [parent[key]]
    return name, data


@fuzz(500)
@given(case=mutated_preset())
def test_mutated_presets_validate_or_fail_clearly(case) -> None:
    name, data = case
    where = f"scenarios/{name}.yaml"
    _loads_or_clear(lambda: validate(data, where), where=where)


@st.composite
def numeric_mutation(draw):
    """A synthetic preset with one or two numeric fields pushed to extremes (or removed)."""
    name = draw(st.sampled_from(SYNTHETIC))
    data = copy.deepcopy(PRESETS[name])
    leaves = [p for p in _paths(data) if not isinstance(_get(data, p), dict)] + [
        ("cluster", "decode", "devices"),
        ("cluster", "prefill", "devices"),
        ("cluster", "link", "bandwidth_gbps"),
        ("cluster", "link", "latency_us"),
        ("cluster", "link", "channels"),
        ("cluster", "decode_instances"),
        ("cluster", "max_decode_batch"),
        ("cluster", "block_size"),
        ("memory", "budget_factor"),
        ("memory", "kv_budget_gb"),
        ("memory", "hotset_share"),
        ("slo", "ttft_ms"),
        ("seed",),
        ("model",),
        ("cluster", "decode", "accelerator"),
        ("memory", "on_full"),
    ]
    for _ in range(draw(st.integers(1, 2))):
        path = draw(st.sampled_from(leaves))
        node = data
        for k in path[:-1]:
            node = node.setdefault(k, {}) if isinstance(node, dict) else {}
        node[path[-1]] = draw(
            st.one_of(
                st.sampled_from(EXTREME_NUMBERS),
                st.integers(-5, 70_000),
                st.floats(),
                st.sampled_from(NAMES),
            )
        )
    data["run"] = {"requests": 200, "warmup_requests": 20}  # keep each prepare small
    return name, data


def _get(data, path):
    for k in path:
        data = data[k]
    return data


@fuzz(200)
@given(case=numeric_mutation())
def test_extreme_values_are_refused_or_prepared(case) -> None:
    """Past validation, preparing (workload, memory budget) also ends cleanly."""
    from prefixbench.system.runner import prepare

    name, data = case
    s = _loads_or_clear(lambda: validate(data, f"scenarios/{name}.yaml"))
    event("invalid" if s is None else "valid")
    if s is not None:
        event("prepared" if _loads_or_clear(lambda: prepare(s) and s) else "refused by prepare")


# ------------------------------------------------------------------ YAML text mutations

YAML_CHARS = st.sampled_from(list(":-[]{}#&*!|>'\"%@`,? \t\n") + list("ab1.0e"))


@st.composite
def mutated_text(draw):
    name = draw(st.sampled_from(sorted(PRESETS)))
    text = _preset_text(name)
    for _ in range(draw(st.integers(1, 4))):
        i = draw(st.integers(0, len(text)))
        op = draw(st.sampled_from(["delete", "insert", "dup_line", "indent"]))
        if op == "delete":
            text = text[:i] + text[i + draw(st.integers(1, 20)) :]
        elif op == "insert":
            text = text[:i] + "".join(draw(st.lists(YAML_CHARS, min_size=1, max_size=5))) + text[i:]
        else:
            lines = text.split("\n")
            j = draw(st.integers(0, len(lines) - 1))
            if op == "dup_line":
                lines.insert(j, lines[j])
            else:
                lines[j] = draw(st.sampled_from([" ", "  ", "\t", "- "])) + lines[j]
            text = "\n".join(lines)
    return text


@fuzz(300)
@given(text=mutated_text())
def test_mutated_preset_text(fuzz_dir: Path, text: str) -> None:
    path = fuzz_dir / "mutated.yaml"
    path.write_text(text, encoding="utf-8")
    try:
        load_scenario(path)
    except PrefixbenchError as e:
        assert_clear(e, where=str(path))
        if ":" in e.where[len(str(path)) :]:  # file:line
            line = int(e.where[len(str(path)) + 1 :].split()[0])
            assert 1 <= line <= text.count("\n") + 2


# ------------------------------------------------------------------ --set overrides

override_path = st.lists(
    st.one_of(st.sampled_from(FIELD_WORDS), st.text(max_size=6)), min_size=0, max_size=5
).map(".".join)
override_value = st.one_of(
    st.text(max_size=20),
    values.map(lambda v: yaml.safe_dump(v, default_flow_style=True).strip()),
    st.sampled_from(
        [
            "",
            "[",
            "{a: 1",
            "*x",
            "&a [1]",
            "!!python/object:os.system ls",
            ".inf",
            "-.nan",
            "1e999",
            "0x10",
            "~",
        ]
    ),
)


@fuzz(350)
@given(
    name=st.sampled_from(sorted(PRESETS)),
    sets=st.lists(
        st.one_of(st.text(max_size=30), st.tuples(override_path, override_value).map("=".join)),
        min_size=1,
        max_size=3,
    ),
)
def test_random_overrides(name: str, sets: list[str]) -> None:
    _loads_or_clear(lambda: load_scenario(name, sets), where="--set")


@pytest.mark.parametrize(
    "bad",
    [
        "novalue",
        "=3",
        "a..b=1",
        ".=1",
        "a.=1",
        "  =x",
        "\n=1",
        "seed.x=1",
        "name.first=a",
        "\x1c=1",
    ],
)
def test_bad_override_syntax_is_one_clear_line(bad: str) -> None:
    with pytest.raises(ScenarioError) as e:
        load_scenario("medium_chat", [bad])
    assert_clear(e.value, where="--set")


def test_override_into_a_value_names_the_field() -> None:
    with pytest.raises(ScenarioError) as e:
        apply_overrides({"seed": 3}, ["seed.x=1"])
    assert "'seed' is a value" in assert_clear(e.value, where="--set")


def test_override_values_that_are_not_yaml_are_text() -> None:
    assert parse_override("name=[unclosed") == (["name"], "[unclosed")
    assert parse_override("name=" + "[" * 600) == (["name"], "[" * 600)  # no RecursionError


# ------------------------------------------------------------------ hostile documents


def _alias_bomb(levels: int = 9) -> str:
    lines = ["a0: &a0 [1, 1, 1, 1, 1, 1, 1, 1, 1]"]
    for i in range(1, levels):
        lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]")
    lines.append(f"name: *a{levels - 1}")
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize(
    "text, expect",
    [
        pytest.param("workload: " + "[" * 600 + "]" * 600, "nested too deeply", id="deep-lists"),
        pytest.param(
            "workload: " + "{a: " * 3000 + "1" + "}" * 3000, "nested too deeply", id="deep-maps"
        ),
        pytest.param(_alias_bomb(), "field 'name'", id="alias-bomb"),  # 9**9 leaves if expanded
        pytest.param("!!python/object/apply:os.system ['echo pwned']\n", "YAML", id="python-tag"),
        pytest.param("", "empty file", id="empty"),
        pytest.param("- 1\n- 2\n", "not a list", id="list"),
        pytest.param("a: 1\n---\nb: 2\n", "YAML syntax error", id="two-documents"),
        pytest.param("name:\tx\n\tmodel: y\n", "YAML syntax error", id="tabs"),
        pytest.param(
            "seed: 99999999999999999999999\nworkload: {kind: trace, path: x.jsonl}\n",
            "64-bit",
            id="huge-int",
        ),
        pytest.param(
            "name: 2001-12-14\nworkload: {kind: trace, path: x.jsonl}\n", "valid string", id="date"
        ),
        pytest.param(
            '{"\\n\\u2028key\\x1c": 1, workload: {kind: trace, path: x.jsonl}}\n',
            "field '\\n\\u2028key\\x1c': Extra inputs",
            id="linebreak-key",
        ),
    ],
)
def test_hostile_documents(fuzz_dir: Path, text: str, expect: str) -> None:
    path = fuzz_dir / "hostile.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ScenarioError) as e:
        load_scenario(path)
    line = assert_clear(e.value, where=str(path))
    assert expect in line


def test_not_utf8_and_directories(fuzz_dir: Path) -> None:
    path = fuzz_dir / "latin1.yaml"
    path.write_bytes("name: caf\xe9\n".encode("latin-1"))
    with pytest.raises(ScenarioError) as e:
        load_scenario(path)
    assert "UTF-8" in assert_clear(e.value, where=str(path))
    folder = fuzz_dir / "folder.yaml"
    folder.mkdir(exist_ok=True)
    with pytest.raises(ScenarioError) as e:
        load_scenario(folder)
    assert_clear(e.value, where=str(folder))


def test_union_without_kind_lists_the_kinds() -> None:
    with pytest.raises(ScenarioError) as e:
        load_scenario("medium_chat", ["workload.prefixes.length={mean: 5}"])
    line = assert_clear(e.value)
    assert "fixed, uniform, lognormal, empirical" in line


def test_one_line_escapes_every_line_break() -> None:
    text = "a\nb\rc\x0bd\x0ce\x1cf\x1dg\x1eh\x85i\u2028j\u2029k\x00"
    assert len(one_line(text).splitlines()) == 1 and one_line(text).isprintable()
    assert one_line("plain é ü 名") == "plain é ü 名"


def test_an_error_in_the_budget_reference_names_the_set() -> None:
    """`--set model=` beside an override that leaves the reference alone (an empty one): the
    reference scenario's error came out without "(with --set)", found by the fuzzer."""
    from prefixbench.errors import ScenarioError
    from prefixbench.scenario.loader import load_scenario

    with pytest.raises(ScenarioError) as e:
        load_scenario("enterprise_hotset", ["", "model="])
    assert_clear(e.value, where="--set")
