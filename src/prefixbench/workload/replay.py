"""A ``trace`` workload: load a trace, apply replay controls, overlay sharing on Azure."""

from __future__ import annotations

import contextlib

import numpy as np

from prefixbench.scenario.models import TraceWorkload

from ..errors import ScenarioError
from .controls import limit, rescale_rate, window
from .distributions import sample
from .overlength import apply_overlength
from .requests import Requests
from .synthetic import streams, zipf_weights
from .traces import read_trace

NO_PREFIX_INFO = ("azure", "burstgpt")  # CSV traces with lengths only


def overlay_prefixes(req: Requests, w: TraceWorkload, block_size: int, seed: int) -> Requests:
    """Give a trace without prefix information (Azure) shared prefixes from ``w.overlay``.

    Each request carries, with probability ``share_fraction``, a Zipf-chosen prefix from the
    overlay pool as the first tokens of its prompt. A prefix longer than the request's
    prompt minus one token cannot be its prefix, so that request shares nothing. Arrivals
    and lengths of the trace are kept unchanged.
    """
    ov = w.overlay
    assert ov is not None
    rng = streams(seed)
    n = len(req)
    pool = ov.prefixes
    plen = sample(pool.length, rng["prefix_lengths"], pool.count)
    shared = (plen // block_size) * block_size
    rank = rng["prefix_rank"].choice(pool.count, size=n, p=zipf_weights(pool.count, pool.zipf_s))
    if ov.drift is not None:
        epoch = np.floor(req.arrival / ov.drift.period_s).astype(np.int64)
        rank = (rank + epoch * ov.drift.shift) % pool.count
    has = rng["has_prefix"].random(n) < ov.share_fraction
    fits = shared[rank] <= req.prompt_len - 1
    chained = has & fits & (shared[rank] > 0)
    return Requests(
        arrival=req.arrival,
        prompt_len=req.prompt_len,
        output_len=req.output_len,
        blk_ptr=np.concatenate(([0], np.cumsum(chained))).astype(np.int64),
        blk_hash=rank[chained].astype(np.int64),
        blk_tokens=shared[rank[chained]].astype(np.int64),
        prefix_id=np.where(chained, rank, -1).astype(np.int64),
    )


@contextlib.contextmanager
def _at(field: str):
    """Name the scenario field a replay control's error comes from."""
    try:
        yield
    except ScenarioError as e:
        if e.where:
            raise
        raise ScenarioError(e.what, where=field, fix=e.fix) from None


def trace_requests(
    w: TraceWorkload,
    n: int | None,
    block_size: int,
    seed: int,
    max_context: int | None = None,
    model: str = "the model",
) -> tuple[Requests, list[str]]:
    """The requests a trace workload replays, and notes for the user (skips, over-length
    requests, overlay). ``max_context`` (the model's) applies ``w.overlength``."""
    fmt = None if w.format == "auto" else w.format
    load = read_trace(
        w.path, fmt, block_size=w.block_size, time_unit_s=w.time_unit_s, skip_bad=w.skip_bad
    )
    notes: list[str] = []
    if load.skipped:
        detail = ", ".join(f"{k}: {v}" for k, v in sorted(load.skip_reasons.items()))
        notes.append(f"{w.path}: skipped {load.skipped} bad records ({detail})")
    req = load.requests
    if max_context is not None:
        req, note = apply_overlength(req, max_context, w.overlength, model)
        if note:
            notes.append(f"{w.path}: {note}")
    if w.start_s is not None or w.end_s is not None:
        with _at("workload.start_s/end_s"):
            req = window(
                req,
                w.start_s or 0.0,
                w.end_s if w.end_s is not None else float(req.arrival[-1]) + 1.0,
            )
    if n is not None:
        req = limit(req, n)
    if w.rate is not None:
        with _at("workload.rate"):
            req = rescale_rate(req, w.rate)
    if w.overlay is not None:
        if load.format not in NO_PREFIX_INFO:
            raise ScenarioError(
                "a prefix overlay only applies to traces without prefix information "
                "(Azure, BurstGPT)",
                where="workload.overlay",
                fix="remove workload.overlay for Mooncake and Bailian traces",
            )
        req = overlay_prefixes(req, w, block_size, seed)
        notes.append(f"prefix sharing is overlaid synthetically (the {load.format} trace has none)")
    elif load.format in NO_PREFIX_INFO:
        notes.append(
            f"the {load.format} trace has no prefix information and no overlay is set: "
            "nothing is shared"
        )
    return req, notes
