"""`prefixbench sweep`: a grid of scenarios × seeds × policies on a process pool, resumable.

Each point (model, workload, budget, seed) runs all policies on the same requests and its
rows are written to ``parts/<point_id>.parquet`` atomically as soon as it finishes, so an
interrupted sweep keeps every finished point and a rerun only does the rest. The combined
files are rebuilt from the parts, sorted by a stable key, so results are identical whatever
the order workers finished in.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from prefixbench.io.artifacts import (
    SCHEMAS,
    artifact_meta,
    conform,
    read_artifact,
    register,
    write_atomic,
)
from prefixbench.support.files import is_file
from prefixbench.support.memcheck import check_workers

from ..errors import ArtifactError, PrefixbenchError
from .aggregate import aggregate, point_prefixes, prefix_rows
from .backends import Backend, LocalPoolBackend, sigterm_as_interrupt
from .grid import Point, SweepSpec, canonical

RUN_KEYS = ["admission", "model", "workload", "budget_factor", "seed", "policy"]
register("runs", {"run_id": pl.Utf8, "point_id": pl.Utf8, **SCHEMAS["summary"]})
register(
    "prefixes",
    {
        "run_id": pl.Utf8,
        "admission": pl.Utf8,
        "model": pl.Utf8,
        "workload": pl.Utf8,
        "budget_factor": pl.Float64,
        "seed": pl.Int64,
        "policy": pl.Utf8,
        "prefix_id": pl.Int64,
        "requests": pl.Int64,
        "admitted": pl.Int64,
        "prompt_tokens": pl.Int64,
        "replica_hit_tokens": pl.Int64,
        "prefill_hit_tokens": pl.Int64,
        "recompute_tokens": pl.Int64,
        "transfer_bytes": pl.Float64,
        "replica_served_fraction": pl.Float64,
        "ttft_mean_ms": pl.Float64,
    },
)


Parts = tuple[pl.DataFrame, pl.DataFrame]  # a finished point's runs and prefixes rows


@dataclass
class PointResult:
    point: Point
    runs: pl.DataFrame
    prefixes: pl.DataFrame
    requests: pl.DataFrame | None


def run_point(point: Point, policies: list[str], keep_requests: bool) -> PointResult:
    """Simulate one grid point under every policy (runs in a worker process)."""
    from .runs import run_scenario

    tables: list[dict] = []  # each run's per-prefix rows, from its engine columns

    def _prefixes(prep, policy: str, res) -> None:
        tables.append(prefix_rows(prep, policy, res))

    with _naming(point):
        s = point.load()
        t = run_scenario(s, policies, keep_requests=keep_requests, on_result=_prefixes)
    run_ids = [point.run_id(p) for p in t.summary["policy"].to_list()]
    runs = t.summary.with_columns(
        pl.Series("run_id", run_ids, dtype=pl.Utf8),
        pl.lit(point.point_id).alias("point_id"),
        pl.lit(point.workload).alias("workload"),
        pl.lit(point.budget_factor).alias("budget_factor"),
    )
    constants = {  # the point's columns on every request row
        "model": point.model,
        "workload": point.workload,
        "budget_factor": float(point.budget_factor),
        "seed": int(point.seed),
        "admission": runs["admission"][0],
    }
    ids = dict(zip(t.summary["policy"].to_list(), run_ids, strict=True))
    prefixes = point_prefixes(tables, constants, ids)
    reqs = None
    if keep_requests:
        exprs = {k: pl.lit(v) for k, v in constants.items()}
        exprs["seed"] = pl.lit(point.seed).cast(pl.Int64)
        reqs = t.requests.with_columns(**exprs)
    return PointResult(point, runs, prefixes, reqs)


def _part_paths(out: Path, point: Point) -> tuple[Path, Path, Path]:
    pid = point.point_id
    return (
        out / "parts" / f"{pid}.runs.parquet",
        out / "parts" / f"{pid}.prefixes.parquet",
        out / "events" / f"{pid}.parquet",
    )


def _finished(out: Path, point: Point, events: bool) -> Parts | None:
    """A finished point's runs and prefixes, read from its part files; None when they do
    not exist, do not read back valid or do not prove they hold this point (corrupt, foreign
    or another point's part → redo)."""
    runs_p, pre_p, ev_p = _part_paths(out, point)
    try:
        parts = (read_part(runs_p, "runs", point), read_part(pre_p, "prefixes", point))
        if events:
            read_part(ev_p, "requests", point)
    except ArtifactError:
        return None
    return parts


def _part_meta(point: Point) -> dict:
    return {"point_id": point.point_id, "point_key": list(point.key_record())}


def read_part(path: Path, kind: str, point: Point) -> pl.DataFrame:
    """A part file, checked to hold ``point``: the key recorded inside it (not its name)
    and, for runs and prefixes, the ids in its rows. A valid part copied over another
    point's is refused, so it is redone instead of counted twice."""
    df = read_artifact(path, kind)
    meta = artifact_meta(path)
    if meta.get("point_id") != point.point_id or meta.get("point_key") != list(point.key_record()):
        raise ArtifactError(
            "this part file holds another grid point than its name says",
            where=str(path),
            fix="delete it; the sweep redoes the point",
        )
    ids = {"runs": "point_id", "prefixes": "run_id"}.get(kind)
    if ids is not None:
        want = (
            {point.point_id}
            if kind == "runs"
            else {point.run_id(p) for p in df["policy"].unique().to_list()}
        )
        if df.height == 0 or not set(df[ids].unique().to_list()) <= want:
            raise ArtifactError(
                "this part file's rows belong to another grid point",
                where=str(path),
                fix="delete it; the sweep redoes the point",
            )
    return df


def _save(out: Path, r: PointResult) -> Parts:
    """Write a finished point's part files (its checkpoint); the frames as written, which
    are the frames reading the parts back gives, for the combined files."""
    runs_p, pre_p, ev_p = _part_paths(out, r.point)
    meta = _part_meta(r.point)
    if r.requests is not None:
        write_atomic(r.requests, ev_p, "requests", meta)
    parts = (conform(r.runs, "runs"), conform(r.prefixes, "prefixes"))
    write_atomic(parts[1], pre_p, "prefixes", meta)
    write_atomic(parts[0], runs_p, "runs", meta)  # last: its presence marks the point finished
    return parts


def check_grid(out: Path, spec: SweepSpec, force: bool) -> None:
    """Refuse to mix a different grid into an existing results directory."""
    path = out / "sweep.json"
    want = spec.fingerprint()
    if is_file(path) and not force:
        try:
            have = json.loads(path.read_text())
        except (OSError, ValueError, RecursionError):
            have = None
        if not isinstance(have, dict) or canonical(have) != want:
            raise ArtifactError(
                "this directory holds results of a different sweep grid",
                where=str(out),
                fix="choose another --out, or pass --force to rebuild its combined files for this grid (finished runs of both grids are kept in parts/)",
            )
    tmp = path.with_suffix(".json.tmp")
    try:
        out.mkdir(parents=True, exist_ok=True)
        tmp.write_text(json.dumps(want, indent=2, sort_keys=True))
        os.replace(tmp, path)
    except OSError as e:
        raise ArtifactError(
            f"cannot write here ({e.strerror or e.__class__.__name__})",
            where=str(out),
            fix="choose a writable --out directory",
        ) from None


def _pending(out: Path, points: Iterable[Point], events: bool) -> tuple[list[Point], dict]:
    """The points still to run, and the parts of those finished (by point id)."""
    todo, done = [], {}
    for p in points:
        parts = _finished(out, p, events)
        if parts is None:
            todo.append(p)
        else:
            done[p.point_id] = parts
    return todo, done


def run_sweep(
    spec: SweepSpec,
    out: Path,
    *,
    jobs: int | None = None,
    events: bool = False,
    force: bool = False,
    backend: Backend | None = None,
    on_start: Callable[[int, int], None] | None = None,
    on_point: Callable[[Point], None] | None = None,
) -> dict[str, Path]:
    """Run every unfinished point of ``spec`` into ``out`` and (re)build the combined files.

    ``backend`` defaults to a local process pool of ``jobs`` workers."""
    out = Path(out)
    points = spec.points()
    largest = _validate_first(points)  # before check_grid records this grid in out/sweep.json
    check_grid(out, spec, force)
    todo, done = _pending(out, points, events)
    if on_start:
        on_start(len(points), len(points) - len(todo))
    if todo:
        backend = backend or LocalPoolBackend(jobs)
        if isinstance(backend, LocalPoolBackend):  # every worker holds one point at a time
            check_workers(largest, min(backend.jobs, len(todo)))
        if isinstance(backend, LocalPoolBackend) and backend.jobs > 1 and len(todo) > 1:
            from ..engine import warm_up

            warm_up()  # compile once here, not once per worker (docs/performance.md)
        task = functools.partial(run_point, policies=spec.policies, keep_requests=events)
        with sigterm_as_interrupt():
            for point, result in backend.map_unordered(task, todo):
                done[point.point_id] = _save(out, result)
                if on_point:
                    on_point(point)
    return combine(out, points, done)


def _validate_first(todo: list[Point]) -> int:
    """Load and prepare every scenario (first seed of each) before any simulation, so a bad
    or impossible grid (weights that do not fit, a budget below a request) fails at once;
    the most requests a point has."""
    from prefixbench.system.runner import prepare

    first: dict[tuple, Point] = {}
    for q in todo:
        first.setdefault((q.workload, q.model, q.budget_factor, q.overrides, q.trace), q)
    largest = 0
    for p in first.values():
        with _naming(p):
            largest = max(largest, len(prepare(p.load()).requests))
    return largest


@contextlib.contextmanager
def _naming(p: Point):
    """Prefix a prefixbench error with the grid point it came from."""
    try:
        yield
    except PrefixbenchError as e:
        label = f"grid point {p.model}/{p.workload}/budget {p.budget_factor:g}/seed {p.seed}"
        if p.admission != "paged":
            label += f"/{p.admission}"
        raise type(e)(
            e.what, where=f"{label}: {e.where}" if e.where else label, fix=e.fix
        ) from None


def combine(out: Path, points: list[Point], known: dict | None = None) -> dict[str, Path]:
    """Rebuild runs/agg/prefixes from the finished parts of ``points``, in a stable order;
    ``known`` holds parts already in memory (by point id: runs, prefixes), read or written by
    this sweep, so no part is read twice."""
    known = known or {}
    runs, prefixes = [], []
    for p in points:
        parts = known.get(p.point_id)
        if parts is None:
            runs_p, pre_p, _ = _part_paths(out, p)
            if not is_file(runs_p):
                continue
            parts = (read_part(runs_p, "runs", p), read_part(pre_p, "prefixes", p))
        runs.append(parts[0])
        prefixes.append(parts[1])
    if not runs:
        raise ArtifactError("no finished runs to combine", where=str(out), fix="run the sweep")
    runs_df = pl.concat(runs, how="vertical_relaxed").sort(RUN_KEYS)
    pre_df = pl.concat(prefixes, how="vertical_relaxed").sort([*RUN_KEYS, "prefix_id"])
    meta = {"points": len(runs), "of": len(points)}
    return {
        "runs": write_atomic(runs_df, out / "runs.parquet", "runs", meta),
        "agg": write_atomic(aggregate(runs_df), out / "agg.parquet", "agg", meta),
        "prefixes": write_atomic(pre_df, out / "prefixes.parquet", "prefixes", meta),
    }
