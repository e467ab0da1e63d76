"""Timelines: the engine's event log as a Chrome/Perfetto trace (ui.perfetto.dev,
chrome://tracing).

Pass a ``Recorder`` to ``simulate``/``simulate_colocated``: the engine then logs every
prefill step, KV transfer, decode segment, recompute stall, colocated step and memory
counter into arrays (engine/timeline.py) and hands them to the recorder. ``events`` turns
them into trace events: one process per role (prefill, link, decode, or colocated), one
thread (track) per instance or link channel. Times are whole nanoseconds: ``ts`` and
``dur`` are microseconds written with exactly three decimals, from integer-nanosecond
boundaries, so slices that touch never overlap after rounding (Perfetto's JSON importer
drops partially overlapping slices). Decode segments become one slice per iteration up to
``MAX_ITERATION_SLICES`` per recorder, one slice per segment beyond that (file size).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import numpy as np

from ..errors import PrefixbenchError
from . import layout as L
from .timeline import expand

MAX_ITERATION_SLICES = 200_000


class TimelineError(PrefixbenchError):
    """The timeline file cannot be written."""


class Recorder:
    """Collects one run's timeline log (the engine calls ``attach``)."""

    def __init__(self, label: str = "") -> None:
        self.label = label
        self.mode = ""
        self.shape = (0, 0, 0)
        self.tlf = np.zeros(0)
        self.tli = np.zeros(0, dtype=np.int64)
        self.fp = np.zeros(0)

    def attach(self, mode: str, shape, tlf: np.ndarray, tli: np.ndarray, fp: np.ndarray) -> None:
        self.mode, self.shape = mode, tuple(int(x) for x in shape)
        self.tlf, self.tli, self.fp = tlf, tli, fp

    @property
    def records(self) -> int:
        return self.tli.shape[0] // L.NTL_I

    def slices(self) -> tuple[np.ndarray, np.ndarray]:
        """(ints, ns): one row per slice or counter sample: (kind, track, a, b, c, iteration)
        and (start, end) in integer nanoseconds."""
        m = self.records
        kinds = self.tli[0 :: L.NTL_I]
        iters = self.tli[3 :: L.NTL_I][kinds == L.REC_DECODE]
        per_iteration = int(iters.sum()) <= MAX_ITERATION_SLICES
        size = m + (int(iters.sum()) - iters.shape[0] if per_iteration else 0)
        out_i = np.zeros(6 * size, dtype=np.int64)
        out_ns = np.zeros(2 * size, dtype=np.int64)
        fp = np.zeros(max(L.NFP, self.fp.shape[0]))
        fp[: self.fp.shape[0]] = self.fp
        k = expand(self.tlf, self.tli, m, fp, per_iteration, out_i, out_ns)
        return out_i[: 6 * k].reshape(k, 6), out_ns[: 2 * k].reshape(k, 2)

    def events(self, pid_base: int = 0) -> list[str]:
        """Chrome trace events, each already a JSON object string."""
        return _events(self, pid_base)


def _us(ns: int) -> str:
    """Integer nanoseconds as microseconds with exactly three decimals (a JSON number)."""
    sign = "-" if ns < 0 else ""
    ns = abs(ns)
    return f"{sign}{ns // 1000}.{ns % 1000:03d}"


def _track(rec: Recorder, kind: int, track: int) -> tuple[str, str]:
    """(role, track name) of a record."""
    P, D, C = rec.shape
    if rec.mode == "colocated":
        return "colocated", f"instance {track}"
    if kind in (L.REC_PREFILL, L.REC_QUEUE):
        return "prefill", f"prefill {track}"
    if kind == L.REC_LINK:
        c, pd = track % C, track // C
        return "link", f"p{pd // D}->d{pd % D} ch{c}"
    return "decode", f"decode {track}"


