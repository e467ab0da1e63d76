"""Timeline export: a well-formed Chrome/Perfetto trace with sane, non-overlapping slices."""

from __future__ import annotations

import json
from collections import defaultdict

from typer.testing import CliRunner

from prefixbench.cli import app


def _trace(tmp_path, *args):
    path = tmp_path / "tl.json"
    r = CliRunner(env={"COLUMNS": "120"}).invoke(
        app,
        [
            "run",
            *args,
            "--set",
            "run.requests=300",
            "--set",
            "run.warmup_requests=30",
            "--timeline",
            str(path),
            "--out",
            str(tmp_path / "o"),
        ],
    )
    assert r.exit_code == 0, r.stderr
    return json.loads(path.read_text())["traceEvents"]


def test_trace_has_a_track_per_instance_and_link(tmp_path):
    ev = _trace(tmp_path, "--policy", "recompute_on_decode", "--set", "cluster.decode_instances=2")
    names = {e["args"]["name"] for e in ev if e["ph"] == "M" and e["name"] == "thread_name"}
    assert {"prefill 0", "decode 0", "decode 1"} <= names
    assert any(n.startswith("p0->d") for n in names)
    kinds = {e["name"] for e in ev if e["ph"] == "X"}
    assert any(k.startswith("prefill x") for k in kinds)
    assert any(k.startswith("decode b=") for k in kinds)
    assert "prefix recompute (batch stalled)" in kinds
    assert any(e["ph"] == "C" and "kv_used_gb" in e["args"] for e in ev)


def test_slices_on_a_track_never_overlap(tmp_path):
    ev = _trace(tmp_path, "--policy", "replicate_all_lru")
    tracks = defaultdict(list)
    for e in ev:
        if e["ph"] == "X":
            assert e["dur"] >= 0 and e["ts"] >= 0
            tracks[(e["pid"], e["tid"])].append((e["ts"], e["ts"] + e["dur"]))
    for spans in tracks.values():
        spans.sort()
        for (_, end), (start, _) in zip(spans, spans[1:], strict=False):
            assert start >= end - 1e-6


def test_colocated_timeline(tmp_path):
    ev = _trace(tmp_path, "--policy", "transfer_per_request", "--set", "cluster.mode=colocated")
    assert any(e["ph"] == "X" and e["name"].startswith("prefill x") for e in ev)
