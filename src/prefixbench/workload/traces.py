"""Real request traces as :class:`Requests`: Mooncake JSONL, Azure LLM inference CSV (2023,
and 2024 with ``+00:00`` offsets), BurstGPT CSV and the Alibaba Qwen-Bailian JSONL.

Each reader tries a columnar polars parse first and checks the result with whole-array
tests. Only when that finds anything wrong does it re-read the file line by line with the
standard library, which is slow but knows line numbers: it raises a one-line
:class:`TraceFormatError` naming ``file:line`` (or, with ``skip_bad``, drops the record and
counts the reason). The slow pass is the authority; no per-record Python objects survive
either pass.

The replay controls (limit, window, rescale_rate, tile) are in workload/controls.py.
"""

from __future__ import annotations

import contextlib
import csv
import json
import math
import operator
import os
import re
from array import array
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

from prefixbench.errors import TraceFormatError
from prefixbench.registry import TRACE_FORMATS
from prefixbench.workload.requests import Requests

FORMATS = tuple(f.name for f in TRACE_FORMATS)  # prefixbench/registry/traces.py
# Qwen-Bailian usage traces (alibaba-edu/qwen-bailian-usagetraces-anon README): the Mooncake
# fields, with timestamps in seconds and hash_ids of 16-token blocks
BAILIAN_BLOCK_SIZE = 16
BAILIAN_TIME_UNIT_S = 1.0
# BurstGPT (HPMLL/BurstGPT): Timestamp (s from trace start), Model, Request tokens,
# Response tokens, Total tokens, Log Type; failed requests have 0 response tokens
BURSTGPT_COLUMNS = ("Timestamp", "Request tokens", "Response tokens")
MOONCAKE_FIELDS = ("timestamp", "input_length", "output_length", "hash_ids")
AZURE_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
_SKIP_HINT = "or use --skip-bad to skip such lines"


@dataclass
class TraceLoad:
    """A parsed trace plus what was dropped on the way (``skip_reasons``: reason -> count)."""

    requests: Requests
    path: str
    format: str
    skipped: int = 0
    skip_reasons: dict[str, int] = field(default_factory=dict)


class _Bad(Exception):
    """One record is invalid: ``reason`` is the skip_reasons key, the rest the message."""

    def __init__(self, reason: str, what: str, fix: str) -> None:
        super().__init__(what)
        self.reason, self.what, self.fix = reason, what, fix


def _show(value: Any, limit: int = 40) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _polars_failures() -> tuple[type[BaseException], ...]:
    import polars as pl

    # A Rust panic surfaces as PanicException, which derives from BaseException.
    return (Exception, pl.exceptions.PanicException)


def _check_readable(path: str) -> None:
    from prefixbench.support.files import check_regular

    check_regular(path, TraceFormatError, "trace file")  # not a FIFO, device, directory
    try:
        with open(path, "rb") as fh:
            fh.read(1)
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise TraceFormatError(
            f"cannot read trace file ({reason})",
            where=path,
            fix="check that the path exists and is a readable file",
        ) from None
    _prescan(path)


# A record's line: a Bailian request of 10⁶ tokens in 16-token blocks lists 62,500 hash ids
# (under 1 MB of JSON); 16 MB leaves a wide margin and keeps polars' line buffers bounded.
MAX_LINE_BYTES = 16 << 20
MAX_BLANK_BYTES = 64 << 20  # this much blank text in a row (e.g. a gzip bomb) is not a trace
_SCAN_CHUNK = 1 << 20


def _prescan(path: str) -> None:
    """One streaming pass over the (decompressed) text before polars sees it: a line longer
    than MAX_LINE_BYTES (polars aborts the process on a 300 MB one) or a run of blank text
    longer than MAX_BLANK_BYTES (minutes of parsing to find no record) is refused at once."""
    import zlib

    try:
        _scan(path)
    except (OSError, EOFError, zlib.error):
        return  # corrupt gzip data: the reader names the line it breaks at


# Peak memory while parsing: polars' text buffer and the parsed columns, a few times the
# text; 4x is an allowance, not a measurement.
TRACE_BYTES_PER_TEXT_BYTE = 4.0


def _scan(path: str) -> None:
    from prefixbench.support.memcheck import check_bytes

    at = _scan_text(path)
    check_bytes(TRACE_BYTES_PER_TEXT_BYTE * at, f"a trace of {at / 1e9:.1f} GB of text",
                path, "replay a shorter trace (split it)")  # fmt: skip


