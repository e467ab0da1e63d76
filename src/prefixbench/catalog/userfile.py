"""Hardware from a user's YAML file: an accelerator or a KV link, validated like a preset.

A file holds one piece of hardware, tagged by ``hardware`` (``kind`` is taken: a link's
family)::

    hardware: accelerator
    name: optical-mac
    peak_tflops: 9895      # TFLOP/s, dense BF16
    hbm_gbps: 3350         # GB/s
    memory_gb: 80          # GB
    source: user           # or the datasheet URL

Wherever a catalog name is accepted, a path to such a file is too (a value ending in
``.yaml``/``.yml`` or containing a ``/``). In a scenario the path is relative to the
scenario file; on the command line, to the working directory. The fields and bounds are
those of :class:`AcceleratorSpec` and :class:`LinkSpec`; ``source`` is required, and a file
may not reuse a catalog name (a table would show the preset's name with other numbers).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from prefixbench.support.suggest import closest

from ..errors import CatalogError
from .specs import AcceleratorSpec, LinkSpec

KINDS: dict[str, type[AcceleratorSpec] | type[LinkSpec]] = {
    "accelerator": AcceleratorSpec,
    "link": LinkSpec,
}
UNITS = {
    "peak_tflops": "TFLOP/s",
    "hbm_gbps": "GB/s",
    "memory_gb": "GB",
    "bandwidth_gbps": "GB/s",
    "latency_us": "µs",
    "setup_us": "µs",
    "ceiling_gbps": "GB/s",
    "tdp_w": "W",  # --- power
    "idle_w": "W",
    "memory_pj_per_bit": "pJ/bit",
    "gemm_half_tokens": "tokens",  # --- GEMM efficiency
    "gemm_kernel_us": "µs",
}
MAX_BYTES = 64 * 1024  # a hardware file is a dozen lines
# Where a scenario names hardware: (path in the scenario, kind of hardware).
SCENARIO_FIELDS = (
    (("cluster", "prefill", "accelerator"), "accelerator"),
    (("cluster", "decode", "accelerator"), "accelerator"),
    (("cluster", "link", "name"), "link"),
)


def is_path(ref: str) -> bool:
    """True when ``ref`` names a file rather than a catalog entry."""
    return ref.endswith((".yaml", ".yml")) or "/" in ref or os.sep in ref


def _is_file(path: Path) -> bool:
    try:
        return path.is_file()
    except (OSError, ValueError):  # a name too long, a NUL byte: no such file either way
        return False


def _is_dir(path: Path) -> bool:
    try:
        return path.is_dir()
    except (OSError, ValueError):
        return False


def _read(path: Path) -> Any:
    where = str(path)
    if not _is_file(path):
        fix = "give a regular YAML file" if _is_dir(path) else "check the path"
        raise CatalogError("hardware file not found", where=where, fix=fix)
    if path.stat().st_size > MAX_BYTES:
        raise CatalogError(
            f"hardware file larger than {MAX_BYTES // 1024} KiB",
            where=where,
            fix="a hardware file holds one accelerator or link (a dozen lines)",
        )
    try:
        return yaml.safe_load(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as e:
        raise CatalogError(
            f"not UTF-8 text (byte {e.start})", where=where, fix="save as UTF-8"
        ) from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        loc = f"{where}:{mark.line + 1}" if mark is not None else where
        problem = getattr(e, "problem", None) or "invalid YAML"
        raise CatalogError(f"YAML syntax error: {problem}", where=loc, fix="fix the YAML") from None
    except RecursionError:
        raise CatalogError("YAML nested too deeply", where=where, fix="write flat fields") from None
    except ValueError:  # an integer of thousands of digits (past Python's conversion limit)
        raise CatalogError(
            "a number with too many digits", where=where, fix="write figures in their units"
        ) from None
    except OSError as e:
        raise CatalogError(
            f"cannot read file ({e.strerror or e.__class__.__name__})",
            where=where,
            fix="check that the path is a readable file",
        ) from None


def _unit(field: str) -> str:
    return f" {UNITS[field]}" if field in UNITS else ""


def _error(e: ValidationError, cls, where: str) -> CatalogError:
    """One line: the file, the field, what is wrong and what is allowed (with units)."""
    errs = e.errors(include_url=False)
    # an unknown field is usually a misspelt one that is then also "missing": name the typo
    err = next((x for x in errs if x.get("type") == "extra_forbidden"), errs[0])
    field = ".".join(str(p) for p in err["loc"]) or "(top level)"
    kind, ctx = err.get("type", ""), err.get("ctx") or {}
    more = f" (+{len(e.errors()) - 1} more)" if len(e.errors()) > 1 else ""
    if kind == "extra_forbidden":
        best = closest(field, cls.model_fields)
        fix = f"did you mean '{best}'?" if best else "fields: " + ", ".join(cls.model_fields)
        return CatalogError(f"unknown field '{field}'{more}", where=where, fix=fix)
    if kind == "missing":
        return CatalogError(f"field '{field}' is missing{more}", where=where, fix=_missing(field))
    fix = f"write a number{_in(field)}" if kind.startswith(("float", "finite")) else ""
    fix = fix or ("write it as text" if kind.startswith("string") else "write a plain value")
    if any(b in ctx for b in ("gt", "ge", "lt", "le")):
        fix = f"must be {_range(cls, field)}{_unit(field)}"
    value = err.get("input")
    got = f" (got {value!r:.60})" if not isinstance(value, dict) else ""
    return CatalogError(f"field '{field}': {err['msg']}{got}{more}", where=where, fix=fix or None)


def _range(cls, field: str) -> str:
    """The bounds pydantic holds for ``field``, e.g. '> 0 and <= 1e+06'."""
    info = cls.model_fields.get(field)
    words = {"gt": ">", "ge": ">=", "lt": "<", "le": "<="}
    parts = [
        f"{w} {_num(getattr(m, b))}"
        for m in (info.metadata if info else ())
        for b, w in words.items()
        if getattr(m, b, None) is not None
    ]
    return " and ".join(parts)


def _in(field: str) -> str:
    return f" in {UNITS[field]}" if field in UNITS else ""


def _num(v: float) -> str:
    return f"{int(v):,}" if float(v).is_integer() else f"{v:g}"


def _missing(field: str) -> str:
    if field == "source":
        return "add where the numbers come from (a datasheet URL), or 'source: user'"
    return f"add it ({field}{_unit(field)})" if field in UNITS else "add it"


def load_hardware(ref: str | Path, expect: str | None = None) -> AcceleratorSpec | LinkSpec:
    """The accelerator or link a hardware file describes; ``expect`` is the kind required."""
    path = Path(ref).expanduser()
    where = str(path)
    data = _read(path)
    if not isinstance(data, dict):
        raise CatalogError(
            "a hardware file must be a mapping of fields",
            where=where,
            fix="write 'hardware: accelerator' (or link) and one 'field: value' per line",
        )
    kind = data.get("hardware")
    if not isinstance(kind, str) or kind not in KINDS:
        best = closest(str(kind), KINDS) if kind is not None else None
        hint = f"did you mean '{best}'? " if best else ""
        raise CatalogError(
            f"field 'hardware' is {'missing' if kind is None else repr(kind)}",
            where=where,
            fix=f"{hint}write hardware: accelerator or hardware: link",
        )
    if expect is not None and kind != expect:
        raise CatalogError(
            f"describes {_a(kind)}, but {_a(expect)} is needed here",
            where=where,
            fix=f"give a file with hardware: {expect}",
        )
    cls = KINDS[kind]
    fields = {k: v for k, v in data.items() if k != "hardware"}
    fields.setdefault("name", path.stem)
    _plain_numbers(fields, cls, where)
    try:
        spec = cls.model_validate(fields)
    except ValidationError as e:
        raise _error(e, cls, where) from None
    return _checked(spec, kind, where)


# Physical floors of a user's hardware (the specs' bounds are only > 0): 1 GFLOP/s, 1 MB/s
# of memory bandwidth, 1 MB of memory, 1 KB/s of link (per NIC, and the NICs' ceiling
# together). Below them a step takes longer than any run, and 1e-300 made every time overflow.
FLOORS = {"peak_tflops": 1e-3, "hbm_gbps": 1e-3, "memory_gb": 1e-3, "bandwidth_gbps": 1e-6,
          "ceiling_gbps": 1e-6}  # fmt: skip


def _plain_numbers(fields: dict, cls, where: str) -> None:
    """Refuse a boolean or text where a number belongs (``hbm_gbps: true`` read as 1.0) and a
    figure below its physical floor, naming the field, its unit and range."""
    from prefixbench.support.strict import loose_number

    if bad := loose_number(fields, cls):
        raise CatalogError(
            f"field '{bad[0]}' is {bad[1]!r}, not a number",
            where=where,
            fix=f"write a number{_in(bad[0])}",
        )
    for k, floor in FLOORS.items():
        if k not in cls.model_fields:
            continue  # an unknown field: refused by the model with a did-you-mean
        v = fields.get(k)
        v = float(v) if isinstance(v, str) else v  # 1e-300 in YAML 1.1 is text (checked above)
        if isinstance(v, (int, float)) and 0 < v < floor:
            raise CatalogError(
                f"field '{k}' is {v:g}{_unit(k)}, below {floor:g}{_unit(k)}",
                where=where,
                fix=f"must be {floor:g} to {_num(cls.model_fields[k].metadata[-1].le)}{_unit(k)}",
            )


def _a(noun: str) -> str:
    return f"{'an' if noun[0] in 'aeiou' else 'a'} {noun}"


def _checked(spec, kind: str, where: str):
    from . import ACCELERATORS, LINKS

    if not spec.source.strip():
        raise CatalogError(
            "field 'source' is missing or empty", where=where, fix=_missing("source")
        )
    if spec.name.strip().lower() in (ACCELERATORS if kind == "accelerator" else LINKS):
        raise CatalogError(
            f"name '{spec.name}' is a catalog {kind}",
            where=where,
            fix=f"give your {kind} its own name, e.g. '{spec.name}-custom'",
        )
    return spec


def resolve_scenario_hardware(
    data: dict, base: Path, where: str, base_is_file: bool = True
) -> dict:
    """``data`` with every hardware file it names made absolute against ``base`` and checked.

    Called on a raw scenario mapping before validation, so a bad file fails with one line
    naming the file and its field (and the scenario field that points at it). ``base`` is
    the scenario's folder, or the working directory for ``--set`` (``base_is_file=False``).
    """
    out = data
    for keys, kind in SCENARIO_FIELDS:
        node: Any = out
        for k in keys[:-1]:
            node = node.get(k) if isinstance(node, dict) else None
        ref = node.get(keys[-1]) if isinstance(node, dict) else None
        if not isinstance(ref, str) or not is_path(ref):
            continue
        path = Path(ref).expanduser()
        path = path if path.is_absolute() else base / path
        field = ".".join(keys)
        if not _is_file(path):
            rel = "the scenario file" if base_is_file else "the working directory"
            raise CatalogError(
                f"field '{field}': hardware file {str(path)!r} not found",
                where=where,
                fix=f"check the path (relative to {rel})",
            )
        try:
            load_hardware(path, kind)
        except CatalogError as e:  # the mistake is in the hardware file; say who named it
            raise CatalogError(
                e.what, where=f"{e.where} (named by {field} in {where})", fix=e.fix
            ) from None
        out = _set(out, keys, str(path.resolve()))
    return out


def _set(data: dict, keys: tuple[str, ...], value: str) -> dict:
    """A copy of ``data`` with ``keys`` set to ``value`` (the mappings on the way copied)."""
    if len(keys) == 1:
        return {**data, keys[0]: value}
    return {**data, keys[0]: _set(data[keys[0]], keys[1:], value)}
