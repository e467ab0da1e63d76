"""The scenario reference (docs/scenarios.md), generated from the Pydantic models themselves.

``python -m prefixbench.scenario.docgen > docs/scenarios.md`` regenerates it; tests/test_docs.py fails
when the committed file differs, so the reference cannot drift from the code. Every model
reachable from ``Scenario`` gets one section (in first-seen, depth-first field order) with a
table of field, type, default and description; a discriminated union links to one section
per ``kind``.
"""

from __future__ import annotations

import sys
import types
import typing
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

import annotated_types as at
from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from prefixbench.scenario.models import Scenario

REGENERATE = "python -m prefixbench.scenario.docgen > docs/scenarios.md"

HEADER = f"""\
# Scenario reference

<!-- Generated from src/prefixbench/scenario/models.py by `{REGENERATE}`.
     Do not edit by hand: tests/test_docs.py fails when this file is out of date. -->

A scenario is everything one simulation run needs: the model, the cluster (instances,
link, batching), the workload, the decode memory budget, the SLOs, the roofline calibration
and the run length. Scenarios are YAML files; the built-in presets live in `scenarios/`
(`prefixbench run tool_call`). Any field can be overridden from the command line with its
dotted path, the value read as YAML:

```bash
prefixbench run my_scenario.yaml --set memory.budget_factor=0.35 --set cluster.link.channels=2
prefixbench run --set 'workload.output_length={{kind: fixed, value: 64}}'
```

Rules that hold everywhere:

- Unknown fields are errors (a typo fails at load time, naming the field path).
- Names of models, accelerators and links are checked against the catalog
  ([`docs/catalog.md`](catalog.md)); a near miss suggests the closest name.
- Where a field is a *union* (the workload, the length distributions), the variant is chosen
  by its `kind` field, which must then be written out even though each variant knows its own.
- Units are in the field names or descriptions: tokens, seconds (`_s`), milliseconds (`_ms`),
  microseconds (`_us`), GB/s (`_gbps`), GB = 10⁹ bytes.

What the fields *mean* for the simulated system (the budget's reference demand, the
hand-off policies, the metrics) is in [`docs/model.md`](model.md).

A minimal scenario (every field not written takes its default):

```yaml
{{example}}```
"""

# Validated by tests/test_docs.py, so the example cannot go stale either.
EXAMPLE = """\
name: minimal
workload:
  kind: synthetic
  arrivals: {rate: 4.0}
  prefixes:
    count: 8
    zipf_s: 1.0
    length: {kind: fixed, value: 1024}
  share_fraction: 0.8
  suffix_length: {kind: lognormal, mean: 200, cv: 0.5}
  output_length: {kind: uniform, low: 32, high: 256}
"""


@dataclass
class _Section:
    model: type[BaseModel]
    # Every place the model appears, in discovery order: (path, None) as a plain sub-model,
    # (path, (key, tag)) as the variant of a union discriminated by ``key``.
    places: list[tuple[str, tuple[str, str] | None]] = field(default_factory=list)

    @property
    def paths(self) -> list[str]:
        return [p for p, u in self.places if u is None]

    @property
    def union_paths(self) -> list[tuple[str, str, str]]:
        return [(p, u[0], u[1]) for p, u in self.places if u is not None]


# ------------------------------------------------------------------ walking the models


def _unwrap(tp: Any) -> Any:
    """Strip ``Annotated[...]`` layers."""
    while typing.get_origin(tp) is typing.Annotated:
        tp = typing.get_args(tp)[0]
    return tp


def _members(tp: Any) -> tuple[Any, ...]:
    """The members of a union type (``X | Y`` or ``Union[X, Y]``), else ``(tp,)``."""
    tp = _unwrap(tp)
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        return tuple(_unwrap(a) for a in typing.get_args(tp))
    return (tp,)


def _is_model(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, BaseModel)


def _discriminator(info: FieldInfo) -> str | None:
    d = info.discriminator
    if isinstance(d, str):
        return d
    for m in info.metadata:  # Annotated[..., Field(discriminator=...)] nested in the type
        if isinstance(getattr(m, "discriminator", None), str):
            return m.discriminator
    return None


def _tag(model: type[BaseModel], key: str) -> str:
    (value,) = typing.get_args(_unwrap(model.model_fields[key].annotation))
    return str(value)


def collect(root: type[BaseModel] = Scenario) -> list[_Section]:
    """Every model reachable from ``root``, depth first in field order, with its paths."""
    sections: dict[type, _Section] = {}
    stack: list[type] = []  # guards against a model that (indirectly) contains itself

    def visit(model: type[BaseModel], path: str, union: tuple[str, str] | None) -> None:
        sections.setdefault(model, _Section(model)).places.append((path, union))
        if model in stack:
            return
        stack.append(model)
        for name, info in model.model_fields.items():
            sub = f"{path}.{name}" if path else name
            key = _discriminator(info)
            for member in _members(info.annotation):
                if _is_model(member):
                    visit(member, sub, (key, _tag(member, key)) if key else None)
                elif typing.get_origin(member) is list:
                    for arg in typing.get_args(member):
                        if _is_model(_unwrap(arg)):
                            visit(_unwrap(arg), f"{sub}[]", None)
        stack.pop()

    visit(root, "", None)
    return list(sections.values())


# ------------------------------------------------------------------ rendering


def _anchor(model: type[BaseModel]) -> str:
    return model.__name__.lower()


def _link(model: type[BaseModel]) -> str:
    return f"[{model.__name__}](#{_anchor(model)})"


def _code(value: Any) -> str:
    return f"`{value}`"