def _scan_text(path: str) -> int:
    """The (decompressed) text's length, after checking its lines and blank runs."""
    line, blank, at = 0, 0, 0
    with _open_stream(path) as fh:
        while chunk := fh.read(_SCAN_CHUNK):
            blank = blank + len(chunk) if chunk.isspace() else 0
            if blank > MAX_BLANK_BYTES:
                _refuse_scan(path, f"{blank >> 20} MiB of blank lines in a row at byte {at:,}")
            line, longest = _line_lengths(chunk, line)
            if max(line, longest) > MAX_LINE_BYTES:
                _refuse_scan(
                    path, f"a line longer than {MAX_LINE_BYTES >> 20} MiB near byte {at:,}"
                )
            at += len(chunk)
    return at


def _line_lengths(chunk: bytes, line: int) -> tuple[int, int]:
    """(the open line's length after ``chunk``, the longest line it closes), given the open
    line's length ``line`` before it."""
    nl = np.flatnonzero(np.frombuffer(chunk, dtype=np.uint8) == 10)
    if nl.size == 0:
        return line + len(chunk), 0
    longest = max(line + int(nl[0]), int(np.diff(nl).max()) - 1 if nl.size > 1 else 0)
    return len(chunk) - int(nl[-1]) - 1, longest


def _refuse_scan(path: str, what: str):
    raise TraceFormatError(
        f"not a request trace: {what}",
        where=path,
        fix="check the file (one record per line, no padding); decompress it to look",
    )


@contextlib.contextmanager
def _open_stream(path: str):
    import gzip

    with open(path, "rb") as raw:
        gz = raw.read(2) == b"\x1f\x8b"
        raw.seek(0)
        if not gz:
            yield raw
            return
        with gzip.open(raw, "rb") as fh:
            yield fh


@contextlib.contextmanager
def _open_lines(path: str):
    """The file's lines as bytes; a gzip file (whatever its name) is read decompressed, as
    polars reads it, so an error names the line of the decompressed text."""
    import gzip

    with open(path, "rb") as fh:
        gz = fh.read(2) == b"\x1f\x8b"
        if not gz:
            fh.seek(0)
            yield fh
            return
    with gzip.open(path, "rb") as fh:
        yield _gzip_lines(fh, path)


def _gzip_lines(fh, path: str):
    import zlib

    n = 0
    try:
        for line in fh:
            n += 1
            yield line
    except (OSError, EOFError, zlib.error) as exc:
        raise TraceFormatError(
            f"corrupt gzip data after line {n} ({exc})",
            where=path,
            fix="re-create the file, or decompress it and check it",
        ) from None


# A replay spans at most the replay window's own bound (TraceWorkload.end_s <= 1e10 s),
# where float64 still resolves 2 µs; at 1e14 s a TTFT of milliseconds rounded to 0.
MAX_SPAN_S = 1e10


def _finish(
    path: str, fmt: str, cols: dict[str, np.ndarray] | None, skips: Counter[str], hint: str
) -> TraceLoad:
    """Wrap assembled columns, or explain why there are none."""
    if cols is None:
        if skips:
            detail = ", ".join(f"{k}: {v}" for k, v in sorted(skips.items()))
            raise TraceFormatError(
                f"no valid records: all {sum(skips.values())} were skipped ({detail})",
                where=path,
                fix=f"check that this is a {hint}",
            )
        raise TraceFormatError(
            "trace has no records", where=path, fix=f"check that this is a non-empty {hint}"
        )
    span = float(cols["arrival"][-1] - cols["arrival"][0]) if len(cols["arrival"]) else 0.0
    if not span <= MAX_SPAN_S:
        raise TraceFormatError(
            f"timestamps span {span:.3g} s, more than {MAX_SPAN_S:.0e} s (317 years): "
            "beyond it the clock cannot resolve a step",
            where=path,
            fix="check the timestamp unit (time_unit_s) or the records' timestamps",
        )
    return TraceLoad(
        requests=Requests(**cols),
        path=path,
        format=fmt,
        skipped=sum(skips.values()),
        skip_reasons=dict(sorted(skips.items())),
    )


# --------------------------------------------------------------------------- Mooncake


