"""A timeline recorder: what each instance and link did, exported as a Chrome/Perfetto trace.

The engine calls ``slice`` (a busy interval), ``segment`` (k closed-form decode iterations of
a fixed batch, expanded here into one slice per iteration) and ``counter`` (a sampled
value). ``to_chrome`` writes the JSON trace-event format that ui.perfetto.dev and
chrome://tracing open: one process per role, one thread (track) per instance or link
channel, times in microseconds.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from ..costmodel import series_time

MAX_ITERATION_SLICES = 200_000  # beyond this, segments stay one slice each (file size)


class Recorder:
    def __init__(self, label: str = "") -> None:
        self.label = label
        self.slices: list[tuple[str, str, str, float, float, dict]] = []
        self.segments: list[tuple[str, str, float, tuple, int, int]] = []
        self.counters: list[tuple[str, str, str, float, float]] = []

    def slice(
        self, role: str, track: str, name: str, t0: float, t1: float, args: dict | None = None
    ) -> None:
        self.slices.append((role, track, name, t0, t1, args or {}))

    def segment(self, role: str, track: str, t0: float, coeffs: tuple, k: int, batch: int) -> None:
        self.segments.append((role, track, t0, coeffs, k, batch))

    def counter(self, role: str, track: str, name: str, t: float, value: float) -> None:
        self.counters.append((role, track, name, t, value))

    def events(self, pid_base: int = 0) -> list[dict]:
        """Chrome trace events (``ph`` X slices, C counters, M names)."""
        pids: dict[str, int] = {}
        tids: dict[tuple[str, str], int] = {}
        out: list[dict] = []
        prefix = f"{self.label}: " if self.label else ""

        def ids(role: str, track: str) -> tuple[int, int]:
            if role not in pids:
                pids[role] = pid_base + len(pids) + 1
                out.append(
                    {
                        "ph": "M",
                        "name": "process_name",
                        "pid": pids[role],
                        "args": {"name": prefix + role},
                    }
                )
            key = (role, track)
            if key not in tids:
                tids[key] = len(tids) + 1
                out.append(
                    {
                        "ph": "M",
                        "name": "thread_name",
                        "pid": pids[role],
                        "tid": tids[key],
                        "args": {"name": track},
                    }
                )
            return pids[role], tids[key]

        us = 1e6
        for role, track, name, t0, t1, args in self.slices:
            pid, tid = ids(role, track)
            out.append(
                {
                    "ph": "X",
                    "name": name,
                    "pid": pid,
                    "tid": tid,
                    "ts": t0 * us,
                    "dur": (t1 - t0) * us,
                    "args": args,
                }
            )
        total = sum(k for *_, k, _ in self.segments)
        for role, track, t0, coeffs, k, batch in self.segments:
            pid, tid = ids(role, track)
            if total <= MAX_ITERATION_SLICES:
                prev = t0
                for j in range(1, k + 1):
                    t = t0 + series_time(coeffs, j)
                    out.append(
                        {
                            "ph": "X",
                            "name": f"decode b={batch}",
                            "pid": pid,
                            "tid": tid,
                            "ts": prev * us,
                            "dur": (t - prev) * us,
                            "args": {"batch": batch},
                        }
                    )
                    prev = t
            else:
                t1 = t0 + series_time(coeffs, k)
                out.append(
                    {
                        "ph": "X",
                        "name": f"decode x{k} b={batch}",
                        "pid": pid,
                        "tid": tid,
                        "ts": t0 * us,
                        "dur": (t1 - t0) * us,
                        "args": {"iterations": k, "batch": batch},
                    }
                )
        for role, track, name, t, value in self.counters:
            pid, _ = ids(role, track)
            out.append(
                {
                    "ph": "C",
                    "name": f"{track} {name}",
                    "pid": pid,
                    "ts": t * us,
                    "args": {name: value},
                }
            )
        return out


def write_chrome_trace(recorders: list[Recorder], path: Path) -> Path:
    """One trace file holding every recorder (e.g. one per policy), written atomically."""
    events: list[dict] = []
    for i, r in enumerate(recorders):
        events.extend(r.events(pid_base=100 * i))
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    with os.fdopen(fd, "w") as f:
        json.dump({"traceEvents": events, "displayTimeUnit": "ms"}, f)
    os.replace(tmp, path)
    return path
