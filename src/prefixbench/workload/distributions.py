"""Sampling the length distributions a scenario declares (vectorized, integer tokens)."""

from __future__ import annotations

import numpy as np

from prefixbench.scenario.models import Empirical, Fixed, LogNormal, Uniform


def sample(dist, rng: np.random.Generator, size: int) -> np.ndarray:
    """``size`` integer draws from ``dist`` (int64)."""
    if isinstance(dist, Fixed):
        return np.full(size, dist.value, dtype=np.int64)
    if isinstance(dist, Uniform):
        return rng.integers(dist.low, dist.high + 1, size=size, dtype=np.int64)
    if isinstance(dist, LogNormal):
        if dist.cv == 0:
            x = np.full(size, dist.mean)
        else:
            sigma2 = np.log1p(dist.cv**2)
            x = rng.lognormal(np.log(dist.mean) - sigma2 / 2.0, np.sqrt(sigma2), size=size)
        x = np.maximum(np.rint(x), dist.min)
        if dist.max is not None:
            x = np.minimum(x, dist.max)
        return x.astype(np.int64)
    if isinstance(dist, Empirical):
        values = np.asarray(dist.values, dtype=np.int64)
        p = None
        if dist.weights is not None:
            w = np.asarray(dist.weights, dtype=np.float64)
            p = w / w.sum()
        return rng.choice(values, size=size, p=p)
    raise TypeError(f"unknown distribution {dist!r}")


def mean(dist) -> float:
    """Expected value of ``dist`` before clipping (used for reference-demand estimates)."""
    if isinstance(dist, Fixed):
        return float(dist.value)
    if isinstance(dist, Uniform):
        return (dist.low + dist.high) / 2.0
    if isinstance(dist, LogNormal):
        return float(dist.mean)
    if isinstance(dist, Empirical):
        w = np.ones(len(dist.values)) if dist.weights is None else np.asarray(dist.weights, float)
        return float(np.dot(w / w.sum(), dist.values))
    raise TypeError(f"unknown distribution {dist!r}")