def read_mooncake(
    path: str | os.PathLike[str],
    *,
    block_size: int = 512,
    time_unit_s: float = 1e-3,
    skip_bad: bool = False,
) -> TraceLoad:
    """Read a Mooncake JSONL trace (``timestamp``, ``input_length``, ``output_length``,
    ``hash_ids``). Blank lines are ignored; unknown fields are ignored."""
    path = str(path)
    try:
        bad_block = isinstance(block_size, bool) or operator.index(block_size) < 1
    except TypeError:
        bad_block = True
    if bad_block:
        raise TraceFormatError(
            f"block size must be a positive integer, got {_show(block_size)}",
            fix="pass the trace's block size (Mooncake traces use 512)",
        )
    if not (
        isinstance(time_unit_s, int | float) and math.isfinite(time_unit_s) and time_unit_s > 0
    ):
        raise TraceFormatError(
            f"time unit must be a positive number of seconds, got {_show(time_unit_s)}",
            fix="pass 1e-3 for millisecond timestamps",
        )
    block_size = operator.index(block_size)
    time_unit_s = float(time_unit_s)
    _check_readable(path)
    cols = _mooncake_fast(path, block_size, time_unit_s)
    skips: Counter[str] = Counter()
    if cols is None:
        cols = _mooncake_slow(path, block_size, time_unit_s, skip_bad, skips)
    return _finish(path, "mooncake", cols, skips, "Mooncake JSONL trace (one JSON object per line)")


def _mooncake_fast(path: str, bs: int, unit: float) -> dict[str, np.ndarray] | None:
    """Columnar parse; ``None`` when anything at all looks wrong (the slow pass explains)."""
    import polars as pl

    schema = {
        "timestamp": pl.Float64,
        "input_length": pl.Int64,
        "output_length": pl.Int64,
        "hash_ids": pl.List(pl.Int64),
    }
    try:
        df = pl.read_ndjson(path, schema=schema)
        if df.height == 0 or any(df[c].null_count() for c in MOONCAKE_FIELDS):
            return None
        ts = df["timestamp"].to_numpy(writable=True)
        inp = df["input_length"].to_numpy(writable=True)
        out = df["output_length"].to_numpy(writable=True)
        counts = df["hash_ids"].list.len().cast(pl.Int64).to_numpy(writable=True)
        need = (inp + (bs - 1)) // bs
        if not (
            np.all(np.isfinite(ts))
            and np.all(np.diff(ts) >= 0)
            and np.all(inp > 0)
            and np.all(out >= 1)
            and np.array_equal(counts, need)
        ):
            return None
        # counts == need >= 1, so there are no empty lists to explode into nulls.
        flat = df["hash_ids"].explode()
        del df
        if flat.null_count() or flat.len() != int(counts.sum()):
            return None
        hashes = flat.to_numpy()  # zero-copy view of polars memory when possible
        del flat
        if not hashes.flags.writeable:
            hashes = hashes.copy()
    except _polars_failures():
        return None
    return _assemble(ts, inp, out, counts, hashes, bs, unit)


def _assemble(
    ts: np.ndarray,
    inp: np.ndarray,
    out: np.ndarray,
    counts: np.ndarray,
    hashes: np.ndarray,
    bs: int,
    unit: float,
) -> dict[str, np.ndarray]:
    n = ts.shape[0]
    blk_ptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(counts, out=blk_ptr[1:])
    blk_tokens = np.full(hashes.shape[0], bs, dtype=np.int64)
    has = counts > 0
    blk_tokens[blk_ptr[1:][has] - 1] = inp[has] - (counts[has] - 1) * bs
    prefix_id = np.full(n, -1, dtype=np.int64)
    prefix_id[has] = hashes[blk_ptr[:-1][has]]
    return {
        "arrival": (ts.astype(np.float64) - float(ts[0])) * unit,
        "prompt_len": inp.astype(np.int64, copy=False),
        "output_len": out.astype(np.int64, copy=False),
        "blk_ptr": blk_ptr,
        "blk_hash": hashes.astype(np.int64, copy=False),
        "blk_tokens": blk_tokens,
        "prefix_id": prefix_id,
    }


def _json_int(rec: dict[str, Any], key: str) -> int:
    value = rec[key]
    if isinstance(value, bool) or not isinstance(value, int):
        raise _Bad(
            "wrong_type",
            f"field '{key}' must be an integer, got {type(value).__name__} {_show(value)}",
            f"write '{key}' as a JSON integer, {_SKIP_HINT}",
        )
    if not _INT64_MIN <= value <= _INT64_MAX:
        raise _Bad(
            "wrong_type",
            f"field '{key}' = {_show(value)} does not fit in a 64-bit integer",
            f"fix the value, {_SKIP_HINT}",
        )
    return value


