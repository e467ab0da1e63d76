"""A per-request artifact written in parts: each policy's rows go to disk as soon as they
exist, and the parts are streamed into one Parquet file at the end, so a large run never
holds every policy's table at once (docs/performance.md "Large runs").

The finished file is the artifact ``write_atomic`` writes (the same kind, schema version,
metadata and data digest, io/artifacts.py): the parts are encoded once to learn the data
bytes and once more with their digest in the footer, streaming both times, and the file is
renamed into place only when complete.
"""

from __future__ import annotations

import hashlib
import json
import mmap
import os
import shutil
import tempfile
from pathlib import Path

import polars as pl

from prefixbench.errors import ArtifactError
from prefixbench.io.artifacts import _UMASK, DIGEST_KEY, SCHEMA_VERSION, conform


def _data_digest(path: Path) -> str:
    """SHA-256 of a Parquet file's column data (between ``PAR1`` and the footer), read
    through a memory map rather than into memory."""
    with open(path, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as m:
        size = len(m)
        end = size - 8 - int.from_bytes(m[size - 8 : size - 4], "little")
        h = hashlib.sha256()
        for at in range(4, end, 1 << 24):
            h.update(m[at : min(at + (1 << 24), end)])
        return h.hexdigest()


class PartWriter:
    """``add`` frames of artifact ``kind`` one after another; ``close`` writes ``path``."""

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
        self.parts: list[Path] = []

    def add(self, df: pl.DataFrame) -> None:
        part = self.dir / f"part-{len(self.parts):04d}.parquet"
        self._guard(lambda: conform(df, self.kind).write_parquet(part, compression="lz4"))
        self.parts.append(part)

    def _sink(self, target: Path, metadata: dict) -> None:
        pl.scan_parquet(self.parts).sink_parquet(target, metadata=metadata)

    def close(self, meta: dict | None = None) -> Path:
        """Stream the parts into ``path`` (atomically, with ``meta`` as write_atomic's) and
        remove them."""
        if meta:
            self.meta["prefixbench.meta"] = json.dumps(meta, sort_keys=True)
        try:
            if not self.parts:
                raise AssertionError("no rows were added")  # a bug, not user error
            probe = self.dir / "probe.parquet"
            self._guard(lambda: self._sink(probe, self.meta))
            meta = {**self.meta, DIGEST_KEY: _data_digest(probe)}
            tmp = self.dir / "final.parquet"
            self._guard(lambda: self._sink(tmp, meta))
            if _data_digest(tmp) != meta[DIGEST_KEY]:  # never seen: no digest, not a wrong one
                self._guard(lambda: self._sink(tmp, self.meta))
            os.chmod(tmp, 0o666 & ~_UMASK)
            self._guard(lambda: os.replace(tmp, self.path))
        finally:
            self.discard()
        return self.path

    def discard(self) -> None:
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
