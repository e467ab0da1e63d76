"""A run's per-request columns as numpy arrays, for the summary and the stability verdict.

The summary reads the engine's result columns (``SimResult.columns``) and the prepared
request arrays directly, restricted by boolean masks (steady, admitted, completed), instead
of building the per-request polars table and querying it: a derived column (``ttft_ms``,
``transfer_bytes``, …) is computed only for the rows a figure reads, with the same
element-wise arithmetic ``summary.requests_frame`` writes to ``requests.parquet``.

Every float mean, sum and quantile is taken by polars on one contiguous column
(``fmean``, ``fsum``, ``fquantile``), the kernel the old per-figure queries ran on their
rechunked filtered columns, so each figure is the same to the bit (numpy's pairwise
summation differs in the last bit); counts and integer sums are exact either way.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np
import polars as pl

from prefixbench.engine import Outcome, SimResult
from prefixbench.physics.costmodel import client_overhead_ms

MS = 1e3


def _tpot(g) -> np.ndarray:
    """ms per output token after the first; NaN (null in the table) for one-token answers."""
    out = g("output_tokens")
    many = out > 1
    tp = np.full(len(out), np.nan)
    tp[many] = (g("t_done")[many] - g("t_first_token")[many]) * MS / (out[many] - 1)
    return tp


# the derived columns of the request table, from the columns they are computed from
# (summary.requests_frame writes the same arithmetic with polars)
DERIVED: dict[str, Callable] = {
    "ttft_ms": lambda g: (g("t_first_token") - g("arrival")) * MS + g("_api_ms"),
    "ttft_prefill_ms": lambda g: (g("t_prefill_end") - g("arrival")) * MS,
    "e2e_ms": lambda g: (g("t_done") - g("arrival")) * MS + g("_api_ms"),
    "tpot_ms": _tpot,
}


CACHE_BYTES = 64 << 20  # columns a Rows keeps once read, at most (the rest recomputed)


class Rows(Mapping):
    """The run's columns restricted to ``mask`` (None: every row), each taken or derived
    when read; read columns are kept up to ``CACHE_BYTES`` (a short run keeps them all, a
    long one a few, so the summary's memory stays a few columns whatever the run's length);
    ``rows(mask)`` narrows further."""

    def __init__(self, run: RunCols, mask: np.ndarray | None) -> None:
        self.run, self.mask = run, mask
        self._kept: dict[str, np.ndarray] = {}
        self._room = CACHE_BYTES

    def __getitem__(self, name: str) -> np.ndarray:
        col = self._kept.get(name)
        if col is None:
            col = self._compute(name)
            if col.nbytes <= self._room:
                self._kept[name], self._room = col, self._room - col.nbytes
        return col

    def _compute(self, name: str) -> np.ndarray:
        if name in DERIVED:
            return DERIVED[name](self.__getitem__)
        return self.run.column(name, self.mask)

    def __contains__(self, name) -> bool:
        return name in DERIVED or self.run.has(name)

    def __iter__(self):
        return iter(self.run.names())

    def __len__(self) -> int:
        return self.run.n if self.mask is None else int(np.count_nonzero(self.mask))

    def rows(self, mask: np.ndarray) -> Rows:
        """These rows restricted to ``mask`` (a boolean array over these rows)."""
        if self.mask is None:
            return Rows(self.run, mask)
        full = np.zeros(self.run.n, dtype=bool)
        full[np.flatnonzero(self.mask)[mask]] = True
        return Rows(self.run, full)


class RunCols:
    """One policy's per-request columns: the prepared inputs, the engine's results, and
    ``warmup`` / ``completed`` masks over the requests, in request order."""

    def __init__(self, prep, res: SimResult) -> None:
        req = prep.requests
        self.prep, self.cols, self.n = prep, res.columns, len(req)
        self.inputs = {
            "arrival": req.arrival,
            "prompt_tokens": req.prompt_len,
            "output_tokens": req.output_len,
            "prefix_id": req.prefix_id,
        }
        self.warmup = np.arange(self.n) < prep.scenario.run.warmup_requests
        self.completed = np.asarray(res.columns["outcome"]) == int(Outcome.COMPLETED)
        self.rejected = np.asarray(res.columns["outcome"]) == int(Outcome.REJECTED)

    def has(self, name: str) -> bool:
        return name in self.inputs or name in self.cols or name in _EXTRA

    def names(self) -> list[str]:
        return [*self.inputs, *self.cols, *_EXTRA, *DERIVED]

    def column(self, name: str, mask: np.ndarray | None = None) -> np.ndarray:
        """A column, of the rows in ``mask`` (None: all)."""
        if name in _EXTRA:
            return _EXTRA[name](self, mask)
        col = self.inputs[name] if name in self.inputs else np.asarray(self.cols[name])
        return col if mask is None else col[mask]

    def all(self) -> Rows:
        return Rows(self, None)


def _sel(col: np.ndarray, mask: np.ndarray | None) -> np.ndarray:
    return col if mask is None else col[mask]


def _bytes(tokens: str) -> Callable:
    # int64 tokens × bytes per token, then float64: the table's cast
    return lambda run, m: (_sel(np.asarray(run.cols[tokens]), m) * run.prep.kv_bpt).astype(
        np.float64
    )


# columns of the table that are not engine results, for the rows of a mask
_EXTRA: dict[str, Callable] = {
    "chain_blocks": lambda run, m: _sel(np.diff(run.prep.requests.blk_ptr), m),
    "_api_ms": lambda run, m: client_overhead_ms(
        run.prep.scenario.efficiency, _sel(run.prep.requests.prompt_len, m)
    ),
    "transfer_bytes": _bytes("transfer_tokens"),
    "host_bytes": _bytes("host_hit_tokens"),
}


# ------------------------------------------------------------------ aggregates


def _series(x: np.ndarray, nulls: bool) -> pl.Series:
    """One contiguous polars column; with ``nulls``, NaN is null (``tpot_ms``'s one-token
    answers, null in the table), otherwise NaN stays NaN as in the table."""
    x = np.ascontiguousarray(x)
    return pl.Series(x, nan_to_null=nulls and x.dtype.kind == "f")


def fmean(x: np.ndarray, nulls: bool = False) -> float | None:
    """The mean polars takes of this column (None when empty or all null)."""
    return _series(x, nulls).mean()


def fsum(x: np.ndarray):
    return _series(x, False).sum()


def fquantile(x: np.ndarray, q: float, nulls: bool = False) -> float | None:
    """The linear-interpolation quantile polars takes (nulls skipped)."""
    return _series(x, nulls).quantile(q, "linear")


def fstats(x: np.ndarray, qs: tuple[float, ...], nulls: bool = False) -> list:
    """``[fmean(x), fquantile(x, q) for q in qs]`` from one polars column."""
    col = _series(x, nulls)
    return [col.mean(), *(col.quantile(q, "linear") for q in qs)]


def fdiv(a, b) -> float:
    """``a / b`` as polars divides two integer sums: NaN for 0 / 0, ±inf for x / 0."""
    a, b = float(a), float(b)
    if b == 0.0:
        return float("nan") if a == 0.0 else float(np.sign(a)) * float("inf")
    return a / b
