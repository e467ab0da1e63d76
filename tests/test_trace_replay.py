"""Replaying real traces through the core (issue: real-data validation, BRIEF §6.4)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
from tracestats import infinite_cache_hit_ratio
from typer.testing import CliRunner

from prefixbench.cli import app
from prefixbench.engine import simulate
from prefixbench.scenario.loader import load_scenario
from prefixbench.system.runner import prepare

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "traces"
DATA = Path(__file__).resolve().parent / "data"
CONV = SHARED / "conversation_trace.jsonl"
needs_shared = pytest.mark.skipif(not CONV.is_file(), reason="../shared/traces not present")


def _unbounded_lru(path: Path, answers: bool = False):
    """Prompt chains only by default: the trace's own ratio counts prompt reuse."""
    over = ["run.warmup_requests=0", f"memory.cache_generated={str(answers).lower()}"]
    s = load_scenario("trace_replay", over, trace=str(path))
    prep = prepare(s)
    cfg = dataclasses.replace(
        prep.base, policy="replicate_all_lru", budget_tokens=10**13, max_batch=10**6
    )
    return prep, simulate(prep.requests, cfg)


@needs_shared
def test_unbounded_lru_reproduces_the_traces_infinite_cache_hit_ratio():
    """With unbounded decode memory every block ever transferred stays resident, so the
    token-weighted replica hit rate must equal the trace's own longest-prefix hit ratio,
    computed independently from the raw file. A gap could only come from requests that
    arrive while the KV they would share is still in flight; on this trace there is none."""
    prep, res = _unbounded_lru(CONV)
    sim = res.columns["replica_hit_tokens"].sum() / prep.requests.prompt_len.sum()
    assert sim == pytest.approx(infinite_cache_hit_ratio(str(CONV)), abs=1e-9)
    assert (res.columns["outcome"] == 1).all()


def test_slice_hit_ratio_matches_too():
    path = DATA / "conversation_trace_head300.jsonl"
    prep, res = _unbounded_lru(path)
    sim = res.columns["replica_hit_tokens"].sum() / prep.requests.prompt_len.sum()
    oracle = infinite_cache_hit_ratio(str(path))
    # in-flight KV can only lower the simulated ratio
    assert sim <= oracle + 1e-12
    assert sim == pytest.approx(oracle, abs=0.02)


def test_cached_answers_add_hits_within_their_own_ceiling():
    """With answers cached (docs/model.md §1.10.1) the unbounded hit ratio exceeds the
    prompt-only one, and stays within the answer-aware infinite-cache ratio."""
    from prefixbench.workload.reuse import reusable_tokens

    path = DATA / "conversation_trace_head300.jsonl"
    prep, res = _unbounded_lru(path, answers=True)
    sim = res.columns["replica_hit_tokens"].sum() / prep.requests.prompt_len.sum()
    ceiling = reusable_tokens(prep.requests, True).sum() / prep.requests.prompt_len.sum()
    prompt_only = infinite_cache_hit_ratio(str(path))
    assert prompt_only < sim <= ceiling + 1e-12


def test_azure_overlay_shares_prefixes():
    path = DATA / "AzureLLMInferenceTrace_conv_head300.csv"
    s = load_scenario(
        "trace_replay",
        [
            "run.warmup_requests=20",
            "workload.overlay={arrivals: {rate: 1}, prefixes: {count: 4, zipf_s: 1.0, length: {kind: fixed, value: 256}},"
            " share_fraction: 0.8, suffix_length: {kind: fixed, value: 1}, output_length: {kind: fixed, value: 1}}",
        ],
        trace=str(path),
    )
    prep = prepare(s)
    req = prep.requests
    assert len(req) == 299
    has = np.diff(req.blk_ptr) > 0
    assert 0.4 < has.mean() <= 0.85  # share_fraction, less prompts too short for a prefix
    assert any("overlaid" in n for n in prep.notes)


def test_cli_run_trace_compares_policies(tmp_path):
    r = CliRunner(env={"COLUMNS": "120"}).invoke(
        app,
        [
            "run",
            "--trace",
            str(DATA / "conversation_trace_head300.jsonl"),
            "--set",
            "run.warmup_requests=30",
            "--out",
            str(tmp_path),
            "--json",
        ],
    )
    assert r.exit_code == 0, r.stderr
    assert len(json.loads(r.stdout)["results"]) == 7  # every registered policy


def test_cli_bad_trace_is_one_line(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(
        '{"timestamp": 0, "input_length": 10, "output_length": 2, "hash_ids": [1]}\n{oops\n'
    )
    r = CliRunner(env={"COLUMNS": "120"}).invoke(
        app, ["run", "--trace", str(bad), "--out", str(tmp_path)]
    )
    assert r.exit_code == 2
    assert f"{bad}:2" in r.stderr and "Traceback" not in r.stderr


def test_cli_sweep_trace(tmp_path):
    r = CliRunner(env={"COLUMNS": "120"}).invoke(
        app,
        [
            "sweep",
            "--trace",
            str(DATA / "conversation_trace_head300.jsonl"),
            "--models",
            "qwen2-1.5b",
            "--budgets",
            "0.5,1.0",
            "--seeds",
            "0",
            "--set",
            "run.warmup_requests=30",
            "--jobs",
            "1",
            "--out",
            str(tmp_path),
        ],
    )
    assert r.exit_code == 0, r.stderr
    import polars as pl

    runs = pl.read_parquet(tmp_path / "runs.parquet")
    # 2 budgets x 7 policies
    assert runs.height == 14 and set(runs["scenario"]) == {"conversation_trace_head300"}
