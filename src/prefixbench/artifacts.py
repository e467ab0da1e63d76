"""Parquet files are the contract between commands: declared schemas, versioned, atomic.

Each artifact kind declares its required columns and dtypes and a ``schema_version`` kept
in the Parquet key-value metadata. Writers write a temporary file and rename it into place;
readers validate and fail with one clear line.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import polars as pl

from .errors import ArtifactError

SCHEMA_VERSION = 1

F, I, S, B = pl.Float64, pl.Int64, pl.Utf8, pl.Boolean

SCHEMAS: dict[str, dict[str, pl.DataType]] = {
    "requests": {
        "request_id": I, "policy": S, "arrival": F, "prompt_tokens": I, "output_tokens": I,
        "prefix_id": I, "t_prefill_start": F, "t_prefill_end": F, "t_admit": F,
        "t_transfer_start": F, "t_transfer_end": F, "t_recompute_start": F,
        "t_recompute_end": F, "t_decode_start": F, "t_first_token": F, "t_done": F,
        "prefill_instance": I, "decode_instance": I, "outcome": S, "reject_reason": S,
        "prefill_hit_tokens": I, "replica_hit_tokens": I, "recompute_tokens": I,
        "transfer_tokens": I, "persisted_tokens": I, "warmup": B, "transfer_bytes": F,
        "ttft_ms": F, "ttft_prefill_ms": F, "e2e_ms": F, "tpot_ms": F,
    },
    "summary": {
        "scenario": S, "model": S, "workload": S, "budget_factor": F, "seed": I, "policy": S,
        "requests": I, "completed": I, "rejected": I, "reject_rate": F,
        "throughput_rps": F, "throughput_tok_s": F,
        "ttft_mean_ms": F, "ttft_p50_ms": F, "ttft_p90_ms": F, "ttft_p99_ms": F,
        "ttft_prefill_mean_ms": F, "tpot_mean_ms": F, "tpot_p99_ms": F, "e2e_mean_ms": F,
        "shared_request_fraction": F, "replica_hit_rate": F, "mean_replica_kv_gb": F,
        "peak_replica_kv_gb": F, "transfer_mb_per_request": F, "link_util": F,
        "decode_util": F, "prefill_util": F, "recompute_tokens_total": I,
        "slo_attainment": F, "goodput_rps": F, "kv_budget_gb": F,
    },
}


def register(kind: str, columns: dict[str, pl.DataType]) -> None:
    """Declare another artifact kind (used by the study pipeline's modules)."""
    SCHEMAS[kind] = columns


def schema(kind: str) -> dict[str, pl.DataType]:
    """The declared columns of ``kind`` (study modules declare theirs when imported)."""
    if kind not in SCHEMAS:
        from .study import aggregate, crossover, recommend, sweep  # noqa: F401 - they register

    return SCHEMAS[kind]


def _conform(df: pl.DataFrame, kind: str) -> pl.DataFrame:
    schema_ = schema(kind)
    missing = [c for c in schema_ if c not in df.columns]
    if missing:
        raise AssertionError(f"{kind} frame lacks declared columns {missing}")  # a bug, not user error
    return df.with_columns(pl.col(c).cast(t) for c, t in schema_.items())


def write_atomic(df: pl.DataFrame, path: Path, kind: str, meta: dict | None = None) -> Path:
    """Write ``df`` as artifact ``kind`` to ``path`` via a temp file and an atomic rename."""
    df = _conform(df, kind)
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        os.close(fd)
    except OSError as e:
        raise ArtifactError(
            f"cannot write here ({e.strerror})", where=str(path.parent), fix="choose a writable --out directory"
        ) from None
    metadata = {"prefixbench.kind": kind, "prefixbench.schema_version": str(SCHEMA_VERSION)}
    if meta:
        metadata["prefixbench.meta"] = json.dumps(meta, sort_keys=True)
    try:
        df.write_parquet(tmp, metadata=metadata)
        os.replace(tmp, path)
    except OSError as e:
        Path(tmp).unlink(missing_ok=True)
        raise ArtifactError(f"cannot write file ({e.strerror})", where=str(path)) from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def read_metadata(path: Path) -> dict[str, str]:
    try:
        return pl.read_parquet_metadata(path)
    except Exception:  # noqa: BLE001 - polars raises several kinds for corrupt files
        raise ArtifactError(
            "not a readable Parquet file (corrupt or truncated)",
            where=str(path),
            fix="delete it and re-run the command that produced it",
        ) from None


def read_artifact(path: Path, kind: str) -> pl.DataFrame:
    """Read and validate artifact ``kind``: existence, kind, schema version, columns, dtypes."""
    path = Path(path)
    if not path.is_file():
        raise ArtifactError(
            f"missing {kind} file", where=str(path), fix="run the command that produces it first"
        )
    meta = read_metadata(path)
    got_kind = meta.get("prefixbench.kind")
    if got_kind != kind:
        raise ArtifactError(
            f"expected a prefixbench '{kind}' file, found {got_kind or 'a foreign Parquet file'}",
            where=str(path),
        )
    version = meta.get("prefixbench.schema_version")
    if version != str(SCHEMA_VERSION):
        raise ArtifactError(
            f"schema version {version} is not supported (this prefixbench reads {SCHEMA_VERSION})",
            where=str(path),
            fix="re-run the command that produced it with this version",
        )
    try:
        df = pl.read_parquet(path)
    except Exception:  # noqa: BLE001
        raise ArtifactError(
            "corrupt Parquet data", where=str(path), fix="delete it and re-run the command that produced it"
        ) from None
    for col, dtype in schema(kind).items():
        if col not in df.columns:
            raise ArtifactError(f"column '{col}' is missing", where=str(path), fix="re-create the file")
        if df.schema[col] != dtype:
            raise ArtifactError(
                f"column '{col}' is {df.schema[col]}, expected {dtype}", where=str(path), fix="re-create the file"
            )
    return df


def artifact_meta(path: Path) -> dict:
    raw = read_metadata(Path(path)).get("prefixbench.meta")
    return json.loads(raw) if raw else {}
