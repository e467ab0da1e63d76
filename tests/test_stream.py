"""The per-request file written as it is produced (io/stream.py): encoded once, in a
background thread, its footer holds the SHA-256 of its column data, and a failed or
abandoned write leaves no file behind."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess

import numpy as np
import polars as pl
import pytest

from prefixbench.errors import ArtifactError
from prefixbench.io.artifacts import DIGEST_KEY, read_metadata
from prefixbench.io.stream import PartWriter


def _frames():
    return [
        pl.DataFrame({"request_id": [0, 1, 2], "policy": ["a", "a", "a"]}),
        pl.DataFrame({"request_id": [0, 1], "policy": ["b", "b"]}),
    ]


def _data_sha256(raw: bytes) -> str:
    end = len(raw) - 8 - int.from_bytes(raw[-8:-4], "little")
    return hashlib.sha256(raw[4:end]).hexdigest()


@pytest.fixture
def plain(monkeypatch):
    monkeypatch.setattr("prefixbench.io.stream.conform", lambda df, kind: df)


def test_the_streamed_file_holds_its_data_digest_and_reads_back(tmp_path, plain):
    w = PartWriter(tmp_path / "requests.parquet", "requests")
    for df in _frames():
        w.add(df)
        assert [p.name for p in w.dir.iterdir()] in ([], ["final.parquet"])  # no parts
    path = w.close({"scenario": {"name": "x"}})
    raw = path.read_bytes()
    meta = read_metadata(path)
    assert meta[DIGEST_KEY] == _data_sha256(raw)
    assert meta["prefixbench.kind"] == "requests"
    assert json.loads(meta["prefixbench.meta"]) == {"scenario": {"name": "x"}}
    assert pl.read_parquet(path).equals(pl.concat(_frames()))  # in order, every row
    assert not w.dir.exists()
    assert [p.name for p in tmp_path.iterdir()] == ["requests.parquet"]


def test_a_failing_encoder_is_one_line_and_leaves_no_file(tmp_path, plain, monkeypatch):
    def full_disk(lf, target, **kw):
        lf.head(1).collect()  # takes a chunk, then fails as polars does on ENOSPC
        raise pl.exceptions.ComputeError("underlying IO error: No space left on device")

    monkeypatch.setattr(pl.LazyFrame, "sink_parquet", full_disk)
    w = PartWriter(tmp_path / "requests.parquet", "requests")
    with pytest.raises(ArtifactError, match="No space left on device"):
        for df in _frames() * 3:
            w.add(df)
        w.close()
    assert list(tmp_path.iterdir()) == []


def test_discarding_stops_the_encoder_and_leaves_no_file(tmp_path, plain):
    w = PartWriter(tmp_path / "requests.parquet", "requests")
    w.add(_frames()[0])
    w.discard()
    assert not w.encoder.thread.is_alive()
    assert list(tmp_path.iterdir()) == []


def test_a_writer_with_no_rows_is_a_bug(tmp_path):
    w = PartWriter(tmp_path / "requests.parquet", "requests")
    with pytest.raises(AssertionError):
        w.close()
    assert list(tmp_path.iterdir()) == []


def test_a_really_full_disk_is_one_line_and_leaves_no_file(tmp_path, plain):
    """The encoder runs in another thread: polars' own ENOSPC (on a 256 KiB tmpfs) comes
    back to the writer as one line, and nothing is left behind."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mnt = tmp_path / "tiny"
    mnt.mkdir()
    r = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mnt)], capture_output=True
    )
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.decode().strip()}")
    try:
        rng = np.random.default_rng(0)
        w = PartWriter(mnt / "requests.parquet", "requests")
        with pytest.raises(ArtifactError, match="No space left|disk is full"):
            for i in range(40):  # about 4 MB of incompressible floats
                n = 12_500
                w.add(pl.DataFrame({"request_id": np.arange(n) + i * n, "x": rng.random(n)}))
            w.close()
        assert list(mnt.iterdir()) == []
    finally:
        subprocess.run(["umount", str(mnt)], check=False)
