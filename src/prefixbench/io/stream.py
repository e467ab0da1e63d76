"""A per-request artifact written as it is produced: each policy's rows are handed, chunk
by chunk, to one Parquet encoder running in a background thread, so a large run never holds
every policy's table at once and encodes each row once (docs/performance.md "Large runs").

The finished file is the artifact ``write_atomic`` writes (the same kind, schema version,
metadata and data digest, io/artifacts.py), compressed with LZ4 instead of zstd (about a
fifth larger, half the encoding time; the data read back is the same): the chunks are
streamed into one file with a placeholder for the digest that is then overwritten in place
with the SHA-256 of the column data, and the file is renamed into place only when complete.
"""

from __future__ import annotations

import hashlib
import json
import mmap
import os
import queue
import shutil
import tempfile
import threading
from pathlib import Path

import polars as pl

from prefixbench.errors import ArtifactError
from prefixbench.io.artifacts import _PLACEHOLDER, _UMASK, DIGEST_KEY, SCHEMA_VERSION, conform

COMPRESSION = "lz4"  # zstd took twice the CPU for a file a sixth smaller (docs/performance.md)
_END, _ABORT = object(), object()  # what the encoder's queue carries besides chunks


def _data_end(m) -> int:
    """Where a Parquet file's column data ends (its footer begins)."""
    size = len(m)
    return size - 8 - int.from_bytes(m[size - 8 : size - 4], "little")


def _digest_of(m, end: int) -> str:
    h = hashlib.sha256()
    for at in range(4, end, 1 << 24):
        h.update(m[at : min(at + (1 << 24), end)])
    return h.hexdigest()


def _patch_digest(path: Path) -> bool:
    """Overwrite the digest placeholder in ``path``'s footer with the SHA-256 of its column
    data, in place (io/artifacts.py ``encode_with_digest``: the data bytes do not depend on
    the footer, which has no checksum); False, the file untouched, when the placeholder is
    not found exactly once in the footer."""
    with open(path, "r+b") as fh, mmap.mmap(fh.fileno(), 0) as m:
        if len(m) < 12 or m[:4] != b"PAR1" or m[-4:] != b"PAR1":
            return False
        end, mark = _data_end(m), _PLACEHOLDER.encode()
        at = m.find(mark, max(end, 4))
        if end < 4 or at < 0 or m.find(mark, at + 1) >= 0:
            return False
        m[at : at + len(mark)] = _digest_of(m, end).encode()
        m.flush()
    return True


class _Aborted(Exception):
    """The writer was discarded while its encoder ran."""


class _Encoder:
    """One ``sink_parquet`` in a background thread, fed chunks through a one-slot queue:
    ``put`` blocks while the encoder is a chunk behind, so at most three chunks are alive
    (the one being built, the one waiting, the one being encoded)."""

    def __init__(self, target: Path, schema: pl.Schema, metadata):
        self.q: queue.Queue = queue.Queue(maxsize=1)
        self.schema = schema
        self.error: BaseException | None = None
        from polars.io.plugins import register_io_source

        lf = register_io_source(self._chunks, schema=schema)
        self.thread = threading.Thread(
            target=self._run, args=(lf, target, metadata), name="prefixbench-parquet", daemon=True
        )
        self.thread.start()

    def _chunks(self, with_columns, predicate, n_rows, batch_size):
        while True:
            item = self.q.get()
            if item is _END:
                return
            if item is _ABORT:
                raise _Aborted
            yield item if with_columns is None else item.select(with_columns)

    def _run(self, lf: pl.LazyFrame, target: Path, metadata) -> None:
        try:
            lf.sink_parquet(target, compression=COMPRESSION, metadata=metadata)
        except BaseException as e:  # reported to the writer's thread by put / finish
            self.error = e

    def put(self, item) -> None:
        """Hand ``item`` to the encoder; raises its error if it has failed."""
        while self.error is None and self.thread.is_alive():
            try:
                self.q.put(item, timeout=0.05)
                return
            except queue.Full:
                continue
        self._raise()

    def finish(self) -> None:
        self.put(_END)
        self.thread.join()
        if self.error is not None:
            raise self.error

    def abort(self) -> None:
        """Stop the encoder (its file is left half-written, to be removed)."""
        if self.thread.is_alive():
            try:
                while True:  # drop a waiting chunk so the abort fits in the slot
                    self.q.get_nowait()
            except queue.Empty:
                pass
            try:
                self.q.put(_ABORT, timeout=5)
            except queue.Full:
                pass
            self.thread.join(timeout=30)

    def _raise(self) -> None:
        if self.error is not None:
            raise self.error
        if not self.thread.is_alive():
            raise RuntimeError("the Parquet encoder stopped")  # a bug, not user error


class PartWriter:
    """``add`` frames of artifact ``kind`` one after another; ``close`` finishes ``path``."""

    def __init__(self, path: Path, kind: str):
        self.path, self.kind = Path(path), kind
        self.meta = {"prefixbench.kind": kind, "prefixbench.schema_version": str(SCHEMA_VERSION)}
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.dir = Path(tempfile.mkdtemp(prefix=f".{self.path.name}.", dir=self.path.parent))
        except OSError as e:
            raise ArtifactError(
                f"cannot write here ({e.strerror})",
                where=str(self.path.parent),
                fix="choose a writable --out directory",
            ) from None
        self.tmp = self.dir / "final.parquet"
        self.encoder: _Encoder | None = None
        self.rows = 0

    def add(self, df: pl.DataFrame) -> None:
        df = conform(df, self.kind)
        if self.encoder is None:  # the footer's metadata is read when the data is written
            self.encoder = _Encoder(self.tmp, df.schema, self._footer)
        elif df.schema != self.encoder.schema:
            raise AssertionError("a chunk's columns differ from the first's")  # a bug
        self._guard(lambda: self.encoder.put(df))
        self.rows += df.height

    def _footer(self, _ctx=None) -> dict:
        return {**self.meta, DIGEST_KEY: _PLACEHOLDER}

    def close(self, meta: dict | None = None) -> Path:
        """Finish ``path`` (atomically, with ``meta`` as write_atomic's) and remove the
        temporary folder."""
        if meta:
            self.meta["prefixbench.meta"] = json.dumps(meta, sort_keys=True)
        try:
            if self.encoder is None:
                raise AssertionError("no rows were added")  # a bug, not user error
            self._guard(self.encoder.finish)
            if not self._patched(self.tmp):  # never seen: no digest, not a wrong one
                self._guard(self._without_digest)
            os.chmod(self.tmp, 0o666 & ~_UMASK)
            self._guard(lambda: os.replace(self.tmp, self.path))
        finally:
            self.discard()
        return self.path

    def _without_digest(self) -> None:
        plain = self.dir / "plain.parquet"
        pl.scan_parquet(self.tmp).sink_parquet(plain, compression=COMPRESSION, metadata=self.meta)
        os.replace(plain, self.tmp)

    def _patched(self, tmp: Path) -> bool:
        try:
            return _patch_digest(tmp)
        except (OSError, ValueError):  # ValueError: mmap of an empty file
            return False

    def discard(self) -> None:
        if self.encoder is not None:
            self.encoder.abort()
        shutil.rmtree(self.dir, ignore_errors=True)

    def _guard(self, step) -> None:
        from prefixbench.io.artifacts import _io_reason

        try:
            step()
        except (OSError, pl.exceptions.PolarsError) as e:
            self.discard()
            raise ArtifactError(
                f"cannot write file ({_io_reason(e, self.path.parent)})",
                where=str(self.path),
                fix="free some disk space or choose another --out; any previous file there "
                "is unchanged",
            ) from None
