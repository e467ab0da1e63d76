"""Sweep grids: which (model, workload, budget, seed) points to run under which policies.

A point is one prepared workload; its policies run on the same requests. Every run has a
stable ``run_id`` derived from its parameters, so reruns find finished work.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from prefixbench.scenario.models import POLICIES, REFERENCE_POLICIES

from ..errors import ScenarioError


class SweepSpec(BaseModel):
    """A sweep grid (YAML file or flags). The default is the reference study: 2 models × 4
    workloads × 4 budget factors × 3 seeds (96 grid points) under all seven policies (672 runs)."""

    model_config = ConfigDict(extra="forbid", defer_build=True, allow_inf_nan=False)

    models: list[str] = Field(
        ["qwen2-0.5b", "qwen2-1.5b"], min_length=1, description="Catalog models."
    )
    workloads: list[str] = Field(
        ["enterprise_hotset", "long_context_support", "medium_chat", "tool_call"],
        min_length=1,
        description="Built-in scenario names or YAML paths.",
    )
    budgets: list[float] = Field(
        [0.35, 0.5, 0.75, 1.0], min_length=1, description="budget_factor values."
    )
    policies: list[str] = Field(
        list(POLICIES),
        min_length=1,
        description="Policies to compare (default: all seven; the seed's four are "
        + ", ".join(REFERENCE_POLICIES)
        + ").",
    )
    seeds: list[int] = Field([0, 1, 2], min_length=1, description="Random seeds per point.")
    admissions: list[Literal["reserve", "paged"]] = Field(
        ["paged"],
        min_length=1,
        description="Decode KV admission modes (memory.admission): paged, as vLLM and SGLang "
        "admit (the default of every command); reserve reproduces the first published grid.",
    )
    set: list[str] = Field([], description="--set overrides applied to every scenario.")
    trace: str | None = Field(None, description="Replay this trace as every point's workload.")
    trace_format: Literal["mooncake", "azure", "burstgpt", "bailian", "auto"] = Field(
        "auto", description="Trace format."
    )

    @field_validator(
        "models", "workloads", "budgets", "policies", "seeds", "admissions", mode="before"
    )
    @classmethod
    def _no_bools(cls, v):
        if isinstance(v, list) and any(isinstance(x, bool) for x in v):
            raise ValueError("has true/false where a value is expected")
        return v

    @field_validator("models", "workloads", "budgets", "policies", "seeds", "admissions")
    @classmethod
    def _no_repeats(cls, v: list) -> list:
        # a repeated seed would count one run twice (a zero-width CI); 0.5 and 0.50 are one budget
        seen: set = set()
        twice = [x for x in v if x in seen or seen.add(x)]
        if twice:
            raise ValueError(f"{twice[0]!r} is given more than once; give each value once")
        return v

    @field_validator("set", mode="before")
    @classmethod
    def _one_override(cls, v):
        # `set: a=1` in a sweep file is one override, not a list of its characters
        return [v] if isinstance(v, str) else v

    @field_validator("set")
    @classmethod
    def _no_grid_fields(cls, v: list[str]) -> list[str]:
        # a --set of a field the grid itself sets is overridden or mislabels rows: refuse it
        for item in v:
            key = item.split("=", 1)[0].strip() if isinstance(item, str) else ""
            if key in _GRID_FIELDS:
                raise ValueError(f"--set {key} is a grid field; {_GRID_FIELDS[key]}")
        return v

    @field_validator("policies")
    @classmethod
    def _known_policies(cls, v: list[str]) -> list[str]:
        from prefixbench.support.suggest import did_you_mean

        for p in v:
            if p not in POLICIES:
                raise ValueError(f"unknown policy '{p}'; {did_you_mean(p, POLICIES)}")
        return v

    @field_validator("budgets")
    @classmethod
    def _positive(cls, v: list[float]) -> list[float]:
        if any(b <= 0 for b in v):
            raise ValueError("budget factors must be > 0")
        return v

    def points(self) -> list[Point]:
        return [
            Point(m, w, float(b), s, tuple(self.set), self.trace, self.trace_format, a)
            for a in self.admissions
            for m in self.models
            for w in self.workloads
            for b in self.budgets
            for s in self.seeds
        ]

    def fingerprint(self) -> dict:
        data = self.model_dump(mode="json")
        if data["admissions"] == ["reserve"]:  # the seed's grid: as recorded before the axis
            del data["admissions"]
        return canonical(data)


_GRID_FIELDS = {
    "model": "list the models with --models (or models: in the grid file)",
    "seed": "list the seeds with --seeds (or seeds: in the grid file)",
    "memory.budget_factor": "list the budget factors with --budgets",
    "memory.kv_budget_gb": "it would replace every point's budget factor under its label; "
    "sweep --budgets, or run one absolute budget with `prefixbench run`",
    "memory.admission": "list the admission modes with --admissions",
    "policy": "list the policies with --policies",
}

_UNORDERED = ("models", "workloads", "budgets", "policies", "seeds", "admissions")


def canonical(fingerprint: dict) -> dict:
    """A grid record with its value lists sorted: the same grid in another order is the
    same grid (``set`` keeps its order: a later override wins)."""
    out = dict(fingerprint)
    for key in _UNORDERED:
        if isinstance(out.get(key), list):
            try:
                out[key] = sorted(out[key])
            except TypeError:  # a hand-edited record with mixed types: compare as is
                pass
    return out


QUICK = {
    "models": ["qwen2-0.5b"],
    "workloads": ["enterprise_hotset", "tool_call"],
    "budgets": [0.35, 1.0],
    "seeds": [0, 1],
    "set": ["run.requests=1500", "run.warmup_requests=300"],
}


@dataclass(frozen=True)
class Point:
    model: str
    workload: str
    budget_factor: float
    seed: int
    overrides: tuple[str, ...] = ()
    trace: str | None = None  # replay this trace in place of the workload's own requests
    trace_format: str = "auto"
    admission: str = "paged"  # memory.admission (a --set in overrides wins)

    def scenario_overrides(self) -> list[str]:
        return [
            f"memory.admission={self.admission}",
            *self.overrides,
            f"model={self.model}",
            f"memory.budget_factor={self.budget_factor!r}",
            f"seed={self.seed}",
        ]

    def load(self):
        """This point's validated scenario."""
        from prefixbench.scenario.loader import load_scenario

        fmt = None if self.trace_format == "auto" else self.trace_format
        return load_scenario(
            self.workload, self.scenario_overrides(), trace=self.trace, trace_format=fmt
        )

    def _key(self) -> tuple:
        base = (self.model, self.workload, self.budget_factor, self.seed, self.overrides)
        if self.admission != "reserve":  # reserve points keep the ids they had before the axis
            base = (*base, f"admission={self.admission}")
        return base if self.trace is None else (*base, self.trace, self.trace_format)

    def key_record(self) -> tuple:
        """The point's parameters as JSON values (recorded inside its part files)."""
        return tuple(json.loads(json.dumps(self._key(), default=str)))

    @property
    def point_id(self) -> str:
        return stable_id(*self._key())

    def run_id(self, policy: str) -> str:
        return stable_id(*self._key(), policy)