def _mooncake_record(raw: bytes, bs: int) -> tuple[float, int, int, list[int]]:
    try:
        rec = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise _Bad(
            "malformed_line",
            f"malformed JSON ({exc.msg} at column {exc.colno})",
            f"fix or delete the line, {_SKIP_HINT}",
        ) from None
    except (ValueError, RecursionError):  # not UTF-8, or nested too deeply
        raise _Bad(
            "malformed_line",
            "malformed line (not valid UTF-8 JSON)",
            f"fix or delete the line, {_SKIP_HINT}",
        ) from None
    if not isinstance(rec, dict):
        raise _Bad(
            "malformed_line",
            f"line is a JSON {type(rec).__name__}, not an object",
            f"write one JSON object per line, {_SKIP_HINT}",
        )
    missing = [k for k in MOONCAKE_FIELDS if rec.get(k) is None]
    if missing:
        raise _Bad(
            "missing_field",
            f"record is missing field '{missing[0]}'",
            "every record needs timestamp, input_length, output_length and hash_ids; " + _SKIP_HINT,
        )
    ts = rec["timestamp"]
    if isinstance(ts, bool) or not isinstance(ts, int | float) or not math.isfinite(ts):
        raise _Bad(
            "wrong_type",
            f"field 'timestamp' must be a finite number, got {type(ts).__name__} {_show(ts)}",
            f"write the timestamp as a JSON number (milliseconds), {_SKIP_HINT}",
        )
    inp = _json_int(rec, "input_length")
    out = _json_int(rec, "output_length")
    ids = rec["hash_ids"]
    if not isinstance(ids, list):
        raise _Bad(
            "wrong_type",
            f"field 'hash_ids' must be a list of integers, got {type(ids).__name__} {_show(ids)}",
            f"write hash_ids as a JSON array of integers, {_SKIP_HINT}",
        )
    for h in ids:
        if isinstance(h, bool) or not isinstance(h, int) or not _INT64_MIN <= h <= _INT64_MAX:
            raise _Bad(
                "wrong_type",
                f"field 'hash_ids' must hold 64-bit integers, found {_show(h)}",
                f"write hash_ids as a JSON array of integers, {_SKIP_HINT}",
            )
    if inp <= 0:
        raise _Bad(
            "bad_input_length",
            f"input_length must be positive, got {inp}",
            f"fix the record, {_SKIP_HINT}",
        )
    if out == 0:
        raise _Bad(
            "zero_output_length",
            "output_length is 0 (a request must generate at least 1 token)",
            f"fix the record, {_SKIP_HINT}",
        )
    if out < 0:
        raise _Bad(
            "negative_output_length",
            f"output_length must be at least 1, got {out}",
            f"fix the record, {_SKIP_HINT}",
        )
    need = -(-inp // bs)
    if len(ids) != need:
        raise _Bad(
            "block_count_mismatch",
            f"hash_ids has {len(ids)} blocks but input_length {inp} needs "
            f"ceil({inp}/{bs}) = {need} blocks of {bs} tokens",
            f"check the block size (Mooncake traces use 512), {_SKIP_HINT}",
        )
    return float(ts), inp, out, ids


def _mooncake_slow(
    path: str, bs: int, unit: float, skip_bad: bool, skips: Counter[str]
) -> dict[str, np.ndarray] | None:
    ts, inp, out, counts, hashes = array("d"), array("q"), array("q"), array("q"), array("q")
    prev_ts, prev_line = -math.inf, 0
    with _open_lines(path) as fh:
        for lineno, raw in enumerate(fh, start=1):
            if not raw.strip():
                continue
            try:
                t, i, o, ids = _mooncake_record(raw, bs)
                if t < prev_ts:
                    raise _Bad(
                        "unsorted_timestamp",
                        f"timestamp {_show(t)} is earlier than {_show(prev_ts)} on line "
                        f"{prev_line} (timestamps go backwards)",
                        "sort the file by timestamp, or use --skip-bad to drop records "
                        "that go backwards",
                    )
            except _Bad as bad:
                if not skip_bad:
                    raise TraceFormatError(
                        bad.what, where=f"{path}:{lineno}", fix=bad.fix
                    ) from None
                skips[bad.reason] += 1
                continue
            prev_ts, prev_line = t, lineno
            ts.append(t)
            inp.append(i)
            out.append(o)
            counts.append(len(ids))
            hashes.extend(ids)
    if not ts:
        return None
    return _assemble(
        np.frombuffer(ts, dtype=np.float64).copy(),
        *(np.frombuffer(a, dtype=np.int64).copy() for a in (inp, out, counts, hashes)),
        bs,
        unit,
    )


# --------------------------------------------------------------------------- Azure

_AZURE_TS = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})[ T](\d{2}):(\d{2}):(\d{2})(?:\.(\d+))?"
    r"(?:(Z)|([+-])(\d{2}):?(\d{2}))?"  # Azure 2024 writes +00:00
)
# UTC offsets run from -12:00 to +14:00 with minutes below 60; "+25:00" or "+00:99" is no
# time zone (the fast parse accepted both)
_BAD_OFFSET = r"[+-](?:1[5-9]|[2-9]\d):?\d{2}$|[+-]\d{2}:?[6-9]\d$"
_EPOCH_DAY = datetime(1970, 1, 1).toordinal()
_AZURE_HINT = "Azure LLM inference trace CSV (TIMESTAMP,ContextTokens,GeneratedTokens)"


