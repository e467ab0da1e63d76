"""Load scenarios: built-in presets or YAML files, ``--set`` overrides, clear errors.

YAML goes through ``yaml.safe_load`` only: user files are data, never code.
"""

from __future__ import annotations

import copy
import functools
import reprlib
from importlib import resources
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from prefixbench.errors import ScenarioError
from prefixbench.physics.costmodel import Efficiency
from prefixbench.scenario.models import Scenario, override_path, split_model_section
from prefixbench.support.files import INT_DIGITS_HINT, exists, read_capped
from prefixbench.support.suggest import did_you_mean


def preset_names() -> list[str]:
    """Names of the built-in scenarios shipped in ``scenarios/``."""
    root = resources.files("prefixbench.scenarios")
    return sorted(p.name[:-5] for p in root.iterdir() if p.name.endswith(".yaml"))


def _preset_text(name: str) -> str:
    return (resources.files("prefixbench.scenarios") / f"{name}.yaml").read_text(encoding="utf-8")


def read_yaml(path: Path) -> Any:
    """Parse a YAML file safely; a syntax error names the file and line."""
    raw = read_capped(path, ScenarioError, "YAML file")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ScenarioError(
            f"not UTF-8 text (byte {e.start})", where=str(path), fix="save the file as UTF-8 YAML"
        ) from None
    return _parse(text, str(path))


@functools.lru_cache(maxsize=256)
def _yaml_cached(text: str) -> Any:
    return yaml.safe_load(text)


def safe_load(text: str) -> Any:
    """``yaml.safe_load``, remembered per text (a map or sweep loads the same preset and
    the same --set values hundreds of times); the caller gets its own copy."""
    return copy.deepcopy(_yaml_cached(text))


def _parse(text: str, where: str) -> Any:
    try:
        return safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None) or getattr(e, "context_mark", None)
        loc = f"{where}:{mark.line + 1}" if mark is not None else where
        problem = getattr(e, "problem", None) or "invalid YAML"
        raise ScenarioError(
            f"YAML syntax error: {problem}", where=loc, fix="fix the YAML"
        ) from None
    except RecursionError:
        raise ScenarioError(
            "YAML nested too deeply",
            where=where,
            fix="a scenario needs only a few levels of nesting",
        ) from None
    except ValueError as e:  # Python's int-str limit: an integer of thousands of digits
        raise ScenarioError(
            f"a number is too large to read ({_digits(e)})", where=where, fix=INT_DIGITS_HINT
        ) from None


def _digits(e: ValueError) -> str:
    text = str(e)
    return text.split(": ", 1)[1].split(";", 1)[0] if "digits" in text else "not a number"


def scenario_source(ref: str | Path | None) -> tuple[dict, str]:
    """The raw mapping of a scenario reference (preset name or file) and where it came from."""
    if ref is None:
        ref = "enterprise_hotset"
    ref_s = str(ref)
    path = Path(ref_s)
    if path.suffix in (".yaml", ".yml") or exists(path):
        data, where = read_yaml(path), str(path)
    elif ref_s in preset_names():
        data, where = (
            _parse(_preset_text(ref_s), f"scenarios/{ref_s}.yaml"),
            f"scenarios/{ref_s}.yaml",
        )
    else:
        raise ScenarioError(
            f"unknown scenario '{ref_s}'",
            fix=did_you_mean(ref_s, preset_names()) + " (or give a .yaml path)",
        )
    if not isinstance(data, dict):
        raise ScenarioError(
            f"a scenario must be a YAML mapping of fields, not {_kind(data)}",
            where=where,
            fix="write one 'field: value' per line (see docs/scenarios.md)",
        )
    return data, where


def scenario_folder(ref: str | Path | None) -> Path:
    """The folder a scenario's relative file references are read from (presets: scenarios/)."""
    if ref is not None and Path(str(ref)).is_file():
        return Path(str(ref)).resolve().parent
    if ref is None or str(ref) in preset_names():
        return Path(str(resources.files("prefixbench.scenarios")))
    return Path.cwd()


def _kind(value: Any) -> str:
    return "an empty file" if value is None else f"a {type(value).__name__}"