def stable_id(*parts) -> str:
    """A short hash of the parameters (same parameters → same id, on any machine)."""
    blob = json.dumps(parts, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def load_sweep_file(path: Path) -> dict:
    from prefixbench.scenario.loader import read_yaml

    data = read_yaml(Path(path))
    if not isinstance(data, dict):
        raise ScenarioError(
            "a sweep file must be a YAML mapping",
            where=str(path),
            fix="write one 'key: value' per line (models, workloads, budgets, policies, seeds, set)",
        )
    return data


def sweep_base(grid: Path | None, quick: bool) -> dict:
    """The grid a sweep starts from: a grid file, the --quick smoke grid, or the default;
    a file and --quick together are refused (one of them would be ignored)."""
    if grid and quick:
        raise ScenarioError(
            "--quick runs its own smoke grid and would ignore the grid file",
            where="--quick",
            fix="drop --quick, or drop the grid file",
        )
    return load_sweep_file(grid) if grid else (dict(QUICK) if quick else {})


def build_spec(base: dict | None = None, *, max_runs: int | None = None, **flags) -> SweepSpec:
    """Merge a sweep file's mapping with command-line flags (flags win) and validate."""
    data = dict(base or {})
    for k, v in flags.items():
        if v:
            data[k] = v
    _check_axis_lengths(data)
    try:
        spec = SweepSpec.model_validate(data)
    except ValidationError as e:
        from prefixbench.scenario.loader import format_validation_error

        raise format_validation_error(e, "sweep") from None
    runs = len(spec.admissions) * len(spec.models) * len(spec.workloads) * len(spec.budgets)
    check_grid_size(runs * len(spec.seeds) * len(spec.policies), max_runs, "sweep grid")
    return spec


MAX_RUNS = 20_000  # ~35 times the reference study; --max-runs raises it


def check_grid_size(runs: int, max_runs: int | None, where: str) -> None:
    """Refuse a grid of more runs than the cap (``--max-runs`` overrides it) before any
    point is built or any worker started."""
    cap = MAX_RUNS if max_runs is None else max_runs
    if isinstance(cap, bool) or cap < 1:
        raise ScenarioError(f"{cap!r} is not a run count", where="--max-runs", fix="give 1 or more")
    if runs > cap:
        raise ScenarioError(
            f"{runs:,} runs exceed the cap of {cap:,}",
            where=where,
            fix=f"use fewer values, or raise the cap with --max-runs {runs}",
        )


def _check_axis_lengths(data: dict) -> None:
    """A list axis of millions of values is refused before it is validated value by value."""
    for k in _UNORDERED:
        v = data.get(k)
        if isinstance(v, list) and len(v) > 10 * MAX_RUNS:
            raise ScenarioError(
                f"{k} has {len(v):,} values", where="sweep grid", fix="give fewer values"
            )