def _literal_values(values: list[Any]) -> str:
    shown = [_code(v) for v in values]
    return shown[0] if len(shown) == 1 else "one of " + ", ".join(shown)


def _scalar_name(tp: Any) -> str:
    names = {int: "int", float: "float", str: "string", bool: "bool"}
    if tp in names:
        return names[tp]
    if isinstance(tp, type) and issubclass(tp, Enum):
        return _literal_values([m.value for m in tp])
    origin = typing.get_origin(tp)
    if origin is typing.Literal:
        return _literal_values(list(typing.get_args(tp)))
    if origin is list:
        (arg,) = typing.get_args(tp)
        return f"list of {_type_name(arg)}"
    if _is_model(tp):
        return _link(tp)
    return _code(getattr(tp, "__name__", str(tp)))


def _type_name(tp: Any) -> str:
    members = [m for m in _members(tp) if m is not type(None)]
    return " or ".join(_scalar_name(m) for m in members)


_BOUNDS = ((at.Gt, "gt", ">"), (at.Ge, "ge", "≥"), (at.Lt, "lt", "<"), (at.Le, "le", "≤"))


def _constraints(info: FieldInfo) -> list[str]:
    out = []
    for m in info.metadata:
        for kind, attr, sign in _BOUNDS:
            if isinstance(m, kind):
                out.append(f"{sign} {_number(getattr(m, attr))}")
        if isinstance(m, at.MinLen):
            out.append(f"at least {m.min_length} item{'s' if m.min_length != 1 else ''}")
        if isinstance(m, at.MaxLen):
            out.append(f"at most {m.max_length} items")
    return out


def _type_cell(info: FieldInfo) -> str:
    members = _members(info.annotation)
    key = _discriminator(info)
    models = [m for m in members if _is_model(m)]
    if key and models:
        variants = ", ".join(f"[`{_tag(m, key)}`](#{_anchor(m)})" for m in models)
        text = f"one of, by `{key}`: {variants}"
    else:
        text = _type_name(info.annotation)
        bounds = _constraints(info)
        if bounds:
            text += f" ({', '.join(bounds)})"
    if type(None) in members:
        text += ", or `null`"
    return text


def _number(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float) and v.is_integer() and abs(v) < 1e15:
        return f"{v:.1f}"
    return repr(v) if isinstance(v, float) else str(v)


def _value(v: Any) -> str:
    if v is None:
        return "`null`"
    if isinstance(v, Enum):
        return _code(v.value)
    if isinstance(v, str):
        return _code(v) if v else '`""`'
    if isinstance(v, (bool, int, float)):
        return _code(_number(v))
    if isinstance(v, BaseModel):
        return f"see {_link(type(v))}"
    return _code(v)


def _default_cell(info: FieldInfo, name: str, sec: _Section) -> str:
    tagged = [p for p, key, _ in sec.union_paths if key == name]
    if tagged:  # the union's tag must be written wherever the model is a union member
        where = ", ".join(_code(p) for p in tagged)
        if sec.paths and info.default is not PydanticUndefined:
            plain = ", ".join(_code(p) for p in sec.paths)
            return f"{_value(info.default)} at {plain}; *required* at {where}"
        return "*required*"
    if info.default_factory is not None:
        value = info.default_factory()
        return f"see {_link(value)}" if _is_model(value) else _value(value)
    if info.default is PydanticUndefined:
        return "*required*"
    return _value(info.default)


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _docstring(model: type[BaseModel]) -> str | None:
    doc = model.__dict__.get("__doc__")
    if not doc:
        return None
    return " ".join(doc.strip().split("\n\n")[0].split())


def _places(sec: _Section) -> str:
    """Where a model appears, grouped: ``at `a`, `b`; with `kind: x` at `c` ``."""
    groups: dict[tuple[str, str] | None, list[str]] = {}
    for path, union in sec.places:
        groups.setdefault(union, []).append(_code(path) if path else "the top level")
    parts = []
    for union, paths in groups.items():
        head = "at" if union is None else f"with `{union[0]}: {union[1]}` at"
        parts.append(f"{head} {', '.join(paths)}")
    return "; ".join(parts)


def _where(sec: _Section) -> str:
    text = _places(sec)
    return text[0].upper() + text[1:] + "."


def _section(sec: _Section) -> list[str]:
    m = sec.model
    lines = [f'<a id="{_anchor(m)}"></a>', "", f"## {m.__name__}", "", _where(sec), ""]
    doc = _docstring(m)
    if doc:
        lines += [doc, ""]
    lines += ["| field | type | default | description |", "|---|---|---|---|"]
    for name, info in m.model_fields.items():
        row = (
            _code(name),
            _type_cell(info),
            _default_cell(info, name, sec),
            info.description or "",
        )
        lines.append("| " + " | ".join(_cell(c) for c in row) + " |")
    lines.append("")
    return lines


def _contents(sections: list[_Section]) -> list[str]:
    lines = ["## Contents", "", "| section | where in a scenario |", "|---|---|"]
    for sec in sections:
        lines.append(f"| {_link(sec.model)} | {_cell(_places(sec))} |")
    lines.append("")
    return lines


def scenario_reference() -> str:
    """Markdown documentation of every scenario field, rendered from the models (deterministic)."""
    sections = collect(Scenario)
    lines = [HEADER.replace("{example}", EXAMPLE)]
    lines += _contents(sections)
    for sec in sections:
        lines += _section(sec)
    return "\n".join(lines).rstrip("\n") + "\n"


def main() -> None:
    """Print the reference to stdout as UTF-8, whatever the terminal's encoding."""
    sys.stdout.buffer.write(scenario_reference().encode("utf-8"))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
