"""How far the winner is ahead, and when it is a tie: one rule for `recommend`, the
`sweep --links` decision table and the `map` command (docs/study.md).

The margin is the runner-up's value minus the winner's, paired over seeds (the same requests
in each seed), with a 95% Student-t half-width. A margin whose interval reaches 0 is a
**tie**: the seeds cannot tell the two policies apart.
"""

from __future__ import annotations

import math

# a policy rejecting more than 1 percentage point above the best is not eligible on latency:
# its TTFT counts only the requests it admitted
REJECT_SLACK = 0.01


def t975(df: int) -> float:
    """Two-sided 95% Student-t quantile for ``df`` degrees of freedom (NaN for df < 1).

    scipy.special's inverse t CDF: the same value as ``scipy.stats.t.ppf`` without the ~2 s
    import of scipy.stats."""
    if df < 1:
        return math.nan
    from scipy.special import stdtrit

    return float(stdtrit(df, 0.975))


def paired_margin(diffs: list[float]) -> tuple[float, float]:
    """Mean of the per-seed differences and its 95% CI half-width (NaN without two seeds)."""
    n = len(diffs)
    if n == 0:
        return math.nan, math.nan
    mean = sum(diffs) / n
    if n < 2:
        return mean, math.nan
    sd = math.sqrt(sum((x - mean) ** 2 for x in diffs) / (n - 1))
    return mean, t975(n - 1) * sd / math.sqrt(n)


def known(x: float | None) -> bool:
    return x is not None and not math.isnan(x)


def is_tie(margin: float | None, ci: float | None) -> bool:
    """The margin's 95% interval reaches 0 (False when either is unknown)."""
    return known(margin) and known(ci) and abs(margin) <= ci


def strength(margin: float | None, ci: float | None) -> float:
    """|margin| ÷ CI half-width: how many half-widths the margin clears (NaN if unknown)."""
    return abs(margin) / ci if known(margin) and known(ci) and ci > 0 else math.nan
