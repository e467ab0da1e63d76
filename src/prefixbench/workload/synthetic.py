"""Synthetic requests: arrivals, a Zipf prefix pool with optional drift, length distributions.

Each component draws from its own ``numpy.random.Generator`` spawned from the scenario seed,
so changing one distribution does not reshuffle the others.
"""

from __future__ import annotations

import numpy as np

from prefixbench.scenario.models import SyntheticWorkload

from .distributions import sample
from .requests import Requests

_STREAMS = ("arrivals", "prefix_lengths", "has_prefix", "prefix_rank", "suffix", "output")


def streams(seed: int) -> dict[str, np.random.Generator]:
    """One independent generator per workload component."""
    children = np.random.SeedSequence(seed).spawn(len(_STREAMS))
    return {name: np.random.default_rng(s) for name, s in zip(_STREAMS, children, strict=True)}


def arrival_times(w: SyntheticWorkload, n: int, rng: np.random.Generator) -> np.ndarray:
    a = w.arrivals
    if a.process == "poisson":
        gaps = rng.exponential(1.0 / a.rate, size=n)
    else:  # gamma gaps with mean 1/rate and coefficient of variation cv
        shape = 1.0 / a.cv**2
        gaps = rng.gamma(shape, 1.0 / (a.rate * shape), size=n)
    return np.cumsum(gaps)


def zipf_weights(count: int, s: float) -> np.ndarray:
    w = 1.0 / np.arange(1, count + 1, dtype=np.float64) ** s
    return w / w.sum()


def generate(w: SyntheticWorkload, n: int, block_size: int, seed: int) -> Requests:
    """``n`` requests of workload ``w``.

    Prefix ``p`` is one cache entry (block hash ``p``) covering its length rounded down to
    whole blocks: all requests of a prefix share it entirely, so finer blocks would only
    add bookkeeping (docs/model.md). Requests without a prefix have no cacheable chain.
    """
    rng = streams(seed)
    arrival = arrival_times(w, n, rng["arrivals"])
    pool = w.prefixes
    prefix_len = sample(pool.length, rng["prefix_lengths"], pool.count)
    shared_tokens = (prefix_len // block_size) * block_size

    has = rng["has_prefix"].random(n) < w.share_fraction
    rank = rng["prefix_rank"].choice(pool.count, size=n, p=zipf_weights(pool.count, pool.zipf_s))
    if w.drift is not None:  # rank r maps to prefix (r + epoch*shift) mod count
        epoch = np.floor(arrival / w.drift.period_s).astype(np.int64)
        rank = (rank + epoch * w.drift.shift) % pool.count
    prefix_id = np.where(has, rank, -1).astype(np.int64)

    suffix = sample(w.suffix_length, rng["suffix"], n)
    output = np.maximum(sample(w.output_length, rng["output"], n), 1)
    plen = np.where(has, prefix_len[np.maximum(prefix_id, 0)], 0)
    prompt = np.maximum(plen + suffix, 1)

    chained = has & (shared_tokens[np.maximum(prefix_id, 0)] > 0)
    blk_ptr = np.concatenate(([0], np.cumsum(chained))).astype(np.int64)
    return Requests(
        arrival=arrival,
        prompt_len=prompt.astype(np.int64),
        output_len=output.astype(np.int64),
        blk_ptr=blk_ptr,
        blk_hash=prefix_id[chained].copy(),
        blk_tokens=shared_tokens[prefix_id[chained]].astype(np.int64),
        prefix_id=prefix_id,
    )
