"""Which policy wins where: the sweep's grid repeated over link bandwidths, and the winner
per model × accelerator × workload × budget × link with its margin and whether it is a tie.

`sweep --links A,B,…` runs the grid once per link (``--set cluster.link.name=…``) into
``OUT/links/<link>/`` and writes ``OUT/decision.parquet``. The winner at a point is the
recommendation rule's with the ``latency`` objective (lowest mean TTFT among the policies
that do not reject more requests, docs/study.md); the margin is the runner-up's mean TTFT
minus the winner's, paired over seeds, with its 95% CI. A margin whose CI spans 0 is a
**tie**: the seeds cannot tell the two apart. ``strength`` = |margin| ÷ CI half-width (how
many half-widths the margin clears; null with one seed).
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

from prefixbench.io.artifacts import read_artifact, register, write_atomic

from .. import catalog
from .grid import SweepSpec
from .margins import is_tie, strength

TIE = "tie"

register(
    "decision",
    {
        "model": pl.Utf8,
        "accelerator": pl.Utf8,
        "workload": pl.Utf8,
        "budget_factor": pl.Float64,
        "link": pl.Utf8,
        "link_gbytes_per_s": pl.Float64,
        "winner": pl.Utf8,
        "runner_up": pl.Utf8,
        "margin_ms": pl.Float64,
        "margin_ci95_ms": pl.Float64,
        "strength": pl.Float64,
        "decision": pl.Utf8,
        "n_seeds": pl.Int64,
    },
)


def link_spec(spec: SweepSpec, link: str) -> SweepSpec:
    """``spec`` with every scenario's link set to ``link``."""
    return spec.model_copy(update={"set": [*spec.set, f"cluster.link.name={link}"]})


def decision_rows(agg: pl.DataFrame, runs: pl.DataFrame, link: str, accelerators: dict) -> list:
    """The winner per (model, workload, budget) of one link's results."""
    from .recommend import recommend

    rec = recommend(agg, runs, "latency")
    bw = catalog.get_link(link).bandwidth_gbps
    rows = []
    for r in rec.iter_rows(named=True):
        m, ci = r["margin_ms"], r["margin_ci95_ms"]
        rows.append(
            {
                "model": r["model"],
                "accelerator": accelerators.get((r["model"], r["workload"]), ""),
                "workload": r["workload"],
                "budget_factor": r["budget_factor"],
                "link": catalog.hardware_label(link),
                "link_gbytes_per_s": bw,
                "winner": r["recommended"],
                "runner_up": r["runner_up"],
                "margin_ms": m,
                "margin_ci95_ms": ci,
                "strength": strength(m, ci),
                "decision": TIE if is_tie(m, ci) else r["recommended"],
                "n_seeds": r["n_seeds"],
            }
        )
    return rows


def run_link_sweep(
    spec: SweepSpec,
    links: list[str],
    out: Path,
    *,
    jobs: int | None = None,
    force: bool = False,
    backend=None,
    on_start=None,
    on_point=None,
) -> dict[str, Path]:
    """Run ``spec`` once per link and write ``out/decision.parquet``."""
    from prefixbench.support.suggest import did_you_mean

    from ..errors import CatalogError
    from .sweep import run_sweep

    links = list(dict.fromkeys(links))
    for link in links:
        if catalog.is_path(link):  # a hardware YAML file (README, "Your own hardware")
            catalog.get_link(link)  # one line naming the file and field if it is bad
        elif link not in catalog.LINKS:
            raise CatalogError(
                f"unknown link '{link}'", where="--links", fix=did_you_mean(link, catalog.LINKS)
            )
    out = Path(out)
    if on_start:
        on_start(len(spec.points()) * len(links), 0)
    rows = []
    for link in links:
        s = link_spec(spec, link)
        folder = out / "links" / catalog.hardware_label(link)
        run_sweep(s, folder, jobs=jobs, force=force, backend=backend, on_point=on_point)
        agg = read_artifact(folder / "agg.parquet", "agg")
        runs = read_artifact(folder / "runs.parquet", "runs")
        rows += decision_rows(agg, runs, link, _accelerators(s))
    table = pl.DataFrame(rows).sort(["model", "workload", "budget_factor", "link_gbytes_per_s"])
    return {"decision": write_atomic(table, out / "decision.parquet", "decision")}


def _accelerators(spec: SweepSpec) -> dict:
    """(model, workload) → the decode accelerator its scenario runs on."""
    out = {}
    for p in spec.points():
        key = (catalog.get_model(p.model).name, p.workload)
        if key not in out:
            s = p.load()
            out[(catalog.get_model(s.model).name, s.name)] = s.cluster.decode.accelerator
    return out
