"""Trace readers (Mooncake JSONL, Azure CSV) and replay controls."""

from __future__ import annotations

import json
import math
import statistics
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tracestats import infinite_cache_hit_ratio

from prefixbench.errors import ScenarioError, TraceFormatError
from prefixbench.workload import traces
from prefixbench.workload.controls import limit, rescale_rate, tile, window
from prefixbench.workload.requests import Requests
from prefixbench.workload.traces import read_azure, read_mooncake, read_trace

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "traces"
DATA = Path(__file__).resolve().parent / "data"
CONV_SLICE = DATA / "conversation_trace_head300.jsonl"  # first 300 lines, unchanged
AZURE_SLICE = DATA / "AzureLLMInferenceTrace_conv_head300.csv"  # header + 299 rows, CRLF

needs_shared = pytest.mark.skipif(
    not (SHARED / "conversation_trace.jsonl").exists(), reason="../shared/traces not present"
)

FULL = [
    ("conversation_trace.jsonl", "mooncake", 12_031),
    ("synthetic_trace.jsonl", "mooncake", 3_993),
    ("AzureLLMInferenceTrace_code.csv", "azure", 8_819),
    ("AzureLLMInferenceTrace_conv.csv", "azure", 19_366),
]

GOOD = {"timestamp": 0, "input_length": 700, "output_length": 5, "hash_ids": [1, 2]}
HEADER = "TIMESTAMP,ContextTokens,GeneratedTokens\r\n"
ROW = "2023-11-16 18:15:46.6805900,374,44\r\n"


def jsonl(*records: object) -> str:
    return "".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records)


def rec(**changes: object) -> dict[str, object]:
    out = dict(GOOD)
    for key, value in changes.items():
        if value is ...:
            del out[key]
        else:
            out[key] = value
    return out


def write(tmp_path: Path, name: str, text: str | bytes) -> Path:
    path = tmp_path / name
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_bytes(text.encode())
    return path


def chain_tokens(r: Requests) -> np.ndarray:
    """Tokens covered by each request's block chain."""
    sums = np.zeros(len(r), dtype=np.int64)
    owner = np.repeat(np.arange(len(r)), np.diff(r.blk_ptr))
    np.add.at(sums, owner, r.blk_tokens)
    return sums


def hit_ratio_of(r: Requests) -> float:
    """Infinite-cache hit ratio from parsed Requests (independent of tracestats' parsing)."""
    seen: set[int] = set()
    hits = 0
    for i in range(len(r)):
        ids = r.blk_hash[r.blk_ptr[i] : r.blk_ptr[i + 1]].tolist()
        toks = r.blk_tokens[r.blk_ptr[i] : r.blk_ptr[i + 1]]
        run = 0
        while run < len(ids) and ids[run] in seen:
            run += 1
        hits += int(toks[:run].sum())
        seen.update(ids)
    return hits / int(r.prompt_len.sum())


# --------------------------------------------------------------------------- shipped data


def test_slices_load_without_shared() -> None:
    conv = read_trace(CONV_SLICE)
    az = read_trace(AZURE_SLICE)
    assert (conv.format, len(conv.requests), conv.skipped) == ("mooncake", 300, 0)
    assert (az.format, len(az.requests), az.skipped) == ("azure", 299, 0)
    assert b"\r\n" in AZURE_SLICE.read_bytes()  # the slice keeps the original CRLF
    for load in (conv, az):
        load.requests.validate()


def test_mooncake_slice_matches_raw_json() -> None:
    r = read_mooncake(CONV_SLICE).requests
    raw = [json.loads(line) for line in CONV_SLICE.read_text().splitlines()]
    ts0 = raw[0]["timestamp"]
    assert r.arrival.tolist() == [(x["timestamp"] - ts0) * 1e-3 for x in raw]
    assert r.prompt_len.tolist() == [x["input_length"] for x in raw]
    assert r.output_len.tolist() == [x["output_length"] for x in raw]
    for i, x in enumerate(raw):
        assert r.blk_hash[r.blk_ptr[i] : r.blk_ptr[i + 1]].tolist() == x["hash_ids"]
        assert r.prefix_id[i] == x["hash_ids"][0]