def parse_override(text: str) -> tuple[list[str], Any]:
    """``a.b.c=value`` → (['a','b','c'], value); the value is read as YAML (8, 0.5, true, [1,2])."""
    key, sep, raw = text.partition("=")
    key = key.strip()
    if not sep or not key or any(not part for part in key.split(".")):
        raise ScenarioError(
            f"bad override '{text}'",
            where="--set",
            fix="write it as path.to.field=value, e.g. workload.arrivals.rate=8",
        )
    try:
        value = safe_load(raw) if raw.strip() else ""
    except (yaml.YAMLError, RecursionError):
        value = raw
    except ValueError as e:  # an integer beyond Python's int-str limit
        raise ScenarioError(
            f"the value of '{key}' is too large to read ({_digits(e)})",
            where="--set",
            fix=INT_DIGITS_HINT,
        ) from None
    return key.split("."), value


def apply_overrides(data: dict, overrides: list[str]) -> dict:
    """A copy of ``data`` with each ``path=value`` set (intermediate mappings created)."""
    out = split_model_section(copy.deepcopy(data))
    for text in overrides:
        keys, value = parse_override(text)
        keys = override_path(keys)
        node = out
        for k in keys[:-1]:
            nxt = node.get(k)
            if nxt is None:
                nxt = node[k] = {}
            if not isinstance(nxt, dict):
                raise ScenarioError(
                    f"cannot set '{'.'.join(keys)}': '{k}' is a value, not a section",
                    where="--set",
                    fix=f"set '{k}' itself, or one of its fields if it is a section (see docs/scenarios.md)",
                )
            node = nxt
        node[keys[-1]] = value
    return out


_TYPE_FIXES = {  # pydantic error type prefix -> how to write the value instead
    "int": "write a whole number, e.g. 8",
    "float": "write a number, e.g. 0.5",
    "finite_number": "write a finite number (not .inf or .nan)",
    "bool": "write true or false",
    "string": "write text, e.g. name: my_run",
    "list": "write a list, e.g. [1, 2]",
    "dict": "write a mapping of fields (key: value)",
    "model": "write a mapping of fields (key: value)",
    "enum": "write one of the allowed names",
    "too_short": "add at least one entry",
}


def _members(tp) -> list:
    from typing import get_args

    args = [a for a in get_args(tp) if a is not type(None)]
    return [m for a in args for m in _members(a)] if args else [tp]


def _is_model(m) -> bool:
    from pydantic import BaseModel

    return isinstance(m, type) and issubclass(m, BaseModel)


def _models_at(loc: tuple) -> tuple[list, list]:
    """The models that can sit at ``loc`` and the fields named by its last part."""
    models: list = [Scenario]
    fields: list = []
    for part in loc:
        fields = [m.model_fields[part] for m in models if _is_model(m) and part in m.model_fields]
        # a union tag in the path (workload.synthetic...) names no field: stay where we are
        models = [t for f in fields for t in _members(f.annotation)] or models
    return models, fields


def _tags(loc: tuple) -> str:
    """The ``kind`` values allowed where a tagged union sits (workload, a length distribution)."""
    from typing import get_args

    models, _ = _models_at(loc)
    kinds = [m.model_fields["kind"] for m in models if _is_model(m) and "kind" in m.model_fields]
    return ", ".join(str(a) for f in kinds for a in get_args(f.annotation))


def _range(loc: tuple) -> str:
    """``must be >= 0.001 and <= 10000`` for a field with both bounds (its documented range)."""
    import annotated_types as at

    _, fields = _models_at(loc)
    if len(fields) != 1:
        return ""
    low = high = None
    for m in fields[0].metadata:
        if isinstance(m, at.Ge | at.Gt):
            low = (">=" if isinstance(m, at.Ge) else ">", getattr(m, "ge", getattr(m, "gt", None)))
        if isinstance(m, at.Le | at.Lt):
            high = ("<=" if isinstance(m, at.Le) else "<", getattr(m, "le", getattr(m, "lt", None)))
    if low is None or high is None:
        return ""

    def num(v) -> str:
        whole = isinstance(v, int) or (float(v).is_integer() and abs(v) < 1e16)
        return str(int(v)) if whole else f"{v:g}"

    return f"must be {low[0]} {num(low[1])} and {high[0]} {num(high[1])}"


def _misspelt(loc: tuple) -> str:
    """A did-you-mean among the fields next to an unknown one (``rte`` → ``rate``)."""
    from prefixbench.support.suggest import closest

    if not loc:
        return "remove it (the fields are listed in docs/scenarios.md)"
    models, _ = _models_at(loc[:-1])
    names = sorted({f for m in models if _is_model(m) for f in m.model_fields})
    best = closest(str(loc[-1]), names)
    if best:
        return f"did you mean '{best}'? (the fields are listed in docs/scenarios.md)"
    return "remove it (the fields are listed in docs/scenarios.md)"


