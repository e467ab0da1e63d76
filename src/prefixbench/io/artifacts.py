"""Parquet files are the contract between commands: declared schemas, versioned, atomic.

Each artifact kind declares its required columns and dtypes and a ``schema_version`` kept
in the Parquet key-value metadata. Writers write a temporary file and rename it into place;
readers validate and fail with one clear line.

The metadata also holds a SHA-256 of the file's column data (the bytes between the leading
``PAR1`` and the footer). Readers check it before decoding anything, so a truncated or
corrupted file is refused instead of read as wrong numbers (or crashing the decoder).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import tempfile
from pathlib import Path

import polars as pl

from prefixbench.errors import ArtifactError
from prefixbench.support.files import is_file

SCHEMA_VERSION = 2  # 2: stability verdict in summary/runs/agg; crossover tie_bandwidth_gbytes_per_s
DIGEST_KEY = "prefixbench.data_sha256"
_UMASK = os.umask(0o022)
os.umask(_UMASK)

F, I, S, B = pl.Float64, pl.Int64, pl.Utf8, pl.Boolean

SCHEMAS: dict[str, dict[str, pl.DataType]] = {
    "requests": {
        "request_id": I,
        "policy": S,
        "arrival": F,
        "prompt_tokens": I,
        "output_tokens": I,
        "prefix_id": I,
        "t_prefill_start": F,
        "t_prefill_end": F,
        "t_admit": F,
        "t_transfer_start": F,
        "t_transfer_end": F,
        "t_recompute_start": F,
        "t_recompute_end": F,
        "t_decode_start": F,
        "t_first_token": F,
        "t_done": F,
        "prefill_instance": I,
        "decode_instance": I,
        "outcome": S,
        "reject_reason": S,
        "prefill_hit_tokens": I,
        "replica_hit_tokens": I,
        "recompute_tokens": I,
        "transfer_tokens": I,
        "persisted_tokens": I,
        "chain_blocks": I,
        "hbm_hit_blocks": I,
        "host_hit_blocks": I,
        "link_blocks": I,
        "host_hit_tokens": I,
        "l3_hit_blocks": I,
        "l3_prefill_tokens": I,
        "warmup": B,
        "transfer_bytes": F,
        "host_bytes": F,
        "ttft_ms": F,
        "ttft_prefill_ms": F,
        "e2e_ms": F,
        "tpot_ms": F,
    },
    "summary": {
        "scenario": S,
        "model": S,
        "workload": S,
        "budget_factor": F,
        "seed": I,
        "policy": S,
        "requests": I,
        "completed": I,
        "rejected": I,
        "reject_rate": F,
        "throughput_rps": F,
        "throughput_tok_s": F,
        "ttft_mean_ms": F,
        "ttft_p50_ms": F,
        "ttft_p90_ms": F,
        "ttft_p99_ms": F,
        "ttft_prefill_mean_ms": F,
        "tpot_mean_ms": F,
        "tpot_p99_ms": F,
        "e2e_mean_ms": F,
        "shared_request_fraction": F,
        "replica_hit_rate": F,
        "mean_replica_kv_gb": F,
        "peak_replica_kv_gb": F,
        "transfer_mb_per_request": F,
        "link_util": F,
        "link_util_egress": F,
        "link_util_ingress": F,
        "decode_util": F,
        "prefill_util": F,
        "recompute_tokens_total": I,
        "slo_attainment": F,
        "goodput_rps": F,
        "kv_budget_gb": F,
        "stable": B,
        "saturated_stage": S,
        "bottleneck_stage": S,
        "rho_bottleneck": F,
        "capacity_rps": F,
        "offered_rps": F,
        "hbm_hit_rate": F,
        "host_hit_rate": F,
        "miss_rate": F,
        "host_mb_per_request": F,
        "mean_host_kv_gb": F,
        "peak_host_kv_gb": F,
        "host_path_gb": F,
        "host_path_util": F,
        "l3_hit_rate": F,
        "l3_prefill_rate": F,
        "l3_gb": F,
        "l3_util": F,
    },
}


# What a file of a kind must hold beyond its schema (a hand-edited or foreign file can pass
# the schema and still crash a reader or print wrong numbers): at least one row, one row per
# key, finite metrics (never inf; never NaN where the simulator always has a value), and
# fractions in [0, 1]. Kinds not listed are checked for their schema only.
_SUMMARY_FINITE = (  # never NaN: their denominators (the window, the requests) are > 0
    "throughput_rps",
    "throughput_tok_s",
    "reject_rate",
    "goodput_rps",
    "link_util",
    "decode_util",
    "prefill_util",
)
_FRACTIONS = (
    "reject_rate",
    "slo_attainment",
    "shared_request_fraction",
    "replica_hit_rate",
    "hbm_hit_rate",
    "host_hit_rate",
    "l3_hit_rate",
    "l3_prefill_rate",
    "miss_rate",
)
# Metrics that cannot be negative (latencies, rates, sizes), those that cannot be 0 either
# (a TTFT includes a prefill), and a ceiling far above any real run (1e15 ms = 31,700 years)
_NON_NEGATIVE = ("_ms", "_rps", "_tok_s", "_gb", "_util", "_per_request", "_ci95")
_POSITIVE = ("ttft_mean_ms",)
MAX_METRIC = 1e15
CONTENT: dict[str, dict] = {
    "summary": {"keys": ("admission", "model", "workload", "budget_factor", "seed", "policy"),
                "finite": _SUMMARY_FINITE, "no_inf": True},
    "runs": {"keys": ("run_id",), "finite": _SUMMARY_FINITE, "no_inf": True},
    "agg": {"keys": ("admission", "model", "workload", "budget_factor", "policy"),
            "finite": ("throughput_rps", "reject_rate"), "no_inf": True},
    "crossover": {"keys": ("model", "accelerator", "link"), "finite": (), "no_inf": False},
}  # fmt: skip


def _check_content(df: pl.DataFrame, kind: str, path: Path) -> None:
    rule = CONTENT.get(kind)
    if rule is None:
        return
    fix = "re-create the file with the command that produced it"
    if df.height == 0:
        raise ArtifactError(f"the {kind} file has no rows", where=str(path), fix=fix)
    keys = [k for k in rule["keys"] if k in df.columns]
    if keys and df.select(keys).is_duplicated().any():
        row = df.filter(df.select(keys).is_duplicated()).row(0, named=True)
        shown = ", ".join(f"{k}={row[k]}" for k in keys)
        raise ArtifactError(
            f"the {kind} file holds a row twice ({shown})", where=str(path), fix=fix
        )
    # declared columns only: a column another module adds is its own business
    floats = [c for c, t in schema(kind).items() if t == pl.Float64 and c in df.columns]
    for col in floats:
        values = df[col]
        if rule["no_inf"] and values.is_infinite().any():
            raise ArtifactError(f"column '{col}' holds an infinite value", where=str(path), fix=fix)
        if col in rule["finite"] and (values.is_nan().any() or values.null_count()):
            raise ArtifactError(f"column '{col}' holds NaN or null", where=str(path), fix=fix)
        known = values.fill_nan(None).drop_nulls()  # NaN: no value to check (e.g. no requests)
        if rule["no_inf"] and col in _FRACTIONS and not known.is_between(0, 1).all():
            raise ArtifactError(
                f"column '{col}' holds a value outside [0, 1]", where=str(path), fix=fix
            )
        if rule["no_inf"] and col.endswith(_NON_NEGATIVE):
            low = 0.0 if col not in _POSITIVE else 1e-12
            if not known.is_between(low, MAX_METRIC).all():
                raise ArtifactError(
                    f"column '{col}' holds a value outside [{low:g}, {MAX_METRIC:g}]",
                    where=str(path),
                    fix=fix,
                )


def register(kind: str, columns: dict[str, pl.DataType]) -> None:
    """Declare another artifact kind (used by the study pipeline's modules)."""
    SCHEMAS[kind] = columns


def schema(kind: str) -> dict[str, pl.DataType]:
    """The declared columns of ``kind``. The study's kinds are declared by the modules that
    write them, all imported by ``prefixbench.study`` itself (its ``__init__``), so any
    reader that reached a study module sees every kind."""
    if kind not in SCHEMAS:
        raise ArtifactError(f"unknown artifact kind {kind!r}", where="prefixbench.io.artifacts",
                            fix="import prefixbench.study before reading a study artifact")
    return SCHEMAS[kind]


def conform(df: pl.DataFrame, kind: str) -> pl.DataFrame:
    """``df`` with the declared columns of ``kind`` in their declared types: the frame
    ``write_atomic`` writes and ``read_artifact`` of that file returns."""
    schema_ = schema(kind)
    missing = [c for c in schema_ if c not in df.columns]
    if missing:
        raise AssertionError(
            f"{kind} frame lacks declared columns {missing}"
        )  # a bug, not user error
    return df.with_columns(pl.col(c).cast(t) for c, t in schema_.items())


def write_atomic(df: pl.DataFrame, path: Path, kind: str, meta: dict | None = None) -> Path:
    """Write ``df`` as artifact ``kind`` to ``path`` via a temp file and an atomic rename."""
    df = conform(df, kind)
    path = Path(path)
    tmp = _temp_beside(path)
    metadata = {"prefixbench.kind": kind, "prefixbench.schema_version": str(SCHEMA_VERSION)}
    if meta:
        metadata["prefixbench.meta"] = json.dumps(meta, sort_keys=True)
    try:
        _write_bytes(tmp, encode_with_digest(df, metadata))
        os.chmod(tmp, 0o666 & ~_UMASK)  # mkstemp makes it 0600; results are ordinary files
        os.replace(tmp, path)
    except (OSError, pl.exceptions.PolarsError) as e:
        Path(tmp).unlink(missing_ok=True)
        raise ArtifactError(
            f"cannot write file ({_io_reason(e, path.parent, df)})",
            where=str(path),
            fix="free some disk space or choose another --out; any previous file there is unchanged",
        ) from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def _write_bytes(path: str, raw: bytes) -> None:
    with open(path, "wb") as fh:  # a full disk raises here (ENOSPC), leaving a partial file
        fh.write(raw)


def _temp_beside(path: Path) -> str:
    """An empty temp file in ``path``'s folder (made if missing), for the atomic rename."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        os.close(fd)
    except OSError as e:
        raise ArtifactError(
            f"cannot write here ({e.strerror})",
            where=str(path.parent),
            fix="choose a writable --out directory",
        ) from None
    return tmp


_PLACEHOLDER = "0" * 64  # a SHA-256 in hex is 64 characters


def encode_with_digest(df: pl.DataFrame, metadata: dict[str, str]) -> bytes:
    """``df`` as Parquet bytes whose footer holds the SHA-256 of the column data, encoded once.

    The footer (with the key-value metadata) comes after the column data, so the data bytes
    do not depend on the digest: the file is encoded with a placeholder of the digest's
    length, and the placeholder in the footer is then overwritten with the digest of the
    data region. The footer carries no checksum of itself (the Parquet format's FileMetaData),
    so the result is the file polars writes with the digest in its metadata, byte for byte.
    """
    buf = io.BytesIO()
    df.write_parquet(buf, metadata={**metadata, DIGEST_KEY: _PLACEHOLDER})
    raw = bytearray(buf.getbuffer())
    region = _data_region(bytes(raw))
    end = 4 + len(region) if region is not None else 0
    at = raw.find(_PLACEHOLDER.encode(), end)
    if region is None or at < 0 or raw.find(_PLACEHOLDER.encode(), at + 1) >= 0:  # never seen
        buf = io.BytesIO()
        df.write_parquet(buf, metadata=metadata)  # no digest: readers accept that
        return buf.getvalue()
    raw[at : at + len(_PLACEHOLDER)] = _digest(region).encode()
    return bytes(raw)


def _disk_full(folder: Path, df: pl.DataFrame) -> str | None:
    """'the disk is full' when the folder's file system has no room left for ``df``."""
    try:
        st = os.statvfs(folder)
    except OSError:
        return None
    free = st.f_bavail * st.f_frsize
    if free < max(1 << 20, int(df.estimated_size())):
        return f"No space left on device: the disk is full, {free:,} bytes free"
    return None


def _io_reason(e: BaseException, folder: Path | None = None, df: pl.DataFrame | None = None) -> str:
    """Why a write failed, in words: polars can report ENOSPC as 'Invalid thrift: transport
    error' when it strikes while the footer is written, so a full disk is checked first."""
    import errno

    full = _disk_full(folder, df) if folder is not None and df is not None else None
    if full:
        return full
    if isinstance(e, OSError) and e.errno == errno.ENOSPC:
        return "No space left on device: the disk is full"
    if isinstance(e, OSError):
        return e.strerror or e.__class__.__name__
    text = str(e).splitlines()[0] if str(e) else e.__class__.__name__
    return text.rsplit("IO error: ", 1)[-1][
        :120
    ]  # polars: "...underlying IO error: No space left..."


def _data_region(raw: bytes) -> bytes | None:
    """The column data of a Parquet file: between the leading magic and the footer."""
    if len(raw) < 12 or raw[:4] != b"PAR1" or raw[-4:] != b"PAR1":
        return None
    end = len(raw) - 8 - int.from_bytes(raw[-8:-4], "little")
    return raw[4:end] if end >= 4 else None


def _digest(region: bytes | None) -> str:
    return hashlib.sha256(region if region is not None else b"").hexdigest()


_CORRUPT = "delete it and re-run the command that produced it"
_POLARS_FAILURES = (Exception, pl.exceptions.PanicException)  # a Rust panic is a BaseException


def _read_bytes(path: Path) -> bytes:
    try:
        with open(path, "rb") as fh:  # a file that does not end as Parquet is not read whole
            head = fh.read(4)
            fh.seek(0, os.SEEK_END)
            if fh.tell() >= 12:
                fh.seek(-4, os.SEEK_END)
            tail = fh.read(4)
            if head != b"PAR1" or tail != b"PAR1":
                return head
            fh.seek(0)
            return fh.read()
    except OSError as e:
        raise ArtifactError(
            f"cannot read file ({e.strerror or e.__class__.__name__})",
            where=str(path),
            fix="check that it is a readable file",
        ) from None


def _metadata(raw: bytes, path: Path) -> dict[str, str]:
    if _data_region(raw) is None:
        raise ArtifactError(
            "not a readable Parquet file (corrupt or truncated)", where=str(path), fix=_CORRUPT
        )
    try:
        return pl.read_parquet_metadata(io.BytesIO(raw))
    except _POLARS_FAILURES:  # polars raises several kinds for corrupt files
        raise ArtifactError(
            "not a readable Parquet file (corrupt or truncated)", where=str(path), fix=_CORRUPT
        ) from None


def read_metadata(path: Path) -> dict[str, str]:
    path = Path(path)
    if not is_file(path):
        raise ArtifactError(
            "missing file", where=str(path), fix="run the command that produces it first"
        )
    return _metadata(_read_bytes(path), path)


def read_artifact(path: Path, kind: str) -> pl.DataFrame:
    """Read and validate artifact ``kind``: existence, kind, schema version, columns, dtypes."""
    path = Path(path)
    if not is_file(path):
        raise ArtifactError(
            f"missing {kind} file", where=str(path), fix="run the command that produces it first"
        )
    raw = _read_bytes(path)
    meta = _metadata(raw, path)
    got_kind = meta.get("prefixbench.kind")
    if got_kind != kind:
        raise ArtifactError(
            f"expected a prefixbench '{kind}' file, found {got_kind or 'a foreign Parquet file'}",
            where=str(path),
            fix=f"check the path: this reads the {kind} file a prefixbench command wrote",
        )
    version = meta.get("prefixbench.schema_version")
    if version != str(SCHEMA_VERSION):
        raise ArtifactError(
            f"schema version {version} is not supported (this prefixbench reads {SCHEMA_VERSION})",
            where=str(path),
            fix="re-run the command that produced it with this version",
        )
    want = meta.get(DIGEST_KEY)  # files from before digests were written have none
    if want is not None and _digest(_data_region(raw)) != want:
        raise ArtifactError(
            "corrupt Parquet data (checksum mismatch)", where=str(path), fix=_CORRUPT
        )
    try:
        df = pl.read_parquet(io.BytesIO(raw))
    except _POLARS_FAILURES:
        raise ArtifactError("corrupt Parquet data", where=str(path), fix=_CORRUPT) from None
    for col, dtype in schema(kind).items():
        if col not in df.columns:
            raise ArtifactError(
                f"column '{col}' is missing", where=str(path), fix="re-create the file"
            )
        if df.schema[col] != dtype:
            raise ArtifactError(
                f"column '{col}' is {df.schema[col]}, expected {dtype}",
                where=str(path),
                fix="re-create the file",
            )
    _check_content(df, kind, path)
    return df


def artifact_meta(path: Path) -> dict:
    raw = read_metadata(Path(path)).get("prefixbench.meta")
    try:
        meta = json.loads(raw) if raw else {}
    except (ValueError, RecursionError):
        raise ArtifactError("corrupt prefixbench metadata", where=str(path), fix=_CORRUPT) from None
    if not isinstance(meta, dict):
        raise ArtifactError(
            f"prefixbench metadata is a JSON {type(meta).__name__}, not an object",
            where=str(path),
            fix=_CORRUPT,
        )
    for key, want in META_TYPES.items():
        value = meta.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, want)):
            raise ArtifactError(
                f"prefixbench metadata '{key}' is a JSON {type(value).__name__}, expected "
                f"{_JSON_NAMES[want]}",
                where=str(path),
                fix=_CORRUPT,
            )
    return meta


META_TYPES: dict[str, type] = {  # the metadata keys writers use, and their JSON types
    "points": int,
    "of": int,
    "scenario": dict,
    "point_id": str,
    "point_key": list,
}
_JSON_NAMES = {int: "an integer", dict: "an object", str: "a string", list: "a list"}