def check_chains(r: Requests, block_size: int = 512) -> None:
    assert np.array_equal(chain_tokens(r), r.prompt_len)
    last = r.blk_ptr[1:] - 1
    assert np.all(r.blk_tokens[last] >= 1) and np.all(r.blk_tokens[last] <= block_size)
    full = np.ones(len(r.blk_tokens), dtype=bool)
    full[last] = False
    assert np.all(r.blk_tokens[full] == block_size)


def test_slice_block_chains_reconstruct_input_length() -> None:
    check_chains(read_mooncake(CONV_SLICE).requests)


def test_azure_slice_fractional_seconds_exact() -> None:
    r = read_azure(AZURE_SLICE).requests
    # 18:15:46.6805900 -> 18:15:50.9951690 -> 18:15:51.2224670
    assert r.arrival[0] == 0.0
    assert r.arrival[1] == 4.314579
    assert r.arrival[2] == 4.541877
    assert r.prompt_len[:3].tolist() == [374, 396, 879]
    assert r.output_len[:3].tolist() == [44, 109, 55]
    assert r.blk_ptr.tolist() == [0] * 300 and len(r.blk_hash) == 0
    assert np.all(r.prefix_id == -1)


def test_azure_seventh_fractional_digit(tmp_path: Path) -> None:
    text = HEADER + "2023-11-16 18:15:46.0000000,5,1\r\n2023-11-16 18:15:46.0000001,5,1\r\n"
    text += "2023-11-16 18:15:47.1234567,5,1\r\n"
    r = read_azure(write(tmp_path, "t.csv", text)).requests
    assert r.arrival.tolist() == [0.0, 1e-7, 1.1234567]


@needs_shared
@pytest.mark.parametrize(("name", "fmt", "count"), FULL)
def test_full_trace_counts(name: str, fmt: str, count: int) -> None:
    load = read_trace(SHARED / name)
    r = load.requests
    assert (load.format, len(r), load.skipped) == (fmt, count, 0)
    r.validate()
    assert r.arrival[0] == 0.0 and np.all(np.diff(r.arrival) >= 0)
    if fmt == "mooncake":
        check_chains(r)


@needs_shared
def test_conversation_means_match_readme() -> None:
    r = read_mooncake(SHARED / "conversation_trace.jsonl").requests
    assert r.prompt_len.mean() == pytest.approx(12_035, abs=1)
    assert r.output_len.mean() == pytest.approx(343, abs=1)
    assert r.arrival[-1] == pytest.approx(3536.999)


@needs_shared
def test_azure_code_first_gaps_exact() -> None:
    # 18:17:03.9799600 -> 18:17:04.0319600 -> 18:17:04.0781490
    r = read_azure(SHARED / "AzureLLMInferenceTrace_code.csv").requests
    assert r.arrival[:3].tolist() == [0.0, 0.052, 0.098189]


@needs_shared
def test_conversation_load_time_reported() -> None:
    path = SHARED / "conversation_trace.jsonl"
    read_mooncake(path)  # warm-up: lazy polars import
    times = []
    for _ in range(5):
        t0 = time.perf_counter()
        load = read_mooncake(path)
        times.append(time.perf_counter() - t0)
    assert len(load.requests) == 12_031
    print(f"\nconversation_trace.jsonl load: median {statistics.median(times) * 1e3:.1f} ms of 5")


def test_infinite_cache_hit_ratio_slice_agrees_with_parser() -> None:
    ratio = infinite_cache_hit_ratio(CONV_SLICE)
    assert 0.0 < ratio < 1.0
    assert hit_ratio_of(read_mooncake(CONV_SLICE).requests) == pytest.approx(ratio, rel=1e-12)


@needs_shared
def test_infinite_cache_hit_ratio_conversation() -> None:
    path = SHARED / "conversation_trace.jsonl"
    ratio = infinite_cache_hit_ratio(path)
    print(f"\nconversation_trace.jsonl infinite-cache hit ratio: {ratio:.6f}")
    assert hit_ratio_of(read_mooncake(path).requests) == pytest.approx(ratio, rel=1e-12)


