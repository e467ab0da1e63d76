"""The package's layers (docs/design.md, "Layers"): data flows one way, from the scenario to
the rendering, so no module imports from a layer above its own and there is no import
cycle, counting imports inside functions too."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "prefixbench"

# Lowest first. A module may import its own layer and those below it.
LAYERS = [
    ["errors", "support", "registry"],
    ["catalog"],
    ["physics"],
    ["scenario"],
    ["workload"],
    ["engine"],
    ["system"],
    ["metrics"],
    ["io"],
    ["study"],
    ["render"],
    ["cli", "__main__", "__init__"],
]
RANK = {name: i for i, names in enumerate(LAYERS) for name in names}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(path: Path) -> set[str]:
    """Every prefixbench module ``path`` imports, at module level or inside a function."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("prefixbench")}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            if not mod.startswith("prefixbench"):
                continue
            if mod != "prefixbench":
                found.add(mod)
            found |= {f"{mod}.{a.name}" for a in node.names}
    modules = {module_name(p) for p in SRC.rglob("*.py")}
    return {m for m in found if m in modules and m != name}


def layer(module: str) -> int:
    parts = module.split(".")
    return RANK[parts[1] if len(parts) > 1 else "__init__"]


def graph() -> dict[str, set[str]]:
    return {module_name(p): imports_of(p) for p in SRC.rglob("*.py")}


def test_every_package_has_a_layer():
    tops = {p.name.removesuffix(".py") for p in SRC.iterdir() if p.name != "__pycache__"}
    assert tops <= set(RANK), f"packages without a layer: {sorted(tops - set(RANK))}"


def test_no_upward_import():
    upward = [
        f"{m} -> {dep}"
        for m, deps in graph().items()
        for dep in deps
        if layer(dep) > layer(m)
    ]
    assert not upward, "imports from a higher layer:\n" + "\n".join(sorted(upward))


def test_no_import_cycle():
    g = graph()
    # a package's __init__ importing its own submodules is not a cycle edge back
    edges = {m: {d for d in deps if not m.startswith(d + ".")} for m, deps in g.items()}
    state: dict[str, int] = {}
    cycles: list[str] = []

    def visit(node: str, stack: list[str]) -> None:
        state[node] = 1
        for dep in sorted(edges.get(node, ())):
            if state.get(dep) == 1:
                cycles.append(" -> ".join(stack[stack.index(dep):] + [dep]))
            elif dep not in state:
                visit(dep, stack + [dep])
        state[node] = 2

    for node in sorted(edges):
        if node not in state:
            visit(node, [node])
    assert not cycles, "import cycles:\n" + "\n".join(cycles)


def test_the_walker_sees_upward_imports():
    """The check itself: a made-up engine module importing the study is flagged."""
    assert layer("prefixbench.study.sweep") > layer("prefixbench.engine.api")
    assert layer("prefixbench.errors") < layer("prefixbench.catalog")


TRACKER = __import__("re").compile(r"\bissues?\s+#?\d+", __import__("re").IGNORECASE)


def test_no_file_cites_the_internal_tracker():
    """Comments and docs cite docs/ sections or upstream sources (repository and number,
    e.g. "sgl-project/sglang #19746"), never this project's tracker by number."""
    root = SRC.parents[1]
    hits = []
    for path in root.rglob("*"):
        if not path.is_file() or {".git", "__pycache__", ".venv"} & set(path.parts):
            continue
        if path.suffix not in {".py", ".md", ".toml", ".yaml", ".yml", ".txt", ".json", ""}:
            continue
        try:
            text = path.read_text()
        except (UnicodeDecodeError, OSError):
            continue
        for m in TRACKER.finditer(text):  # \s+ also spans a line break
            n = text.count("\n", 0, m.start()) + 1
            hits.append(f"{path.relative_to(root)}:{n}: {m.group(0)!r}")
    assert not hits, "tracker references:\n" + "\n".join(hits[:40])


def test_the_tracker_pattern_matches_what_it_must():
    word = "issue"
    assert TRACKER.search(f"# --- power ({word} 18)")
    assert TRACKER.search(f"{word.title()}s 13 and 14")
    assert TRACKER.search(f"(see {word}\n  18)")
    assert not TRACKER.search("sgl-project/sglang #19746")
