"""`run`'s policies in worker processes (docs/design.md "Policies in worker processes").

Each worker simulates one policy of the prepared workload and does that policy's
post-processing (its checked summary row); the parent builds the policy's request rows
from the engine's columns, chunk by chunk, in policy order, for requests.parquet's encoder
(the same chunks as in-process, so the same bytes). The workers are the sweep's
(study/backends.py: forked from a fork server that preloaded the engine). The prepared
workload reaches them as one pickle file and the engine's columns come back as ``.npy``
files, memory-mapped by the parent, both in the output's temporary folder (io/stream.py
``PartWriter.dir``), which an error or Ctrl-C removes with the half-written file: nothing
large crosses a pipe. Building the rows in the worker and sending them as Arrow IPC cost
twice the CPU of the columns (docs/performance.md "Policies on both cores (measured)").
"""

from __future__ import annotations

import contextlib
import os
import pickle
import tempfile
from dataclasses import dataclass
from pathlib import Path

from prefixbench.metrics.invariants import check_row
from prefixbench.metrics.summary import request_chunks, requests_frame, summarize_result
from prefixbench.system.runner import Prepared, simulate_policy

from .backends import LocalPoolBackend, check_jobs

# Below this many simulated requests (requests × policies) the workers cost more than the
# second core gains: their start-up (the fork server loading the engine, polars imported in
# each worker) and the columns' round trip through files are about 2 CPU-s, more than half
# of a 100,000-request seven-policy run (docs/performance.md "Policies on both cores
# (measured)").
AUTO_MIN_WORK = 2_000_000


def pool_jobs(jobs: int | None, n_requests: int, n_policies: int) -> int:
    """Worker processes for a run of ``n_policies`` policies on ``n_requests`` requests;
    1 means in-process. ``jobs`` None (auto): one per core when the run is large enough."""
    if jobs is None:
        if n_requests * n_policies < AUTO_MIN_WORK:
            return 1
        jobs = os.cpu_count() or 1
    return max(1, min(check_jobs(jobs), n_policies))


@dataclass
class PolicyOut:
    """What a worker sends back for one policy: small things only."""

    row: dict | None = None  # the checked summary row
    stats: dict | None = None  # the engine's SimResult.stats
    columns: dict | None = None  # engine column name → its .npy file
    error: BaseException | None = None  # raised by the parent at this policy's turn


_LOADED: dict[str, Prepared] = {}  # per worker: the prepared workload, read once


def _prepared(path: str) -> Prepared:
    if path not in _LOADED:
        _LOADED.clear()
        with open(path, "rb") as fh:
            _LOADED[path] = pickle.load(fh)
    return _LOADED[path]


def policy_task(item: tuple) -> PolicyOut:
    """In a worker: simulate one policy, check its summary row and save its engine columns
    (numpy ``.npy`` files next to the pickle), as ``run_scenario`` does in-process; an
    error is returned, not raised, so the parent reports the first failing policy in
    policy order, as the serial path does."""
    import warnings

    import numpy as np

    index, policy, prep_path, track_gaps, keys = item
    try:
        with warnings.catch_warnings():
            if os.environ.get("PREFIXBENCH_STRICT") != "1":  # as cli/app.py ``guarded``
                warnings.simplefilter("ignore", RuntimeWarning)
            prep = _prepared(prep_path)
            res = simulate_policy(prep, policy, track_gaps=track_gaps)
            row = summarize_result(prep, policy, res)
            row = check_row({**keys, **row}, f"policy {policy}")
            folder, columns = Path(prep_path).parent, {}
            for k, (name, col) in enumerate(res.columns.items()):
                columns[name] = str(folder / f"policy{index}.{k}.npy")
                np.save(columns[name], col, allow_pickle=False)
            return PolicyOut(row, res.stats, columns)
    except Exception as e:  # noqa: BLE001 - re-raised by the parent, in order
        return PolicyOut(error=e)


def _add_requests(sink, prep: Prepared, policy: str, got: PolicyOut) -> None:
    """``policy``'s request rows, chunk by chunk, from the worker's columns (memory-mapped:
    read as each chunk is built; the files go once mapped)."""
    import numpy as np

    from prefixbench.engine.config import SimResult

    columns = {}
    for name, path in got.columns.items():
        columns[name] = np.load(path, mmap_mode="r")
        os.unlink(path)
    res = SimResult(columns, got.stats)
    for lo, hi in request_chunks(len(prep.requests)):
        sink.add(requests_frame(prep, policy, res, lo, hi))


def run_pooled(
    prep: Prepared, policies: list[str], sink, jobs: int, track_gaps: bool, keys, on_policy
):
    """The summary rows and stats of ``policies`` simulated by ``jobs`` workers, their
    request rows added to ``sink`` (an io/stream.PartWriter) in policy order; ``keys`` are
    the columns every summary row starts with (study/runs.py ``scenario_keys``)."""
    work = Path(tempfile.mkdtemp(prefix=".policies.", dir=sink.dir))
    prep_path = work / "prepared.pickle"
    with open(prep_path, "wb") as fh:
        pickle.dump(prep, fh, protocol=pickle.HIGHEST_PROTOCOL)
    items = [(i, p, str(prep_path), track_gaps, keys) for i, p in enumerate(policies)]
    arrived: dict[int, PolicyOut] = {}
    rows, stats = [], {}
    results = LocalPoolBackend(jobs).map_unordered(policy_task, items)
    with contextlib.closing(results):  # an error here stops the workers (backends._stop)
        for item, got in results:
            arrived[item[0]] = got
            while len(rows) in arrived:
                i = len(rows)
                got = arrived.pop(i)
                if got.error is not None:
                    raise got.error
                _add_requests(sink, prep, policies[i], got)
                rows.append(got.row)
                stats[policies[i]] = got.stats
                if on_policy:
                    on_policy(policies[i])
    return rows, stats
