"""Documentation that cannot go stale: the generated scenario reference and relative links."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from prefixbench.scenario.docgen import EXAMPLE, REGENERATE, collect, scenario_reference
from prefixbench.scenario.models import Scenario

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
# [text](target) with a relative target; http(s), mailto and pure #anchors are not files
LINK = re.compile(r"\[[^\]]*\]\((?!https?://|mailto:|#)([^)\s]+)\)")


def _relative_links(path: Path) -> list[str]:
    text = re.sub(r"```.*?```", "", path.read_text(encoding="utf-8"), flags=re.S)  # not in code
    return [m.group(1).split("#", 1)[0] for m in LINK.finditer(text)]


def test_scenarios_md_is_current():
    committed = (DOCS / "scenarios.md").read_text(encoding="utf-8")
    assert committed == scenario_reference(), (
        f"docs/scenarios.md is out of date with the scenario models; regenerate it with "
        f"`{REGENERATE}`"
    )


def test_docgen_module_prints_the_reference():
    out = subprocess.run(
        [sys.executable, "-m", "prefixbench.scenario.docgen"], capture_output=True, check=True, cwd=ROOT
    ).stdout
    assert out.decode("utf-8") == scenario_reference()


def test_reference_is_deterministic():
    assert scenario_reference() == scenario_reference()


def test_every_scenario_field_is_documented():
    text = scenario_reference()
    for sec in collect(Scenario):
        assert f"## {sec.model.__name__}" in text
        for name, info in sec.model.model_fields.items():
            assert info.description, f"{sec.model.__name__}.{name} has no description"
            assert f"| `{name}` |" in text


def test_reference_anchors_resolve():
    text = scenario_reference()
    anchors = set(re.findall(r'<a id="([^"]+)"></a>', text))
    targets = set(re.findall(r"\]\(#([^)]+)\)", text))
    assert targets <= anchors, f"links to missing sections: {sorted(targets - anchors)}"


def test_reference_example_is_a_valid_scenario():
    s = Scenario.model_validate(yaml.safe_load(EXAMPLE))
    assert s.name == "minimal"


def test_readme_docs_links_exist():
    links = [t for t in _relative_links(ROOT / "README.md") if t.startswith("docs/")]
    assert links, "README.md links no docs/ pages"
    missing = [t for t in links if not (ROOT / t).is_file()]
    assert not missing, f"README.md links missing files: {missing}"


@pytest.mark.parametrize("page", sorted(p.name for p in DOCS.glob("*.md")))
def test_docs_relative_links_exist(page):
    path = DOCS / page
    missing = [t for t in _relative_links(path) if t and not (path.parent / t).exists()]
    assert not missing, f"docs/{page} links missing files: {missing}"


def test_model_md_defines_every_output_column():
    """docs/model.md promises a definition of every requests-table and summary column."""
    from prefixbench.scenario.loader import load_scenario
    from prefixbench.study.runs import run_scenario

    s = load_scenario("enterprise_hotset", ["run.requests=200", "run.warmup_requests=20"])
    tables = run_scenario(s, ["transfer_per_request"])
    text = (DOCS / "model.md").read_text(encoding="utf-8")
    columns = set(tables.requests.columns) | set(tables.summary.columns)
    missing = sorted(c for c in columns if f"`{c}`" not in text)
    assert not missing, f"docs/model.md does not define these output columns: {missing}"
