"""The per-request file written in parts (io/stream.py): encoded once, its footer holds the
SHA-256 of its column data, and it is the file a second encode with that digest gives."""

from __future__ import annotations

import hashlib

import polars as pl

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


def test_the_streamed_file_holds_its_data_digest_and_reads_back(tmp_path, monkeypatch):
    monkeypatch.setattr("prefixbench.io.stream.conform", lambda df, kind: df)
    w = PartWriter(tmp_path / "requests.parquet", "requests")
    parts = []
    for df in _frames():
        w.add(df)
        parts.append(w.parts[-1])
    # the same parts streamed with the digest known beforehand (two encodes, as it was)
    meta = dict(w.meta)
    pl.scan_parquet(parts).sink_parquet(tmp_path / "plain.parquet", metadata=meta)
    digest = _data_sha256((tmp_path / "plain.parquet").read_bytes())
    pl.scan_parquet(parts).sink_parquet(
        tmp_path / "twice.parquet", metadata={**meta, DIGEST_KEY: digest}
    )
    sinks = []
    real_sink = PartWriter._sink
    monkeypatch.setattr(
        PartWriter, "_sink", lambda self, t, m: sinks.append(t) or real_sink(self, t, m)
    )
    path = w.close()
    assert len(sinks) == 1  # encoded once
    raw = path.read_bytes()
    assert read_metadata(path)[DIGEST_KEY] == digest == _data_sha256(raw)
    assert raw == (tmp_path / "twice.parquet").read_bytes()
    assert pl.read_parquet(path).height == 5
    assert not w.dir.exists()  # the parts are gone
