"""Per-prefix figures of one run in one pass over its columns, without a request table.

The study's ``prefixes.parquet`` has, per prefix and policy, the steady requests' traffic,
where their KV came from and their bytes; tests/reference_prefixes.py ``prefix_table``
defines them as a polars ``group_by`` over the request table. This computes the same
figures from the engine's result columns and the prepared request arrays
(metrics/runcols.py) in one compiled pass per run:

- counts and integer sums are exact (int64);
- the float sums and means (``transfer_bytes``, ``ttft_mean_ms``) are the compensated
  (Kahan) sums polars' in-memory ``group_by`` takes, in request order within each prefix,
  so every figure equals the table's to the bit (tests/test_prefixes.py checks it against
  that definition on several scenarios; docs/performance.md "Per-prefix rows").
"""

from __future__ import annotations

import numpy as np
from numba import njit

from prefixbench.metrics.runcols import Rows, RunCols

INTS = ("prompt_tokens", "replica_hit_tokens", "prefill_hit_tokens", "recompute_tokens")


@njit(cache=True)
def _kahan_add(s, e, k, x):
    """polars' ``KahanSum += x`` on slot ``k`` (a non-finite value is added plainly)."""
    if np.isfinite(x):
        y = x - e[k]
        t = s[k] + y
        e[k] = (t - s[k]) - y
        s[k] = t
    else:
        s[k] += x


@njit(cache=True)
def _pass(slot, n_slots, admitted, done, ints, xfer, ttft):
    """One pass over the rows: per slot the counts (requests, admitted, admitted with a
    replica hit, completed), the integer sums (prompt and prefill hits over the admitted,
    replica hits and recompute over all) and the Kahan sums of the bytes (all) and the TTFT
    (completed), each in row order."""
    counts = np.zeros((n_slots, 4), np.int64)
    sums = np.zeros((n_slots, 4), np.int64)
    fs, fe = np.zeros(n_slots), np.zeros(n_slots)
    ts, te = np.zeros(n_slots), np.zeros(n_slots)
    for i in range(len(slot)):
        k = slot[i]
        a = admitted[i]
        counts[k, 0] += 1
        if a:
            counts[k, 1] += 1
            sums[k, 0] += ints[0, i]
            sums[k, 2] += ints[2, i]
            if ints[1, i] > 0:
                counts[k, 2] += 1
        sums[k, 1] += ints[1, i]
        sums[k, 3] += ints[3, i]
        _kahan_add(fs, fe, k, xfer[i])
        if done[i]:
            counts[k, 3] += 1
            _kahan_add(ts, te, k, ttft[i])
    return counts, sums, fs, ts


def _slots(pid: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(each row's dense slot, the prefix id of each slot in increasing order)."""
    if len(pid) and int(pid.max()) < 4 * len(pid) + 64:  # small ids: the id is the slot
        present = np.flatnonzero(np.bincount(pid))
        dense = np.full(int(pid.max()) + 1, -1, np.int64)
        dense[present] = np.arange(len(present))
        return dense[pid], present.astype(pid.dtype)
    ids, inv = np.unique(pid, return_inverse=True)
    return inv.astype(np.int64), ids


def per_prefix(run: RunCols) -> dict[str, np.ndarray]:
    """The per-prefix table's columns (tests/reference_prefixes.py) for one run, one entry
    per prefix with steady requests, by increasing prefix id; the fraction and the mean are
    NaN where nothing was admitted or completed (null in the table)."""
    pid_all = run.column("prefix_id")
    rows = Rows(run, ~run.warmup & (pid_all >= 0))
    slot, ids = _slots(np.ascontiguousarray(rows["prefix_id"]))
    sel = rows.mask
    ints = np.stack([np.asarray(rows[c], dtype=np.int64) for c in INTS])
    counts, sums, xfer, ttft = _pass(
        slot, len(ids), ~np.isnan(rows["t_admit"]), run.completed[sel], ints,
        np.ascontiguousarray(rows["transfer_bytes"], dtype=np.float64),
        np.ascontiguousarray(rows["ttft_ms"], dtype=np.float64),
    )  # fmt: skip
    out = {"prefix_id": ids, "requests": counts[:, 0], "admitted": counts[:, 1]}
    out.update({c: sums[:, j] for j, c in enumerate(INTS)})
    out["transfer_bytes"] = xfer
    with np.errstate(invalid="ignore", divide="ignore"):  # 0 / 0: NaN, null in the table
        out["replica_served_fraction"] = counts[:, 2] / counts[:, 1]
        out["ttft_mean_ms"] = ttft / counts[:, 3]
    return out


def warm_up() -> None:
    """Compile (or load from the cache) the pass on a two-row run's columns."""
    _pass(
        np.zeros(2, np.int64), 1, np.ones(2, np.bool_), np.ones(2, np.bool_),
        np.zeros((4, 2), np.int64), np.zeros(2), np.zeros(2),
    )  # fmt: skip
