"""Replay controls: pure functions from :class:`Requests` to :class:`Requests` that limit,
window, rescale or tile a trace (or any request table)."""

from __future__ import annotations

import math

import numpy as np

from ..errors import ScenarioError
from .requests import Requests

_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


def limit(requests: Requests, n: int) -> Requests:
    """The first ``n`` requests (all of them when the trace is shorter)."""
    if n < 1:
        raise ScenarioError(f"limit must be at least 1, got {n}", fix="pass a positive count")
    return requests.slice(0, min(int(n), len(requests)))


def window(requests: Requests, start_s: float, end_s: float) -> Requests:
    """Requests arriving in ``[start_s, end_s)``, re-based so the first arrives at 0."""
    if not end_s > start_s:
        raise ScenarioError(
            f"window end {end_s} must be after its start {start_s}", fix="swap or widen the window"
        )
    lo = int(np.searchsorted(requests.arrival, start_s, side="left"))
    hi = int(np.searchsorted(requests.arrival, end_s, side="left"))
    if hi <= lo:
        span = float(requests.arrival[-1]) if len(requests) else 0.0
        raise ScenarioError(
            f"no requests arrive in [{start_s}, {end_s}) s; the trace spans 0 to {span:g} s",
            fix="choose a window inside the trace",
        )
    out = requests.slice(lo, hi)
    out.arrival = out.arrival - out.arrival[0]
    return out


def rescale_rate(requests: Requests, rate: float) -> Requests:
    """Stretch or squeeze arrival times so the mean rate ``(n - 1) / span`` is ``rate``
    req/s; order and relative gaps are kept, the first request still arrives at 0."""
    n = len(requests)
    if not (math.isfinite(rate) and rate > 0):
        raise ScenarioError(f"rate must be a positive number, got {rate}", fix="pass req/s > 0")
    span = float(requests.arrival[-1] - requests.arrival[0]) if n else 0.0
    if n < 2 or span <= 0:
        raise ScenarioError(
            "cannot rescale the arrival rate of a trace with fewer than 2 distinct arrival times",
            fix="use a longer trace or window",
        )
    if not math.isfinite((n - 1) / rate):
        raise ScenarioError(
            f"rate {rate:g} req/s is too low: arrival times would overflow",
            fix="pass a larger rate",
        )
    # normalise by the span first: (n - 1) / rate / span overflows for a subnormal span
    return Requests(
        arrival=((requests.arrival - requests.arrival[0]) / span) * ((n - 1) / rate),
        prompt_len=requests.prompt_len,
        output_len=requests.output_len,
        blk_ptr=requests.blk_ptr,
        blk_hash=requests.blk_hash,
        blk_tokens=requests.blk_tokens,
        prefix_id=requests.prefix_id,
    )


def _copy_stride(values: np.ndarray, copies: int) -> tuple[np.ndarray, int]:
    """(base values, stride) so that ``base + k * stride`` for k < copies never collide
    across copies and fit in int64; remaps to dense ids when the raw range would overflow."""
    if values.size == 0 or copies <= 1:
        return values, 0
    lo, hi = int(values.min()), int(values.max())
    stride = hi - lo + 1
    if lo >= _INT64_MIN and hi + (copies - 1) * stride <= _INT64_MAX:
        return values, stride
    uniq, dense = np.unique(values, return_inverse=True)
    return dense.astype(np.int64).reshape(values.shape), int(uniq.size)


def tile(requests: Requests, n_total: int) -> Requests:
    """Repeat the trace end to end until there are ``n_total`` requests. Copy ``k`` is
    shifted in time by ``k * (span + mean gap)`` and its block hashes (and prefix ids) by a
    per-copy offset, so copies never share KV with each other."""
    n = len(requests)
    if n_total < 1:
        raise ScenarioError(f"tile target must be at least 1, got {n_total}", fix="pass n > 0")
    if n == 0:
        raise ScenarioError("cannot tile an empty trace", fix="load a non-empty trace")
    if n_total <= n:
        return requests.slice(0, n_total)
    copies = -(-n_total // n)
    base = requests.arrival - requests.arrival[0]
    span = float(base[-1])
    period = span + (span / (n - 1) if n > 1 else 0.0)
    hashes, h_stride = _copy_stride(requests.blk_hash, copies)
    has_pid = requests.prefix_id >= 0
    pids, p_stride = _copy_stride(requests.prefix_id[has_pid], copies)

    nb = int(requests.blk_ptr[-1])
    tail = n_total - (copies - 1) * n  # requests taken from the last copy
    tail_blocks = int(requests.blk_ptr[tail])
    total_blocks = (copies - 1) * nb + tail_blocks
    arrival = np.empty(n_total, dtype=np.float64)
    prompt = np.empty(n_total, dtype=np.int64)
    output = np.empty(n_total, dtype=np.int64)
    prefix = np.empty(n_total, dtype=np.int64)
    blk_ptr = np.empty(n_total + 1, dtype=np.int64)
    blk_hash = np.empty(total_blocks, dtype=np.int64)
    blk_tokens = np.empty(total_blocks, dtype=np.int64)
    blk_ptr[0] = 0
    for k in range(copies):
        m = n if k < copies - 1 else tail
        mb = nb if k < copies - 1 else tail_blocks
        r0, b0 = k * n, k * nb
        arrival[r0 : r0 + m] = base[:m] + k * period
        prompt[r0 : r0 + m] = requests.prompt_len[:m]
        output[r0 : r0 + m] = requests.output_len[:m]
        pid = requests.prefix_id.copy()
        pid[has_pid] = pids + k * p_stride
        prefix[r0 : r0 + m] = pid[:m]
        blk_ptr[r0 + 1 : r0 + m + 1] = requests.blk_ptr[1 : m + 1] + b0
        blk_hash[b0 : b0 + mb] = hashes[:mb] + k * h_stride
        blk_tokens[b0 : b0 + mb] = requests.blk_tokens[:mb]
    return Requests(
        arrival=arrival,
        prompt_len=prompt,
        output_len=output,
        blk_ptr=blk_ptr,
        blk_hash=blk_hash,
        blk_tokens=blk_tokens,
        prefix_id=prefix,
    )
