"""The Parquet contract under damage: random bytes, truncation, bit flips, wrong schemas,
and a disk that fills up mid-write.

read_artifact either returns exactly what was written or raises one clear ArtifactError;
it never returns different numbers and never lets a polars error (or Rust panic) escape.
write_atomic either replaces the file completely or leaves the previous one untouched.
"""

from __future__ import annotations

import errno
import json
import os
import stat
import subprocess
from pathlib import Path

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from polars.testing import assert_frame_equal
from robustness_util import assert_clear

from prefixbench.errors import ArtifactError, PrefixbenchError
from prefixbench.io.artifacts import (
    _FRACTIONS,
    DIGEST_KEY,
    SCHEMA_VERSION,
    SCHEMAS,
    artifact_meta,
    read_artifact,
    write_atomic,
)

FUZZ = {"deadline": None, "suppress_health_check": list(HealthCheck)}
KIND = "summary"


def _frame(n: int = 4) -> pl.DataFrame:
    cols = {}
    for i, (c, t) in enumerate(SCHEMAS[KIND].items()):
        if t == pl.Float64:  # fractions stay in [0, 1] (read_artifact checks them)
            cols[c] = [k / (7 * n) if c in _FRACTIONS else i + k / 7 for k in range(n)]
        elif t == pl.Int64:
            cols[c] = [i * 1000 + k for k in range(n)]
        elif t == pl.Utf8:
            cols[c] = [f"{c}-{k}" for k in range(n)]
        else:
            cols[c] = [k % 2 == 0 for k in range(n)]
    return pl.DataFrame(cols)


@pytest.fixture(scope="module")
def art(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, bytes, pl.DataFrame]:
    d = tmp_path_factory.mktemp("artifacts")
    path = write_atomic(_frame(), d / "good.parquet", KIND, {"note": "fixture"})
    return d, path.read_bytes(), read_artifact(path, KIND)


def _read_same_or_refuse(path: Path, ref: pl.DataFrame) -> str:
    """Reading ``path`` gives ``ref`` exactly, or one clear ArtifactError."""
    try:
        df = read_artifact(path, KIND)
    except PrefixbenchError as e:
        assert isinstance(e, ArtifactError)
        assert_clear(e, where=str(path))
        return "refused"
    assert_frame_equal(df, ref)
    return "same"


# ------------------------------------------------------------------ damaged bytes


@settings(max_examples=200, **FUZZ)
@given(
    raw=st.one_of(
        st.binary(max_size=400), st.binary(max_size=200).map(lambda b: b"PAR1" + b + b"PAR1")
    )
)
def test_random_bytes(art, raw: bytes) -> None:
    d, _, ref = art
    path = d / "random.parquet"
    path.write_bytes(raw)
    assert _read_same_or_refuse(path, ref) == "refused"
    with pytest.raises(ArtifactError) as e:
        artifact_meta(path)
    assert_clear(e.value, where=str(path))


def test_every_truncation_is_refused(art) -> None:
    d, good, ref = art
    path = d / "cut.parquet"
    for n in [*range(0, 64), *range(64, len(good), 97), *range(len(good) - 64, len(good))]:
        path.write_bytes(good[:n])
        assert _read_same_or_refuse(path, ref) == "refused", n


@settings(max_examples=400, **FUZZ)
@given(data=st.data())
def test_flipped_bytes_never_read_silently(art, data) -> None:
    """A checksum of the column data is checked before decoding: flips in the data are
    refused; flips in the footer are refused or harmless (statistics, padding)."""
    d, good, ref = art
    raw = bytearray(good)
    for _ in range(data.draw(st.integers(1, 4))):
        i = data.draw(st.integers(0, len(raw) - 1))
        raw[i] ^= data.draw(st.integers(1, 255))
    path = d / "flipped.parquet"
    path.write_bytes(bytes(raw))
    _read_same_or_refuse(path, ref)


@settings(max_examples=100, **FUZZ)
@given(data=st.data())
def test_spliced_bytes(art, data) -> None:
    d, good, ref = art
    i = data.draw(st.integers(0, len(good)))
    j = data.draw(st.integers(i, min(len(good), i + 64)))
    raw = good[:i] + data.draw(st.binary(max_size=32)) + good[j:]
    path = d / "spliced.parquet"
    path.write_bytes(raw)
    _read_same_or_refuse(path, ref) if raw != good else None


# ------------------------------------------------------------------ valid Parquet, wrong content

GOOD_META = {"prefixbench.kind": KIND, "prefixbench.schema_version": str(SCHEMA_VERSION)}


