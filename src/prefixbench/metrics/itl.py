"""The pooled inter-token-latency (ITL) distribution of a run, from the engine's histogram.

vLLM's `bench serve` ITL is the list of gaps between consecutive output tokens of every
request, pooled over requests (the first token's wait is TTFT, not an ITL). The engine
advances decode batches in closed form, so it never lists the gaps: it accumulates them,
weighted by how many measured sequences each iteration serves, into log-spaced bins
(engine/batch.py ``itl_series``) plus their exact count, sum, minimum and maximum. A
percentile read from a bin is within one bin width (200 bins per decade: 1.2 %) of the
exact one, and is clamped to the exact minimum and maximum. Definitions: docs/model.md
("Inter-token latency").
"""

from __future__ import annotations

import numpy as np

MS = 1e3


def histogram(stats: dict) -> np.ndarray:
    """The dense histogram (gap count per bin) from the engine's filled bins."""
    h = np.zeros(int(stats["itl_nbins"]))
    h[np.asarray(stats["itl_bins"], dtype=np.int64)] = stats["itl_weights"]
    return h


def has_itl(stats: dict) -> bool:
    """Whether the run recorded any inter-token gap (it tracks gaps and a measured request
    emitted two tokens or more)."""
    return bool(stats.get("itl_count"))


def itl_quantile_ms(stats: dict, q: float) -> float | None:
    """The ``q`` quantile (0 <= q <= 1) of the pooled gaps in ms; None without gaps.

    Inside the bin that holds the quantile the gaps are taken as spread evenly in log
    space."""
    if not has_itl(stats):
        return None
    h = histogram(stats)
    cum = np.cumsum(h)
    target = q * cum[-1]
    i = int(np.searchsorted(cum, target, side="left"))
    i = min(i, h.shape[0] - 1)
    while h[i] == 0.0 and i + 1 < h.shape[0]:  # q = 0 lands before the first filled bin
        i += 1
    before = cum[i] - h[i]
    frac = min(max((target - before) / h[i], 0.0), 1.0)
    lo, bpd = float(stats["itl_log10_lo"]), float(stats["itl_bins_per_decade"])
    v = 10.0 ** (lo + (i + frac) / bpd)
    v = min(max(v, float(stats["itl_min_s"])), float(stats["itl_max_s"]))
    return v * MS


def itl_mean_ms(stats: dict) -> float | None:
    """The exact mean of the pooled gaps in ms; None without gaps."""
    if not has_itl(stats):
        return None
    return float(stats["itl_sum_s"]) / float(stats["itl_count"]) * MS


def itl_std_ms(stats: dict) -> float | None:
    """The standard deviation of the pooled gaps in ms, from the histogram (bin centres in
    log space); None without gaps."""
    if not has_itl(stats):
        return None
    h = histogram(stats)
    lo, bpd = float(stats["itl_log10_lo"]), float(stats["itl_bins_per_decade"])
    centres = 10.0 ** (lo + (np.arange(h.shape[0]) + 0.5) / bpd)
    mean = float(stats["itl_sum_s"]) / float(stats["itl_count"])
    var = float((h * (centres - mean) ** 2).sum() / h.sum())
    return var**0.5 * MS


def itl_summary(stats: dict) -> dict:
    """The summary row's ITL columns (null when the run has no gaps)."""
    return {
        "itl_mean_ms": itl_mean_ms(stats),
        "itl_p50_ms": itl_quantile_ms(stats, 0.5),
        "itl_p90_ms": itl_quantile_ms(stats, 0.9),
        "itl_p99_ms": itl_quantile_ms(stats, 0.99),
    }


def itl_cdf(stats: dict) -> tuple[np.ndarray, np.ndarray]:
    """(gap in ms at each filled bin's upper edge, cumulative share of gaps): the CDF of the
    pooled gaps, for a figure; empty without gaps."""
    if not has_itl(stats):
        return np.zeros(0), np.zeros(0)
    h = histogram(stats)
    lo, bpd = float(stats["itl_log10_lo"]), float(stats["itl_bins_per_decade"])
    idx = np.nonzero(h)[0]
    edges = 10.0 ** (lo + (idx + 1.0) / bpd) * MS
    return edges, np.cumsum(h)[idx] / h.sum()
