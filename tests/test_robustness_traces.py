"""Mutation fuzzing of the trace parsers: valid records with one field or line broken.

tests/test_traces.py fuzzes junk lines; here each example starts from valid Mooncake / Azure
records, mutates one of them (a field's value or type, a missing or extra field, a torn or
re-encoded line), and checks that the reader either loads the file or raises one clear
TraceFormatError naming ``file:line`` of the mutated record (or the next one, when the
mutation makes the timestamps go backwards there). With ``skip_bad`` every non-blank line is
either loaded or counted as skipped.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from robustness_util import assert_clear

from prefixbench.errors import TraceFormatError
from prefixbench.workload.traces import read_azure, read_mooncake

FUZZ = {"deadline": None, "suppress_health_check": list(HealthCheck)}
BS = 512

json_values = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.sampled_from([0, -1, 1, 2**63 - 1, 2**63, -(2**63) - 1, 1.5, -0.0, 1e308, "1", "", "NaN"]),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=6),
    st.lists(st.integers(-(2**64), 2**64), max_size=3),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)


def _record(t: float, inp: int, out: int, first_id: int) -> dict:
    return {
        "timestamp": t,
        "input_length": inp,
        "output_length": out,
        "hash_ids": list(range(first_id, first_id + -(-inp // BS))),
    }


valid_records = st.lists(
    st.tuples(st.integers(0, 5000), st.integers(1, 3000), st.integers(1, 400)),
    min_size=1,
    max_size=8,
).map(
    lambda rows: [
        _record(1000.0 + sum(r[0] for r in rows[: i + 1]), r[1], r[2], 100 * i)
        for i, r in enumerate(rows)
    ]
)


@st.composite
def mutated_mooncake(draw):
    recs = draw(valid_records)
    k = draw(st.integers(0, len(recs) - 1))
    victim = recs[k]
    op = draw(st.sampled_from(["value", "delete", "extra", "hash_elem", "hash_len", "line"]))
    field = draw(st.sampled_from(["timestamp", "input_length", "output_length", "hash_ids"]))
    if op == "value":
        victim[field] = draw(json_values)
    elif op == "delete":
        del victim[field]
    elif op == "extra":
        victim[draw(st.text(max_size=8))] = draw(json_values)
    elif op == "hash_elem" and victim["hash_ids"]:
        i = draw(st.integers(0, len(victim["hash_ids"]) - 1))
        victim["hash_ids"][i] = draw(json_values)
    elif op == "hash_len":
        victim["hash_ids"] = (
            victim["hash_ids"] + [7] if draw(st.booleans()) else victim["hash_ids"][:-1]
        )
    lines = [json.dumps(r).encode() for r in recs]
    if op == "line":  # tear or re-encode the line itself
        raw = lines[k]
        how = draw(st.sampled_from(["cut", "bytes", "utf16", "array", "nul"]))
        if how == "cut":
            raw = raw[: draw(st.integers(1, max(1, len(raw) - 1)))]
        elif how == "bytes":
            i = draw(st.integers(0, len(raw)))
            raw = raw[:i] + draw(st.binary(min_size=1, max_size=4)) + raw[i:]
        elif how == "utf16":
            raw = raw.decode().encode("utf-16")
        elif how == "array":
            raw = b"[" + raw + b"]"
        else:
            raw = raw.replace(b",", b"\x00,", 1)
        lines[k] = raw
    newline = draw(st.sampled_from([b"\n", b"\r\n"]))
    return newline.join(lines) + newline, k


def _check_line(err: TraceFormatError, path: Path, k: int) -> None:
    line = assert_clear(err, where=str(path))
    event(f"refused: {err.what.split(' ')[0]} {err.what.split(' ')[1] if ' ' in err.what else ''}")
    if err.what.startswith("timestamps span"):  # a property of the whole trace, not of a line
        assert err.where == str(path), line
        return
    assert err.where.startswith(f"{path}:"), line
    lineno = int(err.where.rsplit(":", 1)[1])
    assert lineno in (k + 1, k + 2), f"error on line {lineno}, mutated line {k + 1}: {line}"


@pytest.fixture(scope="module")
def fuzz_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("trace_fuzz")


@settings(max_examples=300, **FUZZ)
@given(case=mutated_mooncake())
def test_mutated_mooncake_records(fuzz_dir: Path, case: tuple[bytes, int]) -> None:
    data, k = case
    path = fuzz_dir / "m.jsonl"
    path.write_bytes(data)
    try:
        load = read_mooncake(path, block_size=BS)
    except TraceFormatError as err:
        _check_line(err, path, k)
    else:
        load.requests.validate()
        event("loaded")
    try:
        load = read_mooncake(path, block_size=BS, skip_bad=True)
    except TraceFormatError as err:  # nothing at all is left, or the kept span is absurd
        line = assert_clear(err, where=str(path))
        assert "no valid records" in line or "timestamps span" in line, line
        return
    load.requests.validate()
    nonblank = sum(1 for line in data.split(b"\n") if line.strip())
    assert len(load.requests) + load.skipped == nonblank
    assert load.skipped == sum(load.skip_reasons.values())


AZURE_HEADER = "TIMESTAMP,ContextTokens,GeneratedTokens"

azure_values = st.one_of(
    st.text(max_size=12).filter(lambda s: "\n" not in s and "\r" not in s),
    st.integers(-(2**70), 2**70).map(str),
    st.sampled_from(
        [
            "",
            " ",
            "0",
            "-1",
            "+5",
            "1.5",
            "1e3",
            "9223372036854775808",
            '"12"',
            '"1,2"',
            "NaN",
            "2023-11-16 18:15:46",
            "2023-02-30 00:00:00",
            "2023-11-16T18:15:46.1234567",
            "2023-11-16 25:00:00",
            "1677-01-01 00:00:00",
            "2262-12-31 00:00:00",
            "16/11/2023 18:15",
            "2023-11-16 18:15:46.",
            "2023-11-16 18:15:46.12345678901",
        ]
    ),
)


@st.composite
def mutated_azure(draw):
    n = draw(st.integers(1, 8))
    rows = []
    for i in range(n):
        rows.append(
            [
                f"2023-11-16 18:{15 + i:02d}:46.{draw(st.integers(0, 9999999)):07d}",
                str(draw(st.integers(1, 5000))),
                str(draw(st.integers(1, 500))),
            ]
        )
    k = draw(st.integers(0, n - 1))
    op = draw(st.sampled_from(["value", "drop_field", "extra_field", "line"]))
    if op == "value":
        rows[k][draw(st.integers(0, 2))] = draw(azure_values)
    elif op == "drop_field":
        rows[k].pop(draw(st.integers(0, 2)))
    elif op == "extra_field":
        rows[k].insert(draw(st.integers(0, 3)), draw(azure_values))
    lines = [",".join(r).encode() for r in rows]
    if op == "line":
        raw = lines[k]
        how = draw(st.sampled_from(["cut", "bytes", "quote"]))
        if how == "cut":
            raw = raw[: draw(st.integers(1, len(raw) - 1))]
        elif how == "bytes":
            i = draw(st.integers(0, len(raw)))
            raw = (
                raw[:i]
                + draw(st.binary(min_size=1, max_size=3)).replace(b"\n", b"").replace(b"\r", b"")
                + raw[i:]
            )
        else:
            raw = b'"' + raw
        lines[k] = raw
    newline = draw(st.sampled_from([b"\n", b"\r\n"]))
    return newline.join([AZURE_HEADER.encode(), *lines]) + newline, k + 1  # +1: the header


@settings(max_examples=300, **FUZZ)
@given(case=mutated_azure())
def test_mutated_azure_rows(fuzz_dir: Path, case: tuple[bytes, int]) -> None:
    data, k = case
    path = fuzz_dir / "a.csv"
    path.write_bytes(data)
    try:
        load = read_azure(path)
    except TraceFormatError as err:
        _check_line(err, path, k)
    else:
        load.requests.validate()
        event("loaded")
    try:
        load = read_azure(path, skip_bad=True)
    except TraceFormatError as err:  # nothing at all is left, or the kept span is absurd
        line = assert_clear(err, where=str(path))
        assert "no valid records" in line or "timestamps span" in line, line
        return
    load.requests.validate()
    nonblank = sum(1 for line in data.split(b"\n")[1:] if line.strip())
    assert len(load.requests) + load.skipped == nonblank


@settings(max_examples=100, **FUZZ)
@given(
    header=st.lists(
        st.sampled_from(
            ["TIMESTAMP", "ContextTokens", "GeneratedTokens", "x", "", " TIMESTAMP", "timestamp"]
        ),
        max_size=4,
    ).map(",".join)
)
def test_mutated_azure_header(fuzz_dir: Path, header: str) -> None:
    path = fuzz_dir / "h.csv"
    path.write_text(f"{header}\n2023-11-16 18:15:46.1,374,44\n")
    try:
        read_azure(path).requests.validate()
    except TraceFormatError as err:
        assert_clear(err, where=str(path))


def test_a_mutated_timestamp_that_stretches_the_span_is_refused_for_the_whole_trace(
    tmp_path: Path,
) -> None:
    # found by the fuzzer: one record 1e10 s before the next; the span is the trace's
    path = tmp_path / "m.jsonl"
    path.write_bytes(
        b'{"timestamp": -9999999999001, "input_length": 1, "output_length": 1, "hash_ids": [0]}\n'
        b'{"timestamp": 1000.0, "input_length": 1, "output_length": 1, "hash_ids": [100]}\n'
    )
    for skip_bad in (False, True):
        with pytest.raises(TraceFormatError) as e:
            read_mooncake(path, block_size=BS, skip_bad=skip_bad)
        line = assert_clear(e.value, where=str(path))
        assert e.value.where == str(path) and "timestamps span 1e+10 s" in line, line