def _allowed(err: dict) -> str:
    ctx = err.get("ctx") or {}
    kind = err.get("type", "")
    if kind == "extra_forbidden":
        return _misspelt(tuple(err.get("loc", ())))
    if kind == "missing":
        return "add it"
    if kind == "union_tag_invalid":
        return "change its 'kind' to one of those"
    if kind == "union_tag_not_found":
        tags = _tags(tuple(err.get("loc", ())))
        return f"give it a 'kind': one of {tags}" if tags else "give it a 'kind'"
    if "expected" in ctx:
        return f"allowed: {ctx['expected']}"
    for bound, word in (("gt", ">"), ("ge", ">="), ("lt", "<"), ("le", "<=")):
        if bound in ctx:
            return _range(tuple(err.get("loc", ()))) or f"must be {word} {ctx[bound]}"
    for prefix, fix in _TYPE_FIXES.items():
        if kind.startswith(prefix):
            return fix
    return ""


_short = reprlib.Repr()  # bounded: a YAML alias bomb must not become a gigabyte message
_short.maxlevel, _short.maxlist, _short.maxdict, _short.maxstring, _short.maxother = 2, 5, 4, 60, 60


def format_validation_error(e: ValidationError, where: str) -> ScenarioError:
    """One line: file, field path, bad value, what is allowed (+ how many more errors)."""
    errs = e.errors(include_url=False)
    first = errs[0]
    loc = ".".join(str(p) for p in first["loc"]) or "(top level)"
    msg = first["msg"]
    if msg.startswith("Value error, "):
        msg = msg[len("Value error, ") :]
    if first.get("type") == "union_tag_not_found":
        msg = "has no 'kind' (which variant it is)"
    value = first.get("input")
    shown = (
        ""
        if first.get("type") == "missing" or isinstance(value, dict)
        else f" (got {_short.repr(value)})"
    )
    fix = _allowed(first) or "see docs/scenarios.md for what the field accepts"
    more = f" (+{len(errs) - 1} more)" if len(errs) > 1 else ""
    return ScenarioError(f"field '{loc}': {msg}{shown}{more}", where=where, fix=fix)


def validate(data: dict, where: str) -> Scenario:
    try:
        return Scenario.model_validate(data)
    except ValidationError as e:
        raise format_validation_error(e, where) from None
    except UnicodeEncodeError as e:  # a YAML "\uD800" escape: text no file or name can hold
        raise ScenarioError(
            f"text holds an invalid character ({e.object[e.start : e.end]!r}, a lone surrogate)",
            where=where,
            fix="remove the \\uD800-\\uDFFF escape from the text",
        ) from None


def with_trace(data: dict, trace: str, fmt: str | None = None, skip_bad: bool = False) -> dict:
    """Replace a scenario's workload with the replay of ``trace`` (the rest is kept)."""
    out = copy.deepcopy(data)
    out["workload"] = {
        "kind": "trace",
        "path": str(trace),
        "format": fmt or "auto",
        "skip_bad": skip_bad,
    }
    out["name"] = Path(trace).stem
    return out


def load_scenario(
    ref: str | Path | None = None,
    overrides: list[str] | None = None,
    *,
    trace: str | None = None,
    trace_format: str | None = None,
    skip_bad: bool = False,
) -> Scenario:
    """A validated scenario from a preset name or YAML path, with ``--set`` overrides applied.

    ``trace`` swaps the workload for a trace replay before the overrides apply, so
    ``--set workload.rate=4`` rescales the trace.
    """
    data, where = scenario_source(ref)
    # hardware files a scenario names are relative to it; those given with --set, to the cwd
    from prefixbench.catalog.userfile import resolve_scenario_hardware

    data = resolve_scenario_hardware(data, scenario_folder(ref), where)
    if ref is not None and Path(str(ref)).is_file():
        data = resolve_file_fields(data, Path(str(ref)).resolve().parent)
    if trace is not None:
        data = with_trace(data, trace, trace_format, skip_bad)
        where = f"{where} (with --trace)"
    # `efficiency: {from: FILE}` reads a fitted block; FILE is relative to the scenario file
    base = Path(str(ref)).parent if ref is not None and Path(str(ref)).is_file() else Path.cwd()
    reference = None
    if overrides:
        kept = [o for o in overrides if keeps_reference(o)]
        where = f"{where} (with --set)"  # the reference's errors come from a --set too
        if len(kept) < len(overrides):
            reference = validate(inline_efficiency(apply_overrides(data, kept), base, where), where)
        data = apply_overrides(data, overrides)
        data = resolve_scenario_hardware(data, Path.cwd(), where, base_is_file=False)
    data = inline_efficiency(data, base, where)
    scenario = validate(data, where)
    scenario._reference = reference
    return scenario


