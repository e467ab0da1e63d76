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
from .trace_json import MAX_FIELD, SEGMENT_WHOLE, TEMPLATES, template_bytes, write_events

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
        self.per_iteration = True

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
        per_iteration = self.per_iteration = int(iters.sum()) <= MAX_ITERATION_SLICES
        size = m + (int(iters.sum()) - iters.shape[0] if per_iteration else 0)
        out_i = np.zeros(6 * size, dtype=np.int64)
        out_ns = np.zeros(2 * size, dtype=np.int64)
        fp = np.zeros(max(L.NFP, self.fp.shape[0]))
        fp[: self.fp.shape[0]] = self.fp
        k = expand(self.tlf, self.tli, m, fp, per_iteration, out_i, out_ns)
        return out_i[: 6 * k].reshape(k, 6), out_ns[: 2 * k].reshape(k, 2)

    def events(self, pid_base: int = 0) -> tuple[list[str], bytes]:
        """Chrome trace events: the process and track names (JSON object strings), and
        every slice and counter sample, each preceded by ``,\\n`` (compiled writer)."""
        names, body = self.event_buffer(pid_base)
        return names, body.tobytes()

    def event_buffer(self, pid_base: int = 0) -> tuple[list[str], np.ndarray]:
        """``events`` with the text as the writer's byte array (no copy into ``bytes``)."""
        rows, ns = self.slices()
        m = rows.shape[0]
        if m == 0:
            return [], np.zeros(0, dtype=np.uint8)
        kinds, tracks = rows[:, 0], rows[:, 1]
        role = _roles(self.mode, kinds)
        pid = pid_base + role + 1
        tid = tracks + 1
        tpl_id = kinds.copy()
        if not self.per_iteration:
            tpl_id[kinds == L.REC_DECODE] = SEGMENT_WHOLE
        tpl, off = template_bytes()
        fields = np.array([sum(0x11 <= c <= 0x1A for c in t.encode()) for t in TEMPLATES])
        size = int((off[1:] - off[:-1] + 2 + fields * MAX_FIELD)[tpl_id].sum())
        buf = np.empty(size, dtype=np.uint8)
        kvb = int(round(float(self.fp[L.FP_DC + L.C_KV]))) if self.fp.shape[0] > L.FP_DC else 0
        flat_i, flat_ns = (
            np.ascontiguousarray(rows).reshape(-1),
            np.ascontiguousarray(ns).reshape(-1),
        )
        k = write_events(tpl, off, tpl_id, flat_i, flat_ns, pid, tid, kvb, buf)
        return self._names(pid_base, role, tracks), buf[:k]

    def _names(self, pid_base: int, role: np.ndarray, tracks: np.ndarray) -> list[str]:
        prefix = f"{self.label}: " if self.label else ""
        roles = ROLES[self.mode]
        out = []
        width = int(tracks.max()) + 1  # (role, track) pairs as one small key: a bincount
        seen = np.flatnonzero(np.bincount(role * width + tracks)).tolist()
        for r in sorted({k // width for k in seen}):
            out.append(
                f'{{"ph":"M","name":"process_name","pid":{pid_base + r + 1},'
                f'"args":{{"name":{_json_str(prefix + roles[r])}}}}}'
            )
        for r, t in (divmod(k, width) for k in seen):  # sorted by role, then track
            out.append(
                f'{{"ph":"M","name":"thread_name","pid":{pid_base + r + 1},"tid":{t + 1},'
                f'"args":{{"name":{_json_str(self._track_name(r, t))}}}}}'
            )
        return out

    def _track_name(self, role: int, track: int) -> str:
        name = ROLES[self.mode][role]
        if name == "colocated":
            return f"instance {track}"
        if name == "link":
            _, D, C = self.shape
            pd, c = divmod(track, C)
            return f"p{pd // D}->d{pd % D} ch{c}"
        return f"{name} {track}"


ROLES = {"disaggregated": ("prefill", "link", "decode"), "colocated": ("colocated",)}


def _roles(mode: str, kinds: np.ndarray) -> np.ndarray:
    """Process index of each record: prefill, link, decode (colocated: one process)."""
    if mode == "colocated":
        return np.zeros_like(kinds)
    role = np.full_like(kinds, 2)
    role[(kinds == L.REC_PREFILL) | (kinds == L.REC_QUEUE)] = 0
    role[kinds == L.REC_LINK] = 1
    return role


def _json_str(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


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
        with os.fdopen(fd, "wb") as f:
            parts = [r.event_buffer(pid_base=100 * i) for i, r in enumerate(recorders)]
            names = [n for ns, _ in parts for n in ns]
            f.write(b'{"displayTimeUnit":"ns","traceEvents":[\n')
            f.write(",\n".join(names).encode())
            for _, body in parts:
                f.write(body)
            f.write(b"\n]}\n")
        os.chmod(tmp, 0o666 & ~_umask())
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
