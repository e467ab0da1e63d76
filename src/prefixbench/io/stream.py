"""A per-request artifact written in parts: each policy's rows go to disk as soon as they
exist, and the parts are streamed into one Parquet file at the end, so a large run never
holds every policy's table at once (docs/performance.md "Large runs").

The finished file is the artifact ``write_atomic`` writes (the same kind, schema version,
metadata and data digest, io/artifacts.py): the parts are streamed into one file once, with
a placeholder for the digest that is then overwritten in place with the SHA-256 of the
column data, and the file is renamed into place only when complete.
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
from prefixbench.io.artifacts import _PLACEHOLDER, _UMASK, DIGEST_KEY, SCHEMA_VERSION, conform


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
            tmp = self.dir / "final.parquet"  # encoded once: the digest patched in after
            self._guard(lambda: self._sink(tmp, {**self.meta, DIGEST_KEY: _PLACEHOLDER}))
            if not self._patched(tmp):  # never seen: no digest, not a wrong one
                self._guard(lambda: self._sink(tmp, self.meta))
            os.chmod(tmp, 0o666 & ~_UMASK)
            self._guard(lambda: os.replace(tmp, self.path))
        finally:
            self.discard()
        return self.path

    def _patched(self, tmp: Path) -> bool:
        try:
            return _patch_digest(tmp)
        except (OSError, ValueError):  # ValueError: mmap of an empty file
            return False

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