def read_azure(path: str | os.PathLike[str], *, skip_bad: bool = False) -> TraceLoad:
    """Read an Azure LLM inference CSV. Arrival = seconds since the first row, computed
    from integer nanoseconds so 7-digit fractional seconds survive exactly. No blocks."""
    path = str(path)
    _check_readable(path)
    cols = _azure_fast(path)
    skips: Counter[str] = Counter()
    if cols is None:
        cols = _azure_slow(path, skip_bad, skips)
    return _finish(path, "azure", cols, skips, _AZURE_HINT)


def _azure_fast(path: str) -> dict[str, np.ndarray] | None:
    import polars as pl

    try:
        df = pl.read_csv(
            path,
            schema_overrides={
                "TIMESTAMP": pl.String,
                "ContextTokens": pl.Int64,
                "GeneratedTokens": pl.Int64,
            },
            columns=list(AZURE_COLUMNS),
        )
        if df.height == 0 or any(df[c].null_count() for c in AZURE_COLUMNS):
            return None
        stamp = df["TIMESTAMP"].str.to_datetime(
            "%Y-%m-%d %H:%M:%S%.f", time_unit="ns", strict=False
        )
        if stamp.null_count():  # Azure 2024: ISO timestamps with a UTC offset (+00:00)
            stamp = df["TIMESTAMP"].str.to_datetime(
                "%Y-%m-%d %H:%M:%S%.f%:z", time_unit="ns", strict=False, time_zone="UTC"
            )
        if stamp.null_count() or df["TIMESTAMP"].str.contains(_BAD_OFFSET).any():
            return None  # the slow pass names the line
        ns = stamp.cast(pl.Int64).to_numpy(writable=True)
        inp = df["ContextTokens"].to_numpy(writable=True)
        out = df["GeneratedTokens"].to_numpy(writable=True)
    except _polars_failures():
        return None
    if not (np.all(np.diff(ns) >= 0) and np.all(inp > 0) and np.all(out >= 1)):
        return None
    return _azure_assemble(ns, inp, out)


def _azure_assemble(ns: np.ndarray, inp: np.ndarray, out: np.ndarray) -> dict[str, np.ndarray]:
    n = ns.shape[0]
    return {
        "arrival": (ns - ns[0]).astype(np.float64) / 1e9,
        "prompt_len": inp.astype(np.int64, copy=False),
        "output_len": out.astype(np.int64, copy=False),
        "blk_ptr": np.zeros(n + 1, dtype=np.int64),
        "blk_hash": np.zeros(0, dtype=np.int64),
        "blk_tokens": np.zeros(0, dtype=np.int64),
        "prefix_id": np.full(n, -1, dtype=np.int64),
    }


