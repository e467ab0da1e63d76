"""`prefixbench run`: one scenario under one or more policies → requests and summary tables."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import polars as pl

from prefixbench.io.artifacts import write_atomic
from prefixbench.metrics.invariants import check_row
from prefixbench.metrics.summary import request_chunks, requests_frame, summarize_result
from prefixbench.scenario.models import Scenario
from prefixbench.system.runner import Prepared, prepare, simulate_policy


@dataclass
class RunTables:
    prepared: Prepared
    requests: pl.DataFrame
    summary: pl.DataFrame
    stats: dict = field(default_factory=dict)  # policy → the engine's SimResult.stats


def scenario_keys(s: Scenario) -> dict:
    """Identifying columns every summary row carries."""
    workload = s.name
    return {
        "scenario": s.name,
        "model": s.model,
        "workload": workload,
        "budget_factor": float(s.memory.budget_factor)
        if s.memory.kv_budget_gb is None
        else float("nan"),
        "seed": s.seed,
        # colocated instances always reserve (docs/model.md "Paged admission")
        "admission": s.memory.admission if s.cluster.mode != "colocated" else "reserve",
    }


def run_scenario(
    s: Scenario,
    policies: list[str],
    keep_requests: bool = True,
    track_gaps: bool = False,
    timeline: Path | None = None,
    on_policy=None,
    sink=None,
    on_result=None,
    jobs: int | None = 1,
) -> RunTables:
    """Simulate ``s`` under each policy on the same requests (one prepared workload);
    ``on_policy(policy)`` is called after each (a progress bar). With ``sink`` (an
    io/stream.PartWriter) each policy's request rows go to it instead of being kept.
    ``on_result(prep, policy, res)`` sees each run's engine result before it is dropped
    (the sweep's per-prefix rows, without the request table). With ``sink``, ``jobs``
    workers (None: auto, study/runpool.py) simulate the policies unless a timeline or
    ``on_result`` needs them in this process."""
    prep = prepare(s)
    if sink is not None and timeline is None and on_result is None:
        from .runpool import pool_jobs, run_pooled

        jobs = pool_jobs(jobs, len(prep.requests), len(policies))
        if jobs > 1:
            rows, stats = run_pooled(
                prep, policies, sink, jobs, track_gaps, scenario_keys(s), on_policy
            )
            return RunTables(prep, pl.DataFrame(), pl.DataFrame(rows), stats)
    if timeline is not None:
        from prefixbench.support.memcheck import check_timeline

        check_timeline(len(prep.requests), len(policies))
    frames, rows = [], []
    keys = scenario_keys(s)
    recorders = []
    stats = {}
    for policy in policies:
        rec = None
        if timeline is not None:
            from ..engine.recorder import Recorder

            rec = Recorder(policy)
            recorders.append(rec)
        res = simulate_policy(prep, policy, track_gaps=track_gaps, recorder=rec)
        row = summarize_result(prep, policy, res)  # from the engine's columns, no table
        rows.append(check_row({**keys, **row}, f"policy {policy}"))
        stats[policy] = res.stats
        if on_result is not None:
            on_result(prep, policy, res)
        if sink is not None:  # written in chunks: the table is never whole
            for lo, hi in request_chunks(len(prep.requests)):  # each chunk freed once added
                sink.add(requests_frame(prep, policy, res, lo, hi))
        elif keep_requests:
            frames.append(requests_frame(prep, policy, res))
        del res  # one policy's columns alive at a time
        if on_policy:
            on_policy(policy)
    if timeline is not None:
        _write_timeline(recorders, Path(timeline))
    requests = pl.concat(frames) if frames else pl.DataFrame()
    return RunTables(prep, requests, pl.DataFrame(rows), stats)


def _write_timeline(recorders: list, path: Path) -> Path:
    """The Perfetto timeline, atomically, with the file mode of the Parquet files; a write
    that fails (a directory there, a full disk, a read-only folder) is one line and leaves
    no temp file behind."""
    import os
    import shutil
    import tempfile

    from prefixbench.io.artifacts import _UMASK

    from ..engine.recorder import write_chrome_trace
    from ..errors import ArtifactError

    tmpdir = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmpdir = tempfile.mkdtemp(prefix=f".{path.name}.", dir=path.parent)
        written = write_chrome_trace(recorders, Path(tmpdir) / path.name)
        os.chmod(written, 0o666 & ~_UMASK)
        if path.is_dir():
            raise IsADirectoryError(21, "Is a directory")
        os.replace(written, path)
    except OSError as e:
        raise ArtifactError(
            f"cannot write the timeline ({e.strerror or e.__class__.__name__})",
            where=str(path),
            fix="give --timeline a file path in a writable folder with free space",
        ) from None
    finally:
        if tmpdir is not None:
            shutil.rmtree(tmpdir, ignore_errors=True)
    return path


def stream_run(s: Scenario, policies: list[str], out: Path, **kw) -> tuple[RunTables, list[Path]]:
    """``run_scenario`` writing ``out``/requests.parquet policy by policy (io/stream.py), so
    a large run holds one policy's request table at a time; then the summary."""
    from prefixbench.io.stream import PartWriter

    sink = PartWriter(Path(out) / "requests.parquet", "requests")
    try:
        t = run_scenario(s, policies, sink=sink, **kw)
    except BaseException:
        sink.discard()
        raise
    meta = {"scenario": t.prepared.scenario.model_dump(mode="json")}
    paths = [
        sink.close(meta),
        write_atomic(t.summary, Path(out) / "summary.parquet", "summary", meta),
    ]
    return t, paths


def write_run(t: RunTables, out: Path) -> list[Path]:
    meta = {"scenario": t.prepared.scenario.model_dump(mode="json")}
    return [
        write_atomic(t.requests, out / "requests.parquet", "requests", meta),
        write_atomic(t.summary, out / "summary.parquet", "summary", meta),
    ]
