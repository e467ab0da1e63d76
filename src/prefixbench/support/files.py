"""Reading user files without hanging or filling memory.

A path given as a scenario, grid, config or trace may name something that is not a file:
a directory, a FIFO (opening it blocks until a writer comes), a device (``/dev/zero`` never
ends), or a symlink loop. ``check_regular`` refuses all of these with one line before
anything is opened, and ``read_capped`` also refuses a file too large for what it holds.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from prefixbench.errors import PrefixbenchError

MAX_TEXT_BYTES = 16 * 1024 * 1024  # a scenario, grid or config.json is a few KB
INT_DIGITS_HINT = "numbers here fit in 64 bits (at most 19 digits)"


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def check_regular(
    path: str | os.PathLike[str], error: type[PrefixbenchError], what: str
) -> os.stat_result:
    """``os.stat`` of ``path`` if it is a regular file (after symlinks), else one error line."""
    where = str(path)
    try:
        st = os.stat(path)
    except OSError as e:
        reason = e.strerror or type(e).__name__
        if isinstance(e, FileNotFoundError):
            reason = "file not found"
        raise error(
            f"cannot read {what} ({reason})",
            where=where,
            fix="check that the path names a readable file",
        ) from None
    except ValueError:  # an embedded NUL byte
        raise error(f"not a valid {what} path", where=where, fix="check the path") from None
    if not stat.S_ISREG(st.st_mode):
        raise error(
            f"cannot read {what}: it is {_kind(st.st_mode)}, not a regular file",
            where=where,
            fix=f"give the path of a {what}",
        )
    return st


def read_capped(
    path: str | os.PathLike[str],
    error: type[PrefixbenchError],
    what: str,
    cap: int = MAX_TEXT_BYTES,
) -> bytes:
    """The bytes of a regular file of at most ``cap`` bytes (one error line otherwise)."""
    st = check_regular(path, error, what)
    if st.st_size > cap:
        raise error(
            f"the {what} is {st.st_size:,} bytes, more than the {cap:,} allowed",
            where=str(path),
            fix=f"check the path: a {what} is a small text file",
        )
    try:
        with open(path, "rb") as fh:
            data = fh.read(cap + 1)
    except OSError as e:
        raise error(
            f"cannot read {what} ({e.strerror or type(e).__name__})",
            where=str(path),
            fix="check that the path names a readable file",
        ) from None
    if len(data) > cap:  # it grew while we read it
        raise error(
            f"the {what} is larger than {cap:,} bytes", where=str(path), fix="check the path"
        )
    return data


def exists(path: str | os.PathLike[str]) -> bool:
    """``Path.exists`` that answers False for a name the file system cannot hold (too long,
    a NUL byte) instead of raising."""
    try:
        return os.path.lexists(path)  # a symlink loop exists (and is refused when read)
    except (OSError, ValueError):
        return False


def is_file(path: str | os.PathLike[str]) -> bool:
    """``Path.is_file`` that answers False for a name the file system cannot hold."""
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except (OSError, ValueError):
        return False


def write_atomic(path: str | os.PathLike[str], text: str, error_cls: type) -> Path:
    """``text`` written to ``path`` through a temporary file in its folder and a rename, so a
    reader never sees half a file; a failure raises ``error_cls`` with the path."""
    import tempfile

    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        mask = os.umask(0)
        os.umask(mask)
        os.chmod(tmp, 0o666 & ~mask)
        os.replace(tmp, path)
    except OSError as e:
        if "tmp" in locals():
            Path(tmp).unlink(missing_ok=True)
        raise error_cls(
            f"cannot write {path}: {e.strerror or e}", where=str(path), fix="check the folder"
        ) from None
    return path