@st.composite
def wrong_files(draw):
    df = _frame(3)
    meta = dict(GOOD_META)
    col = draw(st.sampled_from(df.columns))
    ok = False  # should read_artifact accept it?
    op = draw(
        st.sampled_from(
            [
                "drop",
                "rename",
                "cast",
                "extra",
                "kind",
                "no_kind",
                "version",
                "meta_json",
                "digest",
                "empty",
            ]
        )
    )
    if op == "drop":
        df = df.drop(col)
    elif op == "rename":
        df = df.rename({col: col + "_x"})
    elif op == "cast":
        to = draw(
            st.sampled_from(
                [pl.Utf8, pl.Int32, pl.Float32, pl.Boolean, pl.Int64, pl.Float64, pl.Null]
            )
        )
        ok = df.schema[col] == to
        try:
            df = df.with_columns(pl.col(col).cast(to, strict=False))
        except pl.exceptions.PolarsError:  # e.g. text to boolean: a column of nulls instead
            df = df.with_columns(pl.lit(None, dtype=to).alias(col))
    elif op == "extra":
        df, ok = df.with_columns(pl.lit(1).alias("zzz_extra")), True
    elif op == "kind":
        meta["prefixbench.kind"] = draw(
            st.sampled_from(["requests", "runs", "agg", "", "summary "])
        )
    elif op == "no_kind":
        meta = {}
    elif op == "version":
        meta["prefixbench.schema_version"] = draw(
            st.sampled_from(["0", str(SCHEMA_VERSION + 1), "", "1.0", "x"])
        )
    elif op == "meta_json":
        meta["prefixbench.meta"] = draw(st.sampled_from(["{", "[1,", "nan", "\x00"]))
    elif op == "digest":
        meta[DIGEST_KEY] = draw(st.sampled_from(["", "0" * 64, "not-a-digest"]))
    else:
        df, ok = df.head(0), False  # schema-valid, but a summary with no rows is refused
    return op, col, df, meta, ok


@settings(max_examples=200, **FUZZ)
@given(case=wrong_files())
def test_valid_parquet_with_wrong_columns_dtypes_or_metadata(art, case) -> None:
    d, _, _ = art
    op, col, df, meta, ok = case
    path = d / "wrong.parquet"
    df.write_parquet(path, metadata=meta)
    try:
        got = read_artifact(path, KIND)
        artifact_meta(path)
    except PrefixbenchError as e:
        assert isinstance(e, ArtifactError)
        line = assert_clear(e, where=str(path))
        if op in ("drop", "rename"):
            assert f"column '{col}' is missing" in line
        assert not ok, f"refused a readable file ({op}): {line}"
        return
    # accepted: extra columns are allowed, and a file without a digest is read as one
    # written before digests existed
    assert ok, f"accepted a wrong file ({op} {col})"
    assert_frame_equal(got.select(list(SCHEMAS[KIND])), df.select(list(SCHEMAS[KIND])))


def test_wrong_kind_names_the_expected_kind(art) -> None:
    d, good, _ = art
    path = d / "runs.parquet"
    path.write_bytes(good)
    with pytest.raises(ArtifactError) as e:
        read_artifact(path, "agg")
    assert "expected a prefixbench 'agg' file, found summary" in assert_clear(
        e.value, where=str(path)
    )


def test_missing_directory_and_fifo(art, tmp_path: Path) -> None:
    for target in (tmp_path / "nope.parquet", tmp_path):
        with pytest.raises(ArtifactError) as e:
            read_artifact(target, KIND)
        assert "missing summary file" in assert_clear(e.value, where=str(target))
    fifo = tmp_path / "fifo.parquet"
    os.mkfifo(fifo)
    with pytest.raises(ArtifactError) as e:  # must not block reading a pipe
        read_artifact(fifo, KIND)
    assert_clear(e.value, where=str(fifo))


# ------------------------------------------------------------------ writing


