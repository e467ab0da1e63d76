"""Azure 2024 (UTC offsets), BurstGPT CSV, Qwen-Bailian JSONL and over-length requests."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from prefixbench.cli import app
from prefixbench.errors import PrefixbenchError, TraceFormatError
from prefixbench.workload.overlength import apply_overlength
from prefixbench.workload.traces import read_trace, sniff_format

DATA = Path(__file__).parent / "data"
runner = CliRunner(env={"COLUMNS": "80", "NO_COLOR": "1", "TERM": "dumb"})


def test_azure_2024_offsets_parse_to_utc(tmp_path):
    f = tmp_path / "a.csv"
    f.write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        "2024-05-10 00:00:00.009930+00:00,100,5\n"
        "2024-05-10 00:00:01.509930+00:00,200,6\n"
        "2024-05-10 02:00:03.009930+02:00,300,7\n"  # 00:00:03 UTC
    )
    load = read_trace(f)
    assert load.format == "azure"
    assert load.requests.arrival.tolist() == pytest.approx([0.0, 1.5, 3.0])
    assert load.requests.prompt_len.tolist() == [100, 200, 300]


def test_azure_2024_slow_path_has_the_same_offsets(tmp_path):
    f = tmp_path / "a.csv"
    f.write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        "2024-05-10 00:00:00+00:00,100,5\n"
        "2024-05-10 00:00:01-01:00,oops,6\n"  # a bad row sends the reader down the slow path
        "2024-05-09 23:00:04-01:00,300,7\n"  # 00:00:04 UTC
    )
    load = read_trace(f, skip_bad=True)
    assert load.requests.arrival.tolist() == pytest.approx([0.0, 4.0])
    assert load.skip_reasons == {"wrong_type": 1}


def test_azure_2024_fixture():
    load = read_trace(DATA / "AzureLLMInferenceTrace_2024_sample.csv")
    assert len(load.requests) == 30 and np.all(np.diff(load.requests.arrival) >= 0)


def test_burstgpt_reads_seconds_and_drops_failed_requests():
    path = DATA / "BurstGPT_sample.csv"
    assert sniff_format(path) == "burstgpt"
    load = read_trace(path)
    rows = path.read_text().splitlines()[1:]
    ok = [r.split(",") for r in rows if r.split(",")[3] != "0"]
    assert load.format == "burstgpt"
    assert load.skip_reasons == {"failed_request": len(rows) - len(ok)} == {"failed_request": 1}
    t0 = float(ok[0][0])
    assert load.requests.arrival.tolist() == [float(r[0]) - t0 for r in ok]
    assert load.requests.prompt_len.tolist() == [int(r[2]) for r in ok]
    assert load.requests.output_len.tolist() == [int(r[3]) for r in ok]


def test_burstgpt_bad_header_is_one_line(tmp_path):
    f = tmp_path / "b.csv"
    f.write_text("Timestamp,Model,Request tokens,Total tokens\n1,x,2,3\n")
    with pytest.raises(TraceFormatError, match="Response tokens"):
        read_trace(f, "burstgpt")


def test_bailian_uses_16_token_blocks_and_seconds():
    path = DATA / "qwen_bailian_blksz_16_sample.jsonl"
    assert sniff_format(path) == "bailian"
    load = read_trace(path)
    recs = [json.loads(x) for x in path.read_text().splitlines()]
    r = load.requests
    assert load.format == "bailian"
    assert r.arrival.tolist() == pytest.approx(
        [x["timestamp"] - recs[0]["timestamp"] for x in recs]
    )
    # request 0: 221 tokens = 13 full 16-token blocks + a 13-token last block (14 hash_ids)
    b0, b1 = r.blk_ptr[0], r.blk_ptr[1]
    assert recs[0]["input_length"] == 221 and b1 - b0 == 14
    assert r.blk_tokens[b0:b1].tolist() == [16] * 13 + [13]
    # a Bailian file read as Mooncake (512-token blocks) is refused with the block count
    with pytest.raises(TraceFormatError, match="blocks of 512 tokens"):
        read_trace(path, "mooncake")


def test_overlength_modes_on_mooncake_synthetic_slice():
    path = DATA / "mooncake_synthetic_overlength.jsonl"
    req = read_trace(path).requests
    long_ = (req.prompt_len + req.output_len) > 131072
    assert int(long_.sum()) == 2
    with pytest.raises(PrefixbenchError, match="2 of 42 requests are longer"):
        apply_overlength(req, 131072, "error")
    kept, note = apply_overlength(req, 131072, "skip")
    assert len(kept) == 40 and "skipped 2 of 42" in note
    kept.validate()
    cut, note = apply_overlength(req, 131072, "truncate")
    cut.validate()
    assert "truncated 2 of 42" in note
    assert np.all(cut.prompt_len + cut.output_len <= 131072)
    i = int(np.flatnonzero(long_)[0])
    # its prompt alone (> 131072 tokens) does not fit: cut to 131071 tokens, one output token
    assert req.prompt_len[i] > 131072
    assert (cut.prompt_len[i], cut.output_len[i]) == (131071, 1)
    # its chain keeps the leading 255 full 512-token blocks and a 511-token last block
    blocks = cut.blk_tokens[cut.blk_ptr[i] : cut.blk_ptr[i + 1]]
    assert blocks.sum() == 131071 and blocks.tolist()[-1] == 131071 - 255 * 512
    # untouched requests are unchanged
    j = int(np.flatnonzero(~long_)[0])
    assert (cut.prompt_len[j], cut.output_len[j]) == (req.prompt_len[j], req.output_len[j])


def test_overlength_truncate_caps_output_first():
    from prefixbench.workload.requests import Requests

    req = Requests(
        arrival=np.array([0.0]),
        prompt_len=np.array([100]),
        output_len=np.array([50]),
        blk_ptr=np.array([0, 1]),
        blk_hash=np.array([7]),
        blk_tokens=np.array([100]),
        prefix_id=np.array([7]),
    )
    cut, _ = apply_overlength(req, 120, "truncate")  # 100-token prompt fits: output → 20
    assert (int(cut.prompt_len[0]), int(cut.output_len[0])) == (100, 20)


def test_cli_replays_overlength_trace_with_skip(tmp_path):
    r = runner.invoke(
        app,
        [
            "run",
            "--trace",
            str(DATA / "mooncake_synthetic_overlength.jsonl"),
            "--set",
            "workload.overlength=skip",
            "--set",
            "run.warmup_requests=5",
            "--policy",
            "replicate_all_lru",
            "--out",
            str(tmp_path),
            "--json",
        ],
    )
    assert r.exit_code == 0, r.stderr
    assert "skipped 2 of 42 requests" in r.stderr
    res = json.loads(r.stdout)
    assert any("skipped 2 of 42" in n for n in res["notes"])


@pytest.mark.parametrize(
    "name",
    [
        "BurstGPT_sample.csv",
        "qwen_bailian_blksz_16_sample.jsonl",
        "AzureLLMInferenceTrace_2024_sample.csv",
    ],
)
def test_cli_replays_every_new_format(tmp_path, name):
    r = runner.invoke(
        app,
        [
            "run",
            "--trace",
            str(DATA / name),
            "--set",
            "run.warmup_requests=5",
            "--policy",
            "replicate_all_lru",
            "--out",
            str(tmp_path),
        ],
    )
    assert r.exit_code == 0, r.stderr