def _azure_timestamp_ns(text: str) -> int:
    m = _AZURE_TS.fullmatch(text.strip())
    try:
        if m is None:
            raise ValueError
        y, mo, d, hh, mm, ss = (int(g) for g in m.groups()[:6])
        day = datetime(y, mo, d, hh, mm, ss)  # validates the calendar fields
    except ValueError:
        raise _Bad(
            "bad_timestamp",
            f"TIMESTAMP {_show(text)} is not 'YYYY-MM-DD HH:MM:SS[.fraction][+HH:MM]'",
            f"fix the timestamp, {_SKIP_HINT}",
        ) from None
    frac = (m.group(7) or "")[:9].ljust(9, "0")
    secs = (day.toordinal() - _EPOCH_DAY) * 86400 + hh * 3600 + mm * 60 + ss
    if m.group(9):  # an offset east of UTC is ahead of it: subtract to get UTC
        if int(m.group(10)) > 14 or int(m.group(11)) > 59:
            raise _Bad(
                "bad_timestamp",
                f"TIMESTAMP {_show(text)} has no valid UTC offset (-12:00 to +14:00)",
                f"fix the offset, {_SKIP_HINT}",
            )
        off = int(m.group(10)) * 3600 + int(m.group(11)) * 60
        secs -= off if m.group(9) == "+" else -off
    ns = secs * 1_000_000_000 + int(frac)
    if not _INT64_MIN <= ns <= _INT64_MAX:  # nanoseconds since 1970 must fit in int64
        raise _Bad(
            "bad_timestamp",
            f"TIMESTAMP {_show(text)} is out of range (years 1678-2261)",
            f"fix the timestamp, {_SKIP_HINT}",
        )
    return ns


def _azure_int(text: str, name: str) -> int:
    text = text.strip()
    if not re.fullmatch(r"[+-]?\d+", text):
        raise _Bad(
            "wrong_type",
            f"{name} must be an integer, got {_show(text)}",
            f"fix the value, {_SKIP_HINT}",
        )
    value = int(text) if len(text) <= 25 else _INT64_MAX + 1  # no int() of 5000 digits
    if not _INT64_MIN <= value <= _INT64_MAX:
        raise _Bad(
            "wrong_type",
            f"{name} = {_show(text)} does not fit in a 64-bit integer",
            f"fix the value, {_SKIP_HINT}",
        )
    return value


def _azure_row(fields: list[str], where: dict[str, int], ncols: int) -> tuple[int, int, int]:
    if len(fields) != ncols:
        raise _Bad(
            "malformed_line",
            f"expected {ncols} comma-separated fields, got {len(fields)}",
            f"fix or delete the line, {_SKIP_HINT}",
        )
    for name in AZURE_COLUMNS:
        if not fields[where[name]].strip():
            raise _Bad(
                "missing_field",
                f"{name} is empty",
                f"fill in the value, {_SKIP_HINT}",
            )
    ns = _azure_timestamp_ns(fields[where["TIMESTAMP"]])
    inp = _azure_int(fields[where["ContextTokens"]], "ContextTokens")
    out = _azure_int(fields[where["GeneratedTokens"]], "GeneratedTokens")
    if inp <= 0:
        raise _Bad(
            "bad_input_length",
            f"ContextTokens must be positive, got {inp}",
            f"fix the row, {_SKIP_HINT}",
        )
    if out == 0:
        raise _Bad(
            "zero_output_length",
            "GeneratedTokens is 0 (a request must generate at least 1 token)",
            f"fix the row, {_SKIP_HINT}",
        )
    if out < 0:
        raise _Bad(
            "negative_output_length",
            f"GeneratedTokens must be at least 1, got {out}",
            f"fix the row, {_SKIP_HINT}",
        )
    return ns, inp, out


def _split_csv_line(raw: bytes) -> list[str]:
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise _Bad(
            "malformed_line", "line is not valid UTF-8", f"fix or delete the line, {_SKIP_HINT}"
        ) from None
    try:
        return next(csv.reader([text.rstrip("\r\n")]), [])
    except csv.Error as exc:
        raise _Bad(
            "malformed_line", f"malformed CSV ({exc})", f"fix or delete the line, {_SKIP_HINT}"
        ) from None


def _csv_header(raw, path: str, columns, show_name, what: str) -> tuple[dict[str, int], int]:
    """The header line of a CSV trace: where each required column is, and how many columns
    there are; a missing column is one line naming it."""
    try:
        header = [h.strip() for h in _split_csv_line(raw)]
    except _Bad:
        header = []
    missing = [c for c in columns if c not in header]
    if missing:
        raise TraceFormatError(
            f"header lacks column {show_name(missing[0])} (got {_show(','.join(header), 60)})",
            where=f"{path}:1",
            fix=f"the first line must name the columns of {what}",
        )
    return {c: header.index(c) for c in columns}, len(header)


