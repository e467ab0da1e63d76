"""What an import did with each flag: one row per flag, and the warnings to print."""

from __future__ import annotations

from dataclasses import dataclass, field

# status of a flag: where it went, or why nowhere
MAPPED = "mapped"  # set a scenario field
NO_EFFECT = "no effect"  # does not change performance (ports, names, logging)
NOT_MODELLED = "not modelled"  # would change performance; warned
UNKNOWN = "unknown"  # prefixbench does not know it; warned
OUTPUT = "output"  # changes what is reported, not what is simulated
APPROX = "approximate"  # set a field, with an approximation the note names; warned
WARNED = (NOT_MODELLED, UNKNOWN, APPROX)


@dataclass
class Row:
    command: str  # prefill, decode, serve or bench
    flag: str  # as typed, with its value
    field: str  # the scenario field(s) it set, or "–"
    status: str = MAPPED
    note: str = ""


@dataclass
class ImportResult:
    scenario: dict
    rows: list[Row] = field(default_factory=list)

    @property
    def warnings(self) -> list[str]:
        return [
            f"{r.command}: {r.flag}: {r.status}: {r.note}" for r in self.rows if r.status in WARNED
        ]

    def as_json(self) -> dict:
        return {
            "scenario": self.scenario,
            "flags": [r.__dict__ for r in self.rows],
            "warnings": self.warnings,
        }