def test_written_files_are_ordinary_files(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        path = write_atomic(_frame(), tmp_path / "f.parquet", KIND)
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == 0o644  # not mkstemp's 0600
    assert json.loads(json.dumps(pl.read_parquet_metadata(path)))[DIGEST_KEY]


def test_bytes_are_deterministic(tmp_path: Path) -> None:
    a = write_atomic(_frame(), tmp_path / "a.parquet", KIND, {"x": 1}).read_bytes()
    b = write_atomic(_frame(), tmp_path / "b.parquet", KIND, {"x": 1}).read_bytes()
    assert a == b


@pytest.mark.parametrize(
    "failure",
    [
        OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)),
        pl.exceptions.ComputeError(
            "parquet: File out of specification: underlying IO error: "
            "No space left on device (os error 28)"
        ),  # what polars itself raises on a full disk (checked against /dev/full)
    ],
    ids=["OSError", "polars"],
)
@pytest.mark.parametrize("where", ["encode", "file-write"])
def test_disk_full_keeps_the_previous_file(tmp_path: Path, monkeypatch, failure, where) -> None:
    """A failure while encoding (in memory) or while writing the file (a full disk leaves a
    partial temp file) keeps the previous file and leaves no temp file."""
    import prefixbench.io.artifacts as artifacts

    path = write_atomic(_frame(2), tmp_path / "runs.parquet", KIND)
    before = path.read_bytes()

    def failing_encode(self, file, *args, **kwargs):
        raise failure

    def failing_write(file, raw):
        Path(file).write_bytes(b"PAR1 partial")  # as a full disk does
        raise failure

    if where == "encode":
        monkeypatch.setattr(pl.DataFrame, "write_parquet", failing_encode)
    else:
        monkeypatch.setattr(artifacts, "_write_bytes", failing_write)
    with pytest.raises(ArtifactError) as e:
        write_atomic(_frame(5), path, KIND)
    line = assert_clear(e.value, where=str(path))
    assert "No space left on device" in line and "previous file there is unchanged" in line
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["runs.parquet"]  # no temp file left


def test_one_encoding_gives_the_file_polars_writes_with_the_digest(tmp_path: Path) -> None:
    """The file is encoded once (a placeholder digest patched in the footer), and is byte
    for byte the file polars writes when given the digest of its column data."""
    import hashlib

    import prefixbench.io.artifacts as artifacts

    calls = []
    real = pl.DataFrame.write_parquet

    def counting(self, file, *args, **kwargs):
        calls.append(file)
        return real(self, file, *args, **kwargs)

    df = _frame(300)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(pl.DataFrame, "write_parquet", counting)
        path = write_atomic(df, tmp_path / "runs.parquet", KIND, {"x": 1})
    assert len(calls) == 1
    raw = path.read_bytes()
    end = len(raw) - 8 - int.from_bytes(raw[-8:-4], "little")
    digest = hashlib.sha256(raw[4:end]).hexdigest()  # the column data, by the format's layout
    meta = {"prefixbench.kind": KIND, "prefixbench.schema_version": str(SCHEMA_VERSION),
            "prefixbench.meta": '{"x": 1}', artifacts.DIGEST_KEY: digest}  # fmt: skip
    artifacts.conform(df, KIND).write_parquet(tmp_path / "direct.parquet", metadata=meta)
    assert raw == (tmp_path / "direct.parquet").read_bytes()
    assert read_artifact(path, KIND).equals(artifacts.conform(df, KIND))


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full (Linux)")
def test_polars_reports_a_full_disk_as_compute_error() -> None:
    """Why write_atomic also catches polars errors: a real ENOSPC is not an OSError."""
    with pytest.raises(pl.exceptions.PolarsError, match="No space left"):
        _frame(2000).write_parquet("/dev/full")


@pytest.fixture
def tiny_fs(tmp_path: Path):
    """A 256 KiB tmpfs (root only; skipped where mounting is not allowed)."""
    mnt = tmp_path / "tiny"
    mnt.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    r = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mnt)], capture_output=True
    )
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.decode().strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", str(mnt)], check=False)


def test_really_full_disk(tiny_fs: Path) -> None:
    small = write_atomic(_frame(2), tiny_fs / "summary.parquet", KIND)
    before = small.read_bytes()
    (tiny_fs / "ballast").write_bytes(b"\0" * (256 * 1024 - 3 * len(before)))
    with pytest.raises(ArtifactError) as e:
        write_atomic(_frame(20_000), small, KIND)
    assert "No space left on device" in assert_clear(e.value, where=str(small))
    assert small.read_bytes() == before
    assert sorted(p.name for p in tiny_fs.iterdir()) == ["ballast", "summary.parquet"]


def test_a_full_disk_is_called_a_full_disk(tmp_path: Path, monkeypatch) -> None:
    """polars can report ENOSPC as 'Invalid thrift: transport error' (when it strikes while
    the footer is written): the message says the disk is full instead."""
    import prefixbench.io.artifacts as artifacts

    def thrift(self, file, *args, **kwargs):
        raise pl.exceptions.ComputeError("parquet: Invalid thrift: transport error")

    class Full:
        f_bavail, f_frsize = 3, 4096

    monkeypatch.setattr(pl.DataFrame, "write_parquet", thrift)
    monkeypatch.setattr(artifacts.os, "statvfs", lambda _p: Full())
    with pytest.raises(ArtifactError) as e:
        write_atomic(_frame(5), tmp_path / "runs.parquet", KIND)
    line = assert_clear(e.value, where=str(tmp_path / "runs.parquet"))
    assert "the disk is full, 12,288 bytes free" in line and "thrift" not in line, line
    assert list(tmp_path.iterdir()) == []