def _azure_slow(path: str, skip_bad: bool, skips: Counter[str]) -> dict[str, np.ndarray] | None:
    ns, inp, out = array("q"), array("q"), array("q")
    prev_ns, prev_line = None, 0
    where: dict[str, int] = {}
    ncols = 0
    with _open_lines(path) as fh:
        for lineno, raw in enumerate(fh, start=1):
            if lineno == 1:
                where, ncols = _csv_header(raw, path, AZURE_COLUMNS, str, f"an {_AZURE_HINT}")
                continue
            if not raw.strip():
                continue
            try:
                t, i, o = _azure_row(_split_csv_line(raw), where, ncols)
                if prev_ns is not None and t < prev_ns:
                    raise _Bad(
                        "unsorted_timestamp",
                        f"TIMESTAMP is earlier than the one on line {prev_line} "
                        "(timestamps go backwards)",
                        "sort the file by TIMESTAMP, or use --skip-bad to drop rows "
                        "that go backwards",
                    )
            except _Bad as bad:
                if not skip_bad:
                    raise TraceFormatError(
                        bad.what, where=f"{path}:{lineno}", fix=bad.fix
                    ) from None
                skips[bad.reason] += 1
                continue
            prev_ns, prev_line = t, lineno
            ns.append(t)
            inp.append(i)
            out.append(o)
    if not ns:
        return None
    return _azure_assemble(*(np.frombuffer(a, dtype=np.int64).copy() for a in (ns, inp, out)))


# --------------------------------------------------------------------------- dispatch

# --------------------------------------------------------------------------- BurstGPT

_BURST_HINT = "BurstGPT CSV (Timestamp,Model,Request tokens,Response tokens,...)"


def read_burstgpt(path: str | os.PathLike[str], *, skip_bad: bool = False) -> TraceLoad:
    """Read a BurstGPT CSV: ``Timestamp`` (seconds from the trace start), ``Request tokens``
    and ``Response tokens``. Failed requests (0 response tokens; BurstGPT logs them) never
    reach decode, so they are dropped and counted as ``failed_request``. Rows must be in
    time order. No prefix information (overlay sharing as for Azure)."""
    path = str(path)
    _check_readable(path)
    skips: Counter[str] = Counter()
    t, inp, out = array("d"), array("q"), array("q")
    where: dict[str, int] = {}
    ncols, prev_t, prev_line = 0, -math.inf, 0
    with open(path, "rb") as fh:
        for lineno, raw in enumerate(fh, start=1):
            if lineno == 1:
                where, ncols = _csv_header(raw, path, BURSTGPT_COLUMNS, repr, f"a {_BURST_HINT}")
                continue
            if not raw.strip():
                continue
            try:
                ts, i, o = _burst_row(_split_csv_line(raw), where, ncols)
                if ts < prev_t:
                    raise _Bad(
                        "unsorted_timestamp",
                        f"Timestamp is earlier than the one on line {prev_line} "
                        "(timestamps go backwards)",
                        "sort the file by Timestamp, or use --skip-bad to drop rows "
                        "that go backwards",
                    )
            except _Bad as bad:
                if bad.reason == "failed_request":
                    skips[bad.reason] += 1
                    continue
                if not skip_bad:
                    raise TraceFormatError(
                        bad.what, where=f"{path}:{lineno}", fix=bad.fix
                    ) from None
                skips[bad.reason] += 1
                continue
            prev_t, prev_line = ts, lineno
            t.append(ts)
            inp.append(i)
            out.append(o)
    cols = None
    if t:
        ts_arr = np.frombuffer(t, dtype=np.float64).copy()
        n = ts_arr.shape[0]
        cols = {
            "arrival": ts_arr - ts_arr[0],
            "prompt_len": np.frombuffer(inp, dtype=np.int64).copy(),
            "output_len": np.frombuffer(out, dtype=np.int64).copy(),
            "blk_ptr": np.zeros(n + 1, dtype=np.int64),
            "blk_hash": np.zeros(0, dtype=np.int64),
            "blk_tokens": np.zeros(0, dtype=np.int64),
            "prefix_id": np.full(n, -1, dtype=np.int64),
        }
    return _finish(path, "burstgpt", cols, skips, _BURST_HINT)