# --------------------------------------------------------------------------- Mooncake errors

MOONCAKE_BAD = [
    ("malformed", '{"timestamp": 1, "input_length": 7', "malformed JSON", "malformed_line"),
    ("not_object", "[1, 2, 3]", "not an object", "malformed_line"),
    ("missing", rec(hash_ids=...), "missing field 'hash_ids'", "missing_field"),
    ("null", rec(output_length=None), "missing field 'output_length'", "missing_field"),
    ("str_type", rec(input_length="700"), "'input_length' must be an integer", "wrong_type"),
    ("float_type", rec(input_length=700.0), "'input_length' must be an integer", "wrong_type"),
    ("bool_type", rec(output_length=True), "'output_length' must be an integer", "wrong_type"),
    ("ts_type", rec(timestamp="soon"), "'timestamp' must be a finite number", "wrong_type"),
    ("hash_type", rec(hash_ids=[1, 2.5]), "'hash_ids' must hold", "wrong_type"),
    ("hash_not_list", rec(hash_ids="1,2"), "'hash_ids' must be a list", "wrong_type"),
    ("hash_huge", rec(hash_ids=[1, 2**64]), "'hash_ids' must hold", "wrong_type"),
    (
        "zero_input",
        rec(input_length=0, hash_ids=[]),
        "input_length must be positive",
        "bad_input_length",
    ),
    ("neg_input", rec(input_length=-3), "input_length must be positive", "bad_input_length"),
    ("zero_output", rec(output_length=0), "output_length is 0", "zero_output_length"),
    (
        "neg_output",
        rec(output_length=-1),
        "output_length must be at least 1",
        "negative_output_length",
    ),
    ("blocks", rec(hash_ids=[1, 2, 3]), "needs ceil(700/512) = 2 blocks", "block_count_mismatch"),
    ("unsorted", rec(timestamp=-5), "timestamps go backwards", "unsorted_timestamp"),
]


@pytest.mark.parametrize(
    ("case", "line", "words", "reason"), MOONCAKE_BAD, ids=[c[0] for c in MOONCAKE_BAD]
)
def test_mooncake_error_names_file_and_line(
    tmp_path: Path, case: str, line: object, words: str, reason: str
) -> None:
    # the bad record is on line 4: good, blank, good, bad, good
    path = write(
        tmp_path, f"{case}.jsonl", jsonl(GOOD, "", rec(timestamp=1), line, rec(timestamp=9))
    )
    with pytest.raises(TraceFormatError) as err:
        read_mooncake(path)
    assert err.value.where == f"{path}:4"
    assert words in str(err.value)
    assert "\n" not in str(err.value)
    assert str(err.value).startswith(f"{path}:4: ")
    if reason == "unsorted_timestamp":
        assert "sort the file by timestamp" in str(err.value)
        assert "line 3" in str(err.value)
    else:
        assert "--skip-bad" in str(err.value)
    load = read_mooncake(path, skip_bad=True)
    assert (len(load.requests), load.skipped, load.skip_reasons) == (3, 1, {reason: 1})
    load.requests.validate()


def test_mooncake_skip_bad_counts_by_reason(tmp_path: Path) -> None:
    lines = [
        rec(timestamp=100),
        rec(timestamp=50),  # backwards: skipped
        "not json",
        rec(timestamp=150, output_length=0),
        rec(timestamp=120),  # not behind the last accepted (100): kept
        rec(timestamp=110),  # behind the accepted 120: skipped
        rec(timestamp=200, input_length=-1),
        rec(timestamp=300, hash_ids=[1]),
        rec(timestamp=400),
    ]
    load = read_mooncake(write(tmp_path, "t.jsonl", jsonl(*lines)), skip_bad=True)
    assert load.skipped == 6
    assert load.skip_reasons == {
        "bad_input_length": 1,
        "block_count_mismatch": 1,
        "malformed_line": 1,
        "unsorted_timestamp": 2,
        "zero_output_length": 1,
    }
    assert load.requests.arrival.tolist() == [0.0, 0.02, 0.3]