def _name(rec: Recorder, row, collapsed: bool) -> tuple[str, str]:
    """(slice name, args JSON) of a slice."""
    kind, _, a, b, c, j = (int(x) for x in row)
    if kind == L.REC_PREFILL:
        return f"prefill x{a}", f'{{"new_tokens":{b},"requests":{a}}}'
    if kind == L.REC_LINK:
        return "kv", f'{{"bytes":{b},"request":{a}}}'
    if kind == L.REC_DECODE:
        if collapsed:
            return f"decode x{b} b={a}", f'{{"iterations":{b},"batch":{a}}}'
        return f"decode b={a}", f'{{"batch":{a},"iteration":{j}}}'
    if kind == L.REC_STALL:
        return "prefix recompute (batch stalled)", "{}"
    if kind == L.REC_CO_PREFILL:
        return f"prefill x{a} (decodes stalled)", f'{{"tokens":{b},"requests":{a}}}'
    return f"mixed step b={a} +{b} prefill", f'{{"batch":{a},"prefill_tokens":{b}}}'


def _json_str(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _events(rec: Recorder, pid_base: int) -> list[str]:
    rows, ns = rec.slices()
    kinds = rec.tli[0 :: L.NTL_I]
    iters = rec.tli[3 :: L.NTL_I][kinds == L.REC_DECODE]
    collapsed = int(iters.sum()) > MAX_ITERATION_SLICES
    prefix = f"{rec.label}: " if rec.label else ""
    pids: dict[str, int] = {}
    tids: dict[tuple[str, str], int] = {}
    out: list[str] = []
    gb = float(rec.fp[L.FP_DC + L.C_KV]) / 1e9 if rec.fp.shape[0] > L.FP_DC else 0.0

    def ids(role: str, track: str) -> tuple[int, int]:
        if role not in pids:
            pids[role] = pid = pid_base + len(pids) + 1
            out.append(
                f'{{"ph":"M","name":"process_name","pid":{pid},'
                f'"args":{{"name":{_json_str(prefix + role)}}}}}'
            )
        key = (role, track)
        if key not in tids:
            tids[key] = tid = len(tids) + 1
            out.append(
                f'{{"ph":"M","name":"thread_name","pid":{pids[role]},"tid":{tid},'
                f'"args":{{"name":{_json_str(track)}}}}}'
            )
        return pids[role], tids[key]

    for row, (t0, t1) in zip(rows.tolist(), ns.tolist(), strict=True):
        kind = row[0]
        role, track = _track(rec, kind, row[1])
        pid, tid = ids(role, track)
        if kind == L.REC_KV:
            out.append(
                f'{{"ph":"C","name":"{track} kv_used_gb","pid":{pid},"ts":{_us(t0)},'
                f'"args":{{"kv_used_gb":{row[2] * gb!r}}}}}'
            )
            out.append(
                f'{{"ph":"C","name":"{track} replica_kv_gb","pid":{pid},"ts":{_us(t0)},'
                f'"args":{{"replica_kv_gb":{row[3] * gb!r}}}}}'
            )
        elif kind == L.REC_QUEUE:
            out.append(
                f'{{"ph":"C","name":"{track} queued","pid":{pid},"ts":{_us(t0)},'
                f'"args":{{"queued":{row[2]}}}}}'
            )
        else:
            name, args = _name(rec, row, collapsed)
            out.append(
                f'{{"ph":"X","name":{_json_str(name)},"pid":{pid},"tid":{tid},'
                f'"ts":{_us(t0)},"dur":{_us(t1 - t0)},"args":{args}}}'
            )
    return out


def write_chrome_trace(recorders: list[Recorder], path: Path) -> Path:
    """One trace file holding every recorder (e.g. one per policy), written atomically: a
    temporary file next to the target, renamed over it; on any error the temporary file is
    removed and a one-line TimelineError says what went wrong."""
    path = Path(path)
    where = "--timeline"
    if path.is_dir():
        raise TimelineError(f"{path} is a directory", where=where, fix="give a file name")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as e:
        raise TimelineError(
            f"cannot write {path}: {e.strerror or e}", where=where, fix="pick a writable folder"
        ) from None
    try:
        with os.fdopen(fd, "w") as f:
            f.write('{"displayTimeUnit":"ns","traceEvents":[\n')
            first = True
            for i, r in enumerate(recorders):
                for ev in r.events(pid_base=100 * i):
                    if not first:
                        f.write(",\n")
                    f.write(ev)
                    first = False
            f.write("\n]}\n")
        os.replace(tmp, path)
    except OSError as e:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise TimelineError(
            f"cannot write {path}: {e.strerror or e}",
            where=where,
            fix="free disk space or pick another folder",
        ) from None
    return path
