"""The system line: what an answer is about, at the top of every answer (run, recommend,
compare, capacity, map and the report).

Model, accelerator × devices (TP) per pool, P:D, KV GB per decode instance, link × NICs,
arrival rate, admission and the SLOs, wrapped whole at 80 columns.
"""

from __future__ import annotations

WIDTH = 80


def wrap(parts: list[str], first: str = "system: ", width: int = WIDTH) -> list[str]:
    """``parts`` joined by " · ", wrapped between parts (never inside one) at ``width``."""
    indent = " " * len(first)
    lines, line = [], first
    for part in parts:
        sep = "" if line in (first, indent) else " · "
        if len(line) + len(sep) + len(part) > width and line not in (first, indent):
            lines.append(line)
            line, sep = indent, ""
        line += sep + part
    lines.append(line)
    return lines


def pool(role: str, accelerator: str, devices: int, tp: int) -> str:
    from prefixbench.catalog import hardware_label

    return f"{role} {devices}× {hardware_label(accelerator)} (TP{tp})"


def offered_rate(s) -> float | None:
    from prefixbench.workload.offered import nominal_rate

    return nominal_rate(s)


def rate_text(rate: float | None) -> str:
    return "trace's own rate" if rate is None else f"{rate:.3g} req/s"


def scenario_parts(s, kv_gb: float | str | None, rate: float | None | str = "scenario") -> list:
    """The system line's parts for scenario ``s`` with ``kv_gb`` GB of KV per decode
    instance (text: already formatted, e.g. a range)."""
    from prefixbench.catalog import hardware_label

    c = s.cluster
    colocated = c.mode == "colocated"
    nics = c.link.nics_per_instance or c.prefill.devices
    kv = kv_gb if isinstance(kv_gb, str) else ("KV n/a" if kv_gb is None else f"{kv_gb:.2f} GB")
    r = offered_rate(s) if rate == "scenario" else rate
    admission = "reserve" if colocated else s.memory.admission
    return [
        f"{s.model}",
        pool("prefill", c.prefill.accelerator, c.prefill.devices, c.prefill.tp_degree()),
        pool("decode", c.decode.accelerator, c.decode.devices, c.decode.tp_degree()),
        f"{c.prefill_instances}P:{c.decode_instances}D" + (" colocated" if colocated else ""),
        f"KV {kv} per decode instance" if not kv.startswith("KV") else kv,
        f"link {hardware_label(c.link.name)} × {nics} NIC{'s' if nics != 1 else ''}",
        r if isinstance(r, str) else rate_text(r),
        f"admission {admission}",
        f"SLO TTFT ≤ {s.slo.ttft_ms:g} ms, TPOT ≤ {s.slo.tpot_ms:g} ms",
    ]


def system_lines(s, kv_gb, rate: float | None | str = "scenario") -> list[str]:
    return wrap(scenario_parts(s, kv_gb, rate))


def prepared_lines(prep) -> list[str]:
    """The system line of a prepared run: its KV budget in GB per decode instance."""
    return system_lines(prep.scenario, prep.base.budget_tokens * prep.kv_bpt / 1e9)