def test_mooncake_all_bad_with_skip_bad_still_errors(tmp_path: Path) -> None:
    path = write(tmp_path, "t.jsonl", jsonl("junk", rec(output_length=-2)))
    with pytest.raises(TraceFormatError, match="no valid records: all 2 were skipped") as err:
        read_mooncake(path, skip_bad=True)
    assert err.value.where == str(path)


@pytest.mark.parametrize("text", ["", "\n\n  \n"])
def test_mooncake_empty_file(tmp_path: Path, text: str) -> None:
    path = write(tmp_path, "t.jsonl", text)
    with pytest.raises(TraceFormatError, match="trace has no records") as err:
        read_mooncake(path, skip_bad=True)
    assert err.value.where == str(path)


def test_unreadable_paths(tmp_path: Path) -> None:
    for path in (tmp_path / "missing.jsonl", tmp_path):
        with pytest.raises(TraceFormatError, match="cannot read trace file") as err:
            read_mooncake(path)
        assert err.value.where == str(path)
    with pytest.raises(TraceFormatError, match="cannot read trace file"):
        read_azure(tmp_path / "missing.csv")


def test_wrong_block_size_is_explained() -> None:
    with pytest.raises(TraceFormatError, match="block size") as err:
        read_mooncake(CONV_SLICE, block_size=256)
    assert err.value.where == f"{CONV_SLICE}:1"
    with pytest.raises(TraceFormatError, match="block size must be a positive integer"):
        read_mooncake(CONV_SLICE, block_size=0)


def test_time_unit_and_crlf_jsonl(tmp_path: Path) -> None:
    text = jsonl(rec(timestamp=10), rec(timestamp=12.5)).replace("\n", "\r\n")
    r = read_mooncake(write(tmp_path, "t.jsonl", text), time_unit_s=1.0).requests
    assert r.arrival.tolist() == [0.0, 2.5]
    assert r.blk_tokens.tolist() == [512, 188, 512, 188]


def test_unknown_fields_ignored_and_format_dispatch(tmp_path: Path) -> None:
    path = write(tmp_path, "t.jsonl", jsonl(dict(GOOD, extra="x")))
    assert len(read_trace(path).requests) == 1
    other = write(tmp_path, "t.trace", jsonl(GOOD))
    with pytest.raises(TraceFormatError, match="extension"):
        read_trace(other)
    assert read_trace(other, "mooncake").format == "mooncake"
    with pytest.raises(TraceFormatError, match="unknown trace format"):
        read_trace(other, "parquet")
    assert read_trace(AZURE_SLICE, block_size=512).format == "azure"


# --------------------------------------------------------------------------- Azure errors

AZURE_BAD = [
    (
        "fields",
        "2023-11-16 18:15:47.0,374\r\n",
        "expected 3 comma-separated fields",
        "malformed_line",
    ),
    (
        "extra",
        "2023-11-16 18:15:47.0,374,44,9\r\n",
        "expected 3 comma-separated fields",
        "malformed_line",
    ),
    ("empty", "2023-11-16 18:15:47.0,,44\r\n", "ContextTokens is empty", "missing_field"),
    ("type", "2023-11-16 18:15:47.0,37.5,44\r\n", "ContextTokens must be an integer", "wrong_type"),
    ("ts", "yesterday,374,44\r\n", "TIMESTAMP 'yesterday' is not", "bad_timestamp"),
    ("date", "2023-02-30 18:15:47.0,374,44\r\n", "is not 'YYYY-MM-DD", "bad_timestamp"),
    (
        "ctx0",
        "2023-11-16 18:15:47.0,0,44\r\n",
        "ContextTokens must be positive",
        "bad_input_length",
    ),
    ("gen0", "2023-11-16 18:15:47.0,374,0\r\n", "GeneratedTokens is 0", "zero_output_length"),
    (
        "genneg",
        "2023-11-16 18:15:47.0,374,-4\r\n",
        "GeneratedTokens must be at least 1",
        "negative_output_length",
    ),
    (
        "unsorted",
        "2023-11-16 18:15:40.0,374,44\r\n",
        "timestamps go backwards",
        "unsorted_timestamp",
    ),
]


