"""The study's figures (`prefixbench plot`, study/plots.py): the PNG file name, the title
the report gives it and the artifact in the results folder it is drawn from. A figure is
drawn only when its artifact is there."""

from __future__ import annotations

from typing import NamedTuple


class Figure(NamedTuple):
    file: str
    title: str
    needs: str  # the results artifact it is drawn from
    made_by: str  # the command that writes that artifact


_AGG = ("agg.parquet", "prefixbench sweep")
_CROSS = ("crossover.parquet", "prefixbench crossover")
_EVENTS = ("events/*.parquet", "prefixbench sweep --events")


def _f(file: str, title: str, source: tuple[str, str]) -> Figure:
    return Figure(file, title, *source)


FIGURES: tuple[Figure, ...] = (
    _f("01_mean_ttft_by_policy.png", "Mean TTFT by policy (95% CI over seeds)", _AGG),
    _f("03_replica_memory_tradeoff.png", "Replica memory vs TTFT reduction", _AGG),
    _f("04_transfer_recompute_crossover.png", "Transfer vs recompute over prefix length", _CROSS),
    _f("05_recommendation_matrix.png", "Recommendation matrix", _AGG),
    _f("06_ttft_distribution.png", "TTFT p50 / p90 / p99", _AGG),
    _f("07_crossover_map.png", "Transfer ÷ recompute per accelerator × link", _CROSS),
    _f(
        "08_decision_map.png",
        "Decision map: winner over budget × link bandwidth",
        ("decision.parquet", "prefixbench sweep --links"),
    ),
    _f("09_ttft_cdf.png", "TTFT CDFs, requests pooled over seeds", _EVENTS),
    _f("10_regret.png", "Regret: each policy's TTFT against the best", _AGG),
    _f("11_breakeven_prefix.png", "Break-even prefix length against link bandwidth", _CROSS),
    _f(
        "12_goodput_vs_rate.png",
        "Goodput against offered rate",
        ("capacity.parquet", "prefixbench capacity"),
    ),
    _f("13_tpot_cdf.png", "TPOT CDFs, requests pooled over seeds", _EVENTS),
)


def titles() -> dict[str, str]:
    """File name → title, in figure order."""
    return {f.file: f.title for f in FIGURES}
