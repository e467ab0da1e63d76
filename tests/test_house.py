"""The house rules a newcomer can rely on (docs/design.md): every function in `src/` reads
on one screen."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "prefixbench"
MAX_LINES = 80


def long_functions(root: Path = SRC, limit: int = MAX_LINES) -> list[str]:
    """``path:qualified.name (lines)`` of every function or method longer than ``limit``
    lines, decorators excluded, nested functions counted on their own and in their parent."""
    found = []
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        stack = [(node, "") for node in tree.body]
        while stack:
            node, prefix = stack.pop()
            if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                name = f"{prefix}{node.name}"
                stack += [(child, f"{name}.") for child in node.body]
                if not isinstance(node, ast.ClassDef):
                    lines = node.end_lineno - node.lineno + 1
                    if lines > limit:
                        found.append(f"{path.relative_to(root)}:{name} ({lines})")
    return sorted(found)


def test_the_walker_finds_a_long_function(tmp_path):
    """The check itself: an 81-line function is reported, an 80-line one is not."""
    body = "\n".join(f"    x{k} = {k}" for k in range(79))
    (tmp_path / "m.py").write_text(f"def long():\n{body}\n    return 0\n\ndef ok():\n{body}\n")
    assert long_functions(tmp_path) == ["m.py:long (81)"]


def test_no_function_over_80_lines():
    offenders = long_functions()
    assert not offenders, "split these into named steps:\n" + "\n".join(offenders)


def test_every_package_is_installed():
    """A wheel carries only the packages pyproject.toml lists: a package missing there works
    in an editable install and is absent from `pip install .` (it happened once)."""
    import tomllib

    root = Path(__file__).resolve().parents[1]
    listed = set(tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    src = root / "src"
    found = {
        ".".join(p.parent.relative_to(src).parts) for p in (src / "prefixbench").rglob("__init__.py")
    }
    assert found <= listed, f"add to [tool.setuptools] packages: {sorted(found - listed)}"
