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
    assert any(k.startswith("recompute b=") for k in kinds)
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


def _ns(x: float) -> int:
    """A JSON microsecond value (three decimals) back to integer nanoseconds."""
    return round(x * 1000)


def test_slices_never_overlap_in_nanoseconds_and_counts_match_the_run(tmp_path):
    """Perfetto drops partially overlapping slices: boundaries are whole nanoseconds, so no
    two slices on a track overlap even by one. Every prefill step, every transfer and every
    decode iteration is a slice: the counts add up to the run's requests and tokens."""
    import polars as pl

    ev = _trace(tmp_path, "--policy", "recompute_on_decode", "--set", "cluster.decode_instances=2")
    tracks = defaultdict(list)
    for e in ev:
        if e["ph"] == "X":
            tracks[(e["pid"], e["tid"])].append((_ns(e["ts"]), _ns(e["ts"]) + _ns(e["dur"])))
    for spans in tracks.values():
        spans.sort()
        for (_, end), (start, _) in zip(spans, spans[1:], strict=False):
            assert start >= end
    req = pl.read_parquet(tmp_path / "o" / "requests.parquet")
    done = req.filter(pl.col("outcome") == "completed")
    x = [e for e in ev if e["ph"] == "X"]
    prefill = [e for e in x if e["name"].startswith("prefill x")]
    assert sum(e["args"]["requests"] for e in prefill) == req.height == 300
    kv = [e for e in x if e["name"] == "kv"]
    assert len(kv) == req.filter(pl.col("transfer_tokens") > 0).height
    # each decode iteration (plain, or carrying recompute chunks) emits one token per
    # sequence in its batch
    iters = [e for e in x if e["name"].startswith("decode b=")]
    mixed = [e for e in x if e["name"].startswith("recompute b=")]
    tokens = sum(e["args"]["batch"] for e in iters + mixed)
    assert tokens == done["output_tokens"].sum()
    assert sum(e["args"]["recompute_tokens"] for e in mixed) == req["recompute_tokens"].sum()


def test_colocated_slice_counts(tmp_path):
    ev = _trace(tmp_path, "--policy", "transfer_per_request", "--set", "cluster.mode=colocated")
    x = [e for e in ev if e["ph"] == "X"]
    steps = [e for e in x if e["name"].startswith("prefill x")]
    assert sum(e["args"]["requests"] for e in steps) <= 300
    assert not any(e["name"] == "kv" for e in x)  # no link in colocated mode


def _run_timeline(tmp_path, target):
    return CliRunner(env={"COLUMNS": "120"}).invoke(
        app,
        ["run", "--policy", "transfer_per_request", "--set", "run.requests=50",
         "--set", "run.warmup_requests=5", "--timeline", str(target), "--out", str(tmp_path / "o")],
    )  # fmt: skip


def test_timeline_into_a_directory_is_one_line(tmp_path):
    r = _run_timeline(tmp_path, tmp_path)
    assert r.exit_code != 0 and "directory" in r.stderr
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_timeline_in_a_missing_unwritable_place_is_one_line(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    r = _run_timeline(tmp_path, blocker / "sub" / "tl.json")  # a parent that is a file
    assert r.exit_code != 0 and "cannot write" in r.stderr
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_timeline_full_disk_leaves_no_temp_file(tmp_path, monkeypatch):
    import errno

    from prefixbench.engine import recorder as rec

    def full(*a, **k):
        raise OSError(errno.ENOSPC, "No space left on device")

    real = rec.os.fdopen

    class Full:
        def __init__(self, fd, mode):
            self.f = real(fd, mode)

        def __enter__(self):
            return self

        def __exit__(self, *a):
            self.f.close()

        write = full

    monkeypatch.setattr(rec.os, "fdopen", Full)
    out = tmp_path / "tl"
    out.mkdir()
    r = _run_timeline(tmp_path, out / "tl.json")
    assert r.exit_code != 0 and "No space left" in r.stderr
    assert "Traceback" not in r.stderr
    assert list(out.iterdir()) == []  # no temp file left, no partial trace
