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
MODEL = DOCS / "model"  # docs/model.md is the index of these, one file per mechanism
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
        [sys.executable, "-m", "prefixbench.scenario.docgen"],
        capture_output=True,
        check=True,
        cwd=ROOT,
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


@pytest.mark.parametrize("page", sorted(str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md")))
def test_docs_relative_links_exist(page):
    path = DOCS / page
    missing = [t for t in _relative_links(path) if t and not (path.parent / t).exists()]
    assert not missing, f"docs/{page} links missing files: {missing}"


def _anchor(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _model_sections() -> dict[str, tuple[str, str]]:
    """Every numbered heading under docs/model/: section number -> (file name, anchor)."""
    out = {}
    for path in sorted(MODEL.glob("*.md")):
        text = re.sub(r"```.*?```", "", path.read_text(encoding="utf-8"), flags=re.S)
        for m in re.finditer(r"^#{2,4} ((\d+(?:\.\d+)*)\.? .*)$", text, flags=re.M):
            assert m.group(2) not in out, f"§{m.group(2)} is in two files"
            out[m.group(2)] = (path.name, _anchor(m.group(1)))
    return out


def _model_index() -> dict[str, tuple[str, str]]:
    """The index table of docs/model.md: section number -> (file name, anchor)."""
    rows = re.findall(
        r"^\| \[§([\d.]+)\]\(model/([\w-]+\.md)#([^)]+)\) \|",
        (DOCS / "model.md").read_text(encoding="utf-8"),
        flags=re.M,
    )
    return {num: (f, a) for num, f, a in rows}


def test_model_index_lists_every_section_where_it_is():
    """docs/model.md is an index: every § of docs/model/ has one row, pointing at its file
    and heading, and no row points at a section that is not there."""
    assert _model_index() == _model_sections()


def test_every_cited_model_section_exists():
    """Code, tests and docs cite "docs/model.md §2.11": each cited number is in the index."""
    index = _model_index()
    cite = re.compile(r"model\.md\)?,? (?:§|\u00a7)(\d+(?:\.\d+)*)")
    missing = set()
    for path in [
        *ROOT.glob("src/**/*.py"),
        *ROOT.glob("tests/*.py"),
        *DOCS.rglob("*.md"),
        ROOT / "README.md",
    ]:
        for num in cite.findall(path.read_text(encoding="utf-8")):
            if num not in index:
                missing.add(f"{path.relative_to(ROOT)}: §{num}")
    assert not missing, f"citations of sections docs/model.md does not index: {sorted(missing)}"


def test_model_md_defines_every_output_column():
    """docs/model/ promises a definition of every requests-table and summary column."""
    from prefixbench.scenario.loader import load_scenario
    from prefixbench.study.runs import run_scenario

    s = load_scenario("enterprise_hotset", ["run.requests=200", "run.warmup_requests=20"])
    tables = run_scenario(s, ["transfer_per_request"])
    text = "".join(p.read_text(encoding="utf-8") for p in sorted(MODEL.glob("*.md")))
    columns = set(tables.requests.columns) | set(tables.summary.columns)
    missing = sorted(c for c in columns if f"`{c}`" not in text)
    assert not missing, f"docs/model/ does not define these output columns: {missing}"
    from prefixbench.registry import METRICS

    unknown = sorted(m.column for m in METRICS if m.column not in tables.summary.columns)
    assert not unknown, f"the metrics registry names columns the summary lacks: {unknown}"