def resolve_file_fields(data: dict, folder: Path) -> dict:
    """A scenario file's own relative paths — a model ``config.json``, a trace — read from
    the file's folder (as docker-compose and kustomize do), not the current directory."""
    out = dict(data)

    def here(value):
        if not isinstance(value, str) or not value.strip():
            return value
        p = Path(value).expanduser()
        if p.is_absolute() or not (folder / p).exists():
            return value
        return str(folder / p)

    if isinstance(out.get("model"), str) and out["model"].endswith(".json"):
        out["model"] = here(out["model"])
    if isinstance(out.get("model"), dict) and str(out["model"].get("name", "")).endswith(".json"):
        out["model"] = {**out["model"], "name": here(out["model"]["name"])}
    w = out.get("workload")
    if isinstance(w, dict) and w.get("kind") == "trace" and "path" in w:
        out["workload"] = {**w, "path": here(w["path"])}
    return out


def keeps_reference(override: str) -> bool:
    """Whether a ``--set`` applies to the reference ``memory.budget_factor`` multiplies: the
    model (with its weight format: a file's unmodelled quantization is set this way), the
    run's length and which over-length requests run do; the rate, hardware, KV format,
    memory and seed do not (docs/model.md §3.4)."""
    keys = override_path(override.partition("=")[0].strip().split("."))
    return (
        keys == ["model"]
        or keys[0] == "run"
        or keys == ["model_format", "weights"]
        or keys == ["workload", "overlength"]
    )


# ---------------------------------------------------------------- a fitted efficiency block
# (written by `prefixbench calibrate`, read by `cost --efficiency` and `efficiency: {from:}`)


def load_efficiency(path: str | Path) -> Efficiency:
    """An efficiency block from a YAML file (top level, or under an ``efficiency`` key)."""
    path = Path(path)
    data = read_yaml(path)
    if isinstance(data, dict) and isinstance(data.get("efficiency"), dict):
        data = data["efficiency"]
    if not isinstance(data, dict):
        raise ScenarioError(
            "not an efficiency block",
            where=str(path),
            fix="write a mapping of mfu_prefill, mfu_decode, mbu, *_overhead_ms "
            "(as `prefixbench calibrate --out` does)",
        )
    from prefixbench.support.strict import loose_number

    if bad := loose_number(data, Efficiency):  # `true` was read as 1.0
        raise ScenarioError(
            f"field '{bad[0]}' is {bad[1]!r}, not a number",
            where=str(path),
            fix="write a plain number (0.001 to 1 for mfu/mbu, milliseconds for overheads)",
        )
    try:  # an unknown key (mfu_prefil) is refused with a did-you-mean, not dropped
        return Efficiency.model_validate(data)
    except ValidationError as e:
        raise format_validation_error(e, str(path)) from None


def inline_efficiency(data: dict, base: Path, where: str) -> dict:
    """Replace ``efficiency: {from: FILE, ...}`` in a raw scenario by the file's block.

    ``FILE`` is relative to ``base`` (the scenario file's folder); keys given next to
    ``from`` override the file's. Other scenarios are returned unchanged.
    """
    eff = data.get("efficiency") if isinstance(data, dict) else None
    if not isinstance(eff, dict) or "from" not in eff:
        return data
    ref = eff["from"]
    if not isinstance(ref, str) or not ref.strip():
        raise ScenarioError(
            f"efficiency.from must be a file path, got {ref!r}",
            where=where,
            fix="write efficiency: {from: efficiency.yaml}",
        )
    path = Path(ref).expanduser()
    if not path.is_absolute():
        path = base / path
    block = load_efficiency(path).model_dump()
    block.update({k: v for k, v in eff.items() if k != "from"})
    return {**data, "efficiency": block}