@pytest.mark.parametrize(
    ("case", "line", "words", "reason"), AZURE_BAD, ids=[c[0] for c in AZURE_BAD]
)
def test_azure_error_names_file_and_line(
    tmp_path: Path, case: str, line: str, words: str, reason: str
) -> None:
    later = "2023-11-16 18:15:48.0,10,2\r\n"
    path = write(tmp_path, f"{case}.csv", HEADER + ROW + ROW + line + later)
    with pytest.raises(TraceFormatError) as err:
        read_azure(path)
    assert err.value.where == f"{path}:4"
    assert words in str(err.value) and "\n" not in str(err.value)
    fix = "sort the file by TIMESTAMP" if reason == "unsorted_timestamp" else "--skip-bad"
    assert fix in str(err.value)
    load = read_azure(path, skip_bad=True)
    assert (len(load.requests), load.skip_reasons) == (3, {reason: 1})


def test_azure_header_problems(tmp_path: Path) -> None:
    path = write(tmp_path, "t.csv", "time,ctx,gen\r\n" + ROW)
    with pytest.raises(TraceFormatError, match="header lacks column TIMESTAMP") as err:
        read_azure(path, skip_bad=True)
    assert err.value.where == f"{path}:1"
    for text in ("", HEADER, HEADER + "\r\n"):
        with pytest.raises(TraceFormatError, match="trace has no records"):
            read_azure(write(tmp_path, "e.csv", text))


def test_azure_reordered_columns_and_lf(tmp_path: Path) -> None:
    text = "GeneratedTokens,TIMESTAMP,ContextTokens\n7,2023-11-16 18:15:46.5,100\n"
    text += "8,2023-11-16 18:15:47,200\n"
    r = read_azure(write(tmp_path, "t.csv", text)).requests
    assert r.arrival.tolist() == [0.0, 0.5]
    assert r.prompt_len.tolist() == [100, 200] and r.output_len.tolist() == [7, 8]


# --------------------------------------------------------------------------- fuzzing

junk_value = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False),
    st.text(max_size=5),
    st.lists(st.integers(min_value=-(2**66), max_value=2**66), max_size=4),
)
junk_record = st.dictionaries(
    st.sampled_from(["timestamp", "input_length", "output_length", "hash_ids", "x"]), junk_value
).map(json.dumps)
junk_line = st.one_of(
    st.binary(max_size=40),
    st.text(max_size=40).map(str.encode),
    junk_record.map(str.encode),
)


@pytest.fixture(scope="module")
def fuzz_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fuzz")


def nonblank(data: bytes) -> int:
    return sum(1 for line in data.split(b"\n") if line.strip())


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(junk=st.lists(junk_line, min_size=1, max_size=4), where=st.integers(0, 3))
def test_fuzzed_mooncake_lines_only_raise_trace_errors(
    fuzz_dir: Path, junk: list[bytes], where: int
) -> None:
    good = [json.dumps(rec(timestamp=t)).encode() for t in range(3)]
    lines = good[:where] + junk + good[where:]
    data = b"\n".join(lines) + b"\n"
    path = fuzz_dir / "f.jsonl"
    path.write_bytes(data)
    for skip in (False, True):
        try:
            load = read_mooncake(path, skip_bad=skip)
        except TraceFormatError as err:
            assert "\n" not in str(err)
            continue
        load.requests.validate()
        if skip:
            assert len(load.requests) + load.skipped == nonblank(data)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    junk=st.lists(
        st.one_of(st.binary(max_size=40), st.text(max_size=40).map(str.encode)),
        min_size=1,
        max_size=4,
    )
)
def test_fuzzed_azure_lines_only_raise_trace_errors(fuzz_dir: Path, junk: list[bytes]) -> None:
    data = (HEADER + ROW).encode() + b"\r\n".join(junk) + b"\r\n" + ROW.encode()
    path = fuzz_dir / "f.csv"
    path.write_bytes(data)
    for skip in (False, True):
        try:
            load = read_azure(path, skip_bad=skip)
        except TraceFormatError as err:
            assert "\n" not in str(err)
            continue
        load.requests.validate()


