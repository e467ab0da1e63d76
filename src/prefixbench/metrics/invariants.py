"""Output invariants, checked in one place before any summary row is written.

Every figure a run reports obeys its definition: utilisation, MFU, MBU, hit rates and other
shares lie in [0, 1]; times are finite and >= 0; goodput never exceeds throughput. A row
that breaks one is an engine or metrics bug, never a result: ``check_row`` raises
:class:`InvariantError` in strict mode (tests, ``--debug``, ``PREFIXBENCH_STRICT=1``) and
otherwise reports each violation on stderr as a warning, so a wrong number is never written
silently (docs/reliability.md, "Output invariants").
"""

from __future__ import annotations

import functools
import math
import os
import warnings

from ..errors import SimulationError

TOL = 1e-9  # float summation slack on a [0, 1] bound

# shares: names that end so, or contain these parts
_UNIT_ENDINGS = (
    "_util", "_util_min", "_util_max", "_util_egress", "_util_ingress", "hit_rate",
    "miss_rate", "reusable_rate", "reject_rate", "slo_attainment", "_fraction",
    "capped_share",
)  # fmt: skip
_UNIT_PARTS = ("_mfu", "_mbu")
_SIGNED = ("growth",)  # a trend (last third minus first) may be negative

_state = {"strict": False}


def strict() -> bool:
    """Raise rather than report: ``set_strict`` (tests) or ``PREFIXBENCH_STRICT=1``
    (``--debug`` sets it, so sweep workers inherit it)."""
    return _state["strict"] or os.environ.get("PREFIXBENCH_STRICT") == "1"


class InvariantError(SimulationError):
    """A summary figure breaks its definition (an engine or metrics bug)."""


def set_strict(on: bool) -> None:
    """Raise on a violation (``--debug``) instead of reporting it."""
    _state["strict"] = bool(on)


@functools.lru_cache(maxsize=1024)  # a row's figure names, the same in every row
def _is_unit(k: str) -> bool:
    return k.endswith(_UNIT_ENDINGS) or any(p in k for p in _UNIT_PARTS)


@functools.lru_cache(maxsize=1024)
def _is_time(k: str) -> bool:
    return (k.endswith("_ms") or k.endswith("_s")) and not any(p in k for p in _SIGNED)


def violations(row: dict) -> list[str]:
    """Each figure of ``row`` outside its definition, as ``name = value (rule)``."""
    bad = []
    for k, v in row.items():
        if isinstance(v, bool) or not isinstance(v, (int, float)) or v is None:
            continue
        if math.isnan(v):
            continue  # a figure with nothing to measure is NaN/None, by design
        if _is_unit(k) and not (-TOL <= v <= 1 + TOL):
            bad.append(f"{k} = {v:.6g} (a share: 0 to 1)")
        elif _is_time(k) and not (math.isfinite(v) and v >= 0):
            bad.append(f"{k} = {v:.6g} (a time: finite and >= 0)")
        elif not math.isfinite(v) and "growth" not in k:
            bad.append(f"{k} = {v} (finite)")
    good, thr = row.get("goodput_rps"), row.get("throughput_rps")
    if isinstance(good, float) and isinstance(thr, float) and good > thr * (1 + TOL) + TOL:
        bad.append(f"goodput_rps = {good:.6g} > throughput_rps = {thr:.6g}")
    return bad


def check_row(row: dict, where: str) -> dict:
    """``row`` unchanged if it obeys every invariant; else raise (strict) or warn."""
    bad = violations(row)
    if not bad:
        return row
    line = f"{len(bad)} figure(s) out of range: " + "; ".join(bad[:4])
    if strict():
        raise InvariantError(line, where=where, fix="this is a bug: report it with the scenario")
    warnings.warn(f"{where}: {line} (a simulator bug; please report it)", RuntimeWarning, 2)
    return row
