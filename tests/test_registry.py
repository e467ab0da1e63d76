"""One registry per concept (src/prefixbench/registry/): each test enumerates a registry and
checks that every surface listing that concept covers every entry — engine codes, scenario
validation, CLI choices, plot colours and legends, the report, the README and the docs —
and that the generated texts (README policy table, docs/reference.md) are current."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from prefixbench import registry
from prefixbench.registry import docgen
from prefixbench.registry.figures import FIGURES
from prefixbench.registry.metrics import METRICS
from prefixbench.registry.policies import POLICIES, policy_names
from prefixbench.registry.routers import DECODE_ROUTERS, PREFILL_ROUTERS
from prefixbench.registry.traces import TRACE_FORMATS

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
MODEL_DOCS = "".join(p.read_text(encoding="utf-8") for p in sorted((DOCS / "model").glob("*.md")))

# Okabe & Ito (2008), "Color Universal Design": eight colours told apart with the common
# colour-vision deficiencies (black, orange, sky blue, bluish green, yellow, blue,
# vermillion, reddish purple)
OKABE_ITO = {"#000000", "#E69F00", "#56B4E9", "#009E73", "#F0E442", "#0072B2", "#D55E00", "#CC79A7"}


def _grey(colour: str) -> bool:
    return colour[1:3] == colour[3:5] == colour[5:7]


# ------------------------------------------------------------------------------ policies


def test_policy_codes_are_the_engines():
    """The registry's code for each policy is the engine's constant for it (written here by
    name, not computed from the registry), and every engine policy constant is registered."""
    from prefixbench.engine import layout as L
    from prefixbench.engine.policies import POLICIES as ENGINE

    want = {
        "transfer_per_request": L.POL_TRANSFER,
        "recompute_on_decode": L.POL_RECOMPUTE,
        "replicate_hotset": L.POL_HOTSET,
        "replicate_all_lru": L.POL_ALL_LRU,
        "replicate_tiered": L.POL_TIERED,
        "cost_aware": L.POL_COST_AWARE,
    }
    assert {p.name: p.code for p in POLICIES} == want
    engine_codes = {v for k, v in vars(L).items() if k.startswith("POL_") and isinstance(v, int)}
    assert engine_codes == set(want.values())
    assert {n: e.code for n, e in ENGINE.items()} == want


def test_policies_are_unique_and_ranked():
    assert len(set(policy_names())) == len(POLICIES)
    assert sorted(p.simplicity for p in POLICIES) == list(range(len(POLICIES)))
    assert registry.policy("cost_aware").name == "cost_aware"
    with pytest.raises(KeyError):
        registry.policy("no_such_policy")


def test_policy_colours_are_colour_blind_safe_and_distinct():
    from prefixbench.study.map_render import UNSTABLE_COLOR
    from prefixbench.study.plots import POLICY_COLORS, SHORT, TIE_COLOR

    colours = [p.colour for p in POLICIES]
    assert len(set(colours)) == len(colours), "two policies share a colour"
    assert all(c in OKABE_ITO or _grey(c) for c in colours), colours
    assert not {TIE_COLOR, UNSTABLE_COLOR} & set(colours)
    legends = [p.legend for p in POLICIES]
    assert len(set(legends)) == len(legends)
    for p in POLICIES:  # every policy has a colour and a legend label in the figures
        assert POLICY_COLORS[p.name] == p.colour
        assert SHORT[p.name] == p.legend


def test_every_policy_is_a_scenario_and_cli_choice():
    from prefixbench.cli.app import PolicyChoice, PolicyName
    from prefixbench.scenario.models import POLICIES as SCENARIO_POLICIES
    from prefixbench.scenario.models import REFERENCE_POLICIES, Policy

    names = policy_names()
    assert SCENARIO_POLICIES == names
    assert tuple(p.value for p in Policy) == names
    assert tuple(p.value for p in PolicyName) == names
    assert tuple(p.value for p in PolicyChoice) == ("all", *names)
    assert REFERENCE_POLICIES == names[:4]  # the seed study's four come first


def test_scenario_validation_takes_every_policy_and_refuses_others():
    from prefixbench.errors import PrefixbenchError
    from prefixbench.scenario.loader import load_scenario

    for name in policy_names():
        assert load_scenario("tool_call", [f"policy={name}"]).policy.value == name
    with pytest.raises(PrefixbenchError, match="replicate_everything"):
        load_scenario("tool_call", ["policy=replicate_everything"])


def test_every_policy_has_a_readme_row_and_docs_rows():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    reference = (DOCS / "reference.md").read_text(encoding="utf-8")
    for p in POLICIES:
        assert f"| `{p.name}` | {p.does} |" in readme
        assert f"| `{p.name}` | {p.code} |" in reference
        assert f"`{p.name}`" in MODEL_DOCS


# ------------------------------------------------------------------------------ routers


def test_every_router_reaches_engine_scenario_and_docs():
    from prefixbench.engine.routing import DECODE_ROUTERS as ENGINE_D
    from prefixbench.engine.routing import PREFILL_ROUTERS as ENGINE_P
    from prefixbench.scenario.models import ClusterSpec

    fields = ClusterSpec.model_fields
    reference = (DOCS / "reference.md").read_text(encoding="utf-8")
    for routers, engine, field in (
        (PREFILL_ROUTERS, ENGINE_P, "prefill_router"),
        (DECODE_ROUTERS, ENGINE_D, "decode_router"),
    ):
        assert {r.name: r.code for r in routers} == {n: e.code for n, e in engine.items()}
        assert len({r.code for r in routers}) == len(routers)
        assert fields[field].default in engine
        for r in routers:
            assert r.name in fields[field].description
            assert f"| `{r.name}` | {r.code} |" in reference
            assert f"`{r.name}`" in MODEL_DOCS


def test_router_codes_are_the_engines():
    """disagg.route_prefill / route_decode branch on these codes (read from the source):
    round_robin is 1 for prefill; prefix_affinity 1 and round_robin 2 for decode."""
    assert {r.name: r.code for r in PREFILL_ROUTERS} == {"least_tokens": 0, "round_robin": 1}
    assert {r.name: r.code for r in DECODE_ROUTERS} == {
        "least_load": 0,
        "prefix_affinity": 1,
        "round_robin": 2,
    }


# ------------------------------------------------------------------------------ trace formats


def test_every_trace_format_is_read_offered_and_documented():
    from prefixbench.cli.app import _TraceFormat
    from prefixbench.workload.traces import FORMATS

    names = tuple(f.name for f in TRACE_FORMATS)
    assert FORMATS == names
    assert tuple(f.value for f in _TraceFormat) == names
    traces_md = (DOCS / "traces.md").read_text(encoding="utf-8")
    reference = (DOCS / "reference.md").read_text(encoding="utf-8")
    for f in TRACE_FORMATS:
        assert f"format `{f.name}`" in traces_md
        assert f"| `{f.name}` |" in reference


# ------------------------------------------------------------------------------ metrics


def test_metrics_are_the_columns_the_run_comparison_shows():
    from prefixbench.render.tables import ENERGY_GROUP, LOWER_IS_BETTER, RUN_ROWS

    shown = [c for c, _, _ in RUN_ROWS] + [c for c, _, _ in ENERGY_GROUP[1]]
    columns = [m.column for m in METRICS]
    assert len(set(columns)) == len(columns)
    assert set(shown) <= set(columns), f"shown but not registered: {set(shown) - set(columns)}"
    assert LOWER_IS_BETTER == {m.column for m in METRICS if m.better == "lower"}
    assert all(m.better in ("lower", "higher", "") for m in METRICS)


def test_every_metric_is_defined_in_the_model_docs():
    reference = (DOCS / "reference.md").read_text(encoding="utf-8")
    for m in METRICS:
        assert f"`{m.column}`" in MODEL_DOCS, f"docs/model/ does not define {m.column}"
        assert f"| `{m.column}` |" in reference


# ------------------------------------------------------------------------------ figures


def test_every_figure_is_drawn_titled_and_documented():
    from prefixbench.study.report import PLOT_TITLES

    plots_src = (ROOT / "src/prefixbench/study/plots.py").read_text(encoding="utf-8")
    drawn = set(re.findall(r'"(\d\d_\w+\.png)"', plots_src))
    files = [f.file for f in FIGURES]
    assert drawn == set(files), "plots.py draws figures the registry lacks, or the reverse"
    assert PLOT_TITLES == {f.file: f.title for f in FIGURES}
    study_md = (DOCS / "study.md").read_text(encoding="utf-8")
    reference = (DOCS / "reference.md").read_text(encoding="utf-8")
    for f in FIGURES:
        assert f.file in study_md
        assert f"| `{f.file}` |" in reference


# ------------------------------------------------------------------------------ generated texts


def test_reference_md_is_current():
    committed = (DOCS / "reference.md").read_text(encoding="utf-8")
    assert committed == docgen.reference_page(), (
        f"docs/reference.md is out of date with the registry; regenerate it with "
        f"`{docgen.REGENERATE}`"
    )


def test_readme_policy_table_is_current():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert docgen.README_BEGIN in readme and docgen.README_END in readme
    assert readme == docgen.with_readme_table(readme), (
        f"README.md's policy table is out of date; regenerate it with `{docgen.README_REGENERATE}`"
    )


def test_readme_regeneration_rewrites_only_the_table(tmp_path):
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    stale = readme.replace("| `cost_aware` |", "| `cost_awar` |")
    path = tmp_path / "README.md"
    path.write_text(stale, encoding="utf-8")
    docgen.main(["--readme", str(path)])
    assert path.read_text(encoding="utf-8") == readme