good_record = st.builds(
    lambda gap, inp, out, ids: (gap, inp, out, ids),
    st.one_of(st.integers(0, 10**6), st.floats(0, 1e6)),
    st.integers(1, 3000),
    st.integers(1, 500),
    st.integers(0, 50),
)


@settings(max_examples=60, deadline=None)
@given(recs=st.lists(good_record, min_size=1, max_size=20))
def test_fast_and_slow_paths_agree(fuzz_dir: Path, recs: list[tuple]) -> None:
    t, lines = 1_000.0, []
    for gap, inp, out, seed in recs:
        t += gap
        ids = [seed * 1000 + k for k in range(-(-inp // 512))]
        lines.append({"timestamp": t, "input_length": inp, "output_length": out, "hash_ids": ids})
    path = fuzz_dir / "agree.jsonl"
    path.write_text(jsonl(*lines))
    fast = traces._mooncake_fast(str(path), 512, 1e-3)
    assert fast is not None
    slow = traces._mooncake_slow(str(path), 512, 1e-3, False, Counter())
    for key, value in fast.items():
        assert np.array_equal(value, slow[key]), key


# --------------------------------------------------------------------------- replay controls


@st.composite
def requests_strategy(draw: st.DrawFn) -> Requests:
    n = draw(st.integers(2, 25))
    gaps = draw(st.lists(st.floats(0, 50), min_size=n - 1, max_size=n - 1))
    arrival = np.concatenate([[0.0], np.cumsum(gaps)])
    prompt = np.array(draw(st.lists(st.integers(1, 200), min_size=n, max_size=n)), dtype=np.int64)
    bs = 16
    # every chain has >= 1 block: Requests.validate() cannot handle a trailing empty chain
    counts = np.array([draw(st.integers(1, -(-p // bs))) for p in prompt], dtype=np.int64)
    blk_ptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    pool = draw(st.integers(1, 6))
    # chains drawn from a small pool so requests share leading blocks
    hashes = np.array(
        [draw(st.integers(0, pool)) * 100 + j for c in counts for j in range(c)], dtype=np.int64
    )
    tokens = np.full(len(hashes), bs, dtype=np.int64)
    full = counts == -(-prompt // bs)  # chain covers the whole prompt: last block partial
    tokens[blk_ptr[1:][full] - 1] = prompt[full] - (counts[full] - 1) * bs
    with_id = np.array(draw(st.lists(st.booleans(), min_size=n, max_size=n)))
    prefix = np.where(with_id, hashes[blk_ptr[:-1]], -1).astype(np.int64)
    r = Requests(
        arrival=arrival,
        prompt_len=prompt,
        output_len=np.array(
            draw(st.lists(st.integers(1, 9), min_size=n, max_size=n)), dtype=np.int64
        ),
        blk_ptr=blk_ptr,
        blk_hash=hashes,
        blk_tokens=tokens,
        prefix_id=prefix,
    )
    r.validate()
    return r


@given(r=requests_strategy(), n=st.integers(1, 40))
def test_limit_takes_a_prefix(r: Requests, n: int) -> None:
    out = limit(r, n)
    m = min(n, len(r))
    assert len(out) == m
    out.validate()
    assert np.array_equal(out.arrival, r.arrival[:m])
    assert np.array_equal(out.blk_hash, r.blk_hash[: r.blk_ptr[m]])


@given(r=requests_strategy(), a=st.floats(0, 600), width=st.floats(0.001, 600))
def test_window_selects_and_rebases(r: Requests, a: float, width: float) -> None:
    b = a + width
    inside = (r.arrival >= a) & (r.arrival < b)
    if not inside.any():
        with pytest.raises(ScenarioError, match="no requests arrive"):
            window(r, a, b)
        return
    out = window(r, a, b)
    out.validate()
    assert len(out) == int(inside.sum())
    assert out.arrival[0] == 0.0
    assert np.allclose(out.arrival, r.arrival[inside] - r.arrival[inside][0])
    assert np.array_equal(out.prompt_len, r.prompt_len[inside])


@given(r=requests_strategy(), rate=st.floats(1e-3, 1e4))
def test_rescale_rate_hits_the_target(r: Requests, rate: float) -> None:
    span = r.arrival[-1] - r.arrival[0]
    if span <= 0:
        with pytest.raises(ScenarioError):
            rescale_rate(r, rate)
        return
    out = rescale_rate(r, rate)
    out.validate()
    assert (len(out) - 1) / (out.arrival[-1] - out.arrival[0]) == pytest.approx(rate, rel=1e-9)
    assert np.allclose(out.arrival * span, (r.arrival - r.arrival[0]) * out.arrival[-1])
    assert np.array_equal(out.blk_hash, r.blk_hash)


@given(r=requests_strategy(), n_total=st.integers(1, 120))
def test_tile_repeats_without_sharing(r: Requests, n_total: int) -> None:
    out = tile(r, n_total)
    out.validate()
    n = len(r)
    assert len(out) == n_total
    assert np.array_equal(chain_tokens(out), chain_tokens(r)[np.arange(n_total) % n])
    assert np.array_equal(out.prompt_len, r.prompt_len[np.arange(n_total) % n])
    span = r.arrival[-1] - r.arrival[0]
    period = span + span / (n - 1)
    copies = -(-n_total // n)
    for k in range(copies):
        part = out.slice(k * n, min((k + 1) * n, n_total))
        m = len(part)
        assert np.allclose(part.arrival, r.arrival[:m] + k * period)
        # same sharing structure inside a copy, disjoint hashes across copies
        orig = r.blk_hash[: r.blk_ptr[m]]
        shift = part.blk_hash - orig
        assert len(set(shift.tolist())) <= 1
        for j in range(k):
            other = out.slice(j * n, (j + 1) * n)
            assert not set(part.blk_hash.tolist()) & set(other.blk_hash.tolist())
            assert not (set(part.prefix_id.tolist()) - {-1}) & (
                set(other.prefix_id.tolist()) - {-1}
            )


@given(r=requests_strategy(), k=st.integers(1, 4))
def test_tile_whole_copies_keeps_hit_ratio(r: Requests, k: int) -> None:
    assert hit_ratio_of(tile(r, k * len(r))) == pytest.approx(hit_ratio_of(r))


def test_tile_first_copy_unchanged_and_large_hashes() -> None:
    r = read_mooncake(CONV_SLICE).requests
    out = tile(r, 1000)
    out.validate()
    head = out.slice(0, len(r))
    for key in ("arrival", "prompt_len", "blk_hash", "blk_tokens", "prefix_id"):
        assert np.array_equal(getattr(head, key), getattr(r, key)), key
    spread = np.where(r.blk_hash % 2 == 0, r.blk_hash + 2**62, r.blk_hash - 2**62)
    big = Requests(**{**r.__dict__, "blk_hash": spread})
    out = tile(big, 3 * len(r))  # raw range would overflow int64: remapped to dense ids
    out.validate()
    assert hit_ratio_of(out) == pytest.approx(hit_ratio_of(r))


def test_replay_controls_reject_bad_arguments() -> None:
    r = read_mooncake(CONV_SLICE).requests
    one = r.slice(0, 1)
    with pytest.raises(ScenarioError):
        limit(r, 0)
    with pytest.raises(ScenarioError):
        window(r, 5, 5)
    with pytest.raises(ScenarioError):
        rescale_rate(r, 0.0)
    with pytest.raises(ScenarioError):
        rescale_rate(one, 1.0)
    with pytest.raises(ScenarioError):
        tile(r, 0)
    assert len(tile(one, 5)) == 5 and math.isclose(tile(one, 5).arrival[-1], 0.0)
