"""docs/reliability.md maps each guarantee to its tests: every test it names exists (a
renamed or deleted test makes the map lie)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
REF = re.compile(r"`(tests/[\w/]+\.py)?(?:::(\w+))?[^`]*`")


def _references() -> list[tuple[str, str | None, int]]:
    """(file, test or None, line number) per `tests/...py[::name]` or `::name` reference; a
    bare `::name` belongs to the file named last before it in the same table."""
    out = []
    current = None
    for no, line in enumerate((ROOT / "docs" / "reliability.md").read_text().splitlines(), 1):
        if not line.startswith("|"):
            current = None
        for m in REF.finditer(line):
            path, name = m.group(1), m.group(2)
            if path:
                current = path
            if current and (path or name):
                out.append((current, name, no))
    return out


def test_every_test_the_reliability_map_names_exists():
    refs = _references()
    assert len(refs) > 80, len(refs)
    missing = []
    for path, name, no in refs:
        f = ROOT / path
        if not f.exists():
            missing.append(f"line {no}: {path}")
        elif name and not re.search(rf"^(async )?def {name}\b", f.read_text(), re.M):
            missing.append(f"line {no}: {path}::{name}")
    assert not missing, missing