def _burst_row(fields: list[str], where: dict[str, int], ncols: int) -> tuple[float, int, int]:
    if len(fields) != ncols:
        raise _Bad(
            "malformed_line",
            f"expected {ncols} comma-separated fields, got {len(fields)}",
            f"fix or delete the line, {_SKIP_HINT}",
        )
    text = fields[where["Timestamp"]].strip()
    try:
        ts = float(text)
    except ValueError:
        ts = math.nan
    if not (math.isfinite(ts) and ts >= 0):
        raise _Bad(
            "bad_timestamp",
            f"Timestamp must be a number of seconds >= 0, got {_show(text)}",
            f"fix the timestamp, {_SKIP_HINT}",
        )
    inp = _azure_int(fields[where["Request tokens"]], "Request tokens")
    out = _azure_int(fields[where["Response tokens"]], "Response tokens")
    if out == 0:
        raise _Bad("failed_request", "a failed request (0 response tokens)", "")
    if inp <= 0:
        raise _Bad(
            "bad_input_length",
            f"Request tokens must be positive, got {inp}",
            f"fix the row, {_SKIP_HINT}",
        )
    if out < 0:
        raise _Bad(
            "negative_output_length",
            f"Response tokens must be at least 0, got {out}",
            f"fix the row, {_SKIP_HINT}",
        )
    return ts, inp, out


# --------------------------------------------------------------------------- dispatch

_EXTENSIONS = {".jsonl": "mooncake", ".csv": "azure"}


def sniff_format(path: str | os.PathLike[str]) -> str | None:
    """The format a file's name and first line say: a ``.csv`` whose header names
    ``Request tokens`` is BurstGPT; a ``.jsonl`` whose first record has ``chat_id`` and
    ``turn``, or whose name says ``blksz_16``, is Qwen-Bailian."""
    p = Path(path)
    name = p.name.lower().removesuffix(".gz")  # trace.jsonl.gz is a compressed .jsonl
    fmt = _EXTENSIONS.get(Path(name).suffix)
    if fmt is None:
        return None
    import zlib

    try:
        with _open_stream(str(p)) as fh:  # a gzip's first decompressed line
            first = fh.readline(65536).decode("utf-8-sig", errors="replace")
    except (OSError, EOFError, zlib.error):
        return fmt  # the reader reports the error
    if fmt == "azure" and "Request tokens" in first:
        return "burstgpt"
    if fmt == "mooncake" and ("blksz_16" in p.name or ('"chat_id"' in first and '"turn"' in first)):
        return "bailian"
    return fmt


def read_trace(path: str | os.PathLike[str], fmt: str | None = None, **kw: Any) -> TraceLoad:
    """Read a trace; ``fmt`` is one of :data:`FORMATS` or ``None`` (from the extension and
    the first line, see :func:`sniff_format`). Options a format has no use for
    (``block_size``, ``time_unit_s`` for the CSV formats) are ignored; ``None`` for them
    means the format's own (Mooncake 512 tokens and ms, Bailian 16 tokens and s)."""
    if fmt is None:
        fmt = sniff_format(path)
        if fmt is None:
            raise TraceFormatError(
                f"cannot tell the trace format from the extension {Path(path).suffix!r}",
                where=str(path),
                fix="name the file .jsonl (Mooncake, Bailian) or .csv (Azure, BurstGPT), or "
                "pass the format explicitly (" + ", ".join(FORMATS) + ")",
            )
    if kw.get("block_size") is None:
        kw.pop("block_size", None)
    if kw.get("time_unit_s") is None:
        kw.pop("time_unit_s", None)
    if fmt == "mooncake":
        return read_mooncake(path, **kw)
    if fmt == "bailian":
        kw.setdefault("block_size", BAILIAN_BLOCK_SIZE)
        kw.setdefault("time_unit_s", BAILIAN_TIME_UNIT_S)
        load = read_mooncake(path, **kw)
        load.format = "bailian"
        return load
    kw = {k: v for k, v in kw.items() if k not in ("block_size", "time_unit_s")}
    if fmt == "azure":
        return read_azure(path, **kw)
    if fmt == "burstgpt":
        return read_burstgpt(path, **kw)
    raise TraceFormatError(
        f"unknown trace format {fmt!r}", where=str(path), fix="use " + ", ".join(FORMATS)
    )
