"""`run --save-result`: the files parse with the field names `vllm bench serve
--save-result` writes (vllm/benchmarks/serve.py), and their numbers are the run's."""

from __future__ import annotations

import json

import polars as pl
import pytest

from prefixbench.io.benchresult import write_bench_results
from prefixbench.scenario.loader import load_scenario
from prefixbench.study.runs import run_scenario

# the keys vLLM's result file has (setup, traffic, benchmark result), in its order
VLLM_KEYS = [
    "date", "endpoint_type", "backend", "label", "model_id", "tokenizer_id", "num_prompts",
    "request_rate", "burstiness", "max_concurrency", "duration", "completed", "failed",
    "total_input_tokens", "total_output_tokens", "request_throughput", "request_goodput",
    "output_throughput", "total_token_throughput", "input_lens", "output_lens", "ttfts",
    "itls", "errors",
]  # fmt: skip
PER_METRIC = [f"{s}_{m}_ms" for m in ("ttft", "tpot", "itl", "e2el")
              for s in ("mean", "median", "std", "p99")]  # fmt: skip


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    s = load_scenario("enterprise_hotset", [
        "run.requests=600", "run.warmup_requests=100", "workload.arrivals.process=gamma",
        "workload.arrivals.cv=2"])  # fmt: skip
    tables = run_scenario(s, ["transfer_per_request", "replicate_all_lru"], track_gaps=True)
    out = tmp_path_factory.mktemp("res")
    paths = write_bench_results(s, "Qwen/Qwen2-1.5B", tables, out, (50.0, 99.0))
    return s, tables, paths


def test_one_file_per_policy_with_vllm_names(saved):
    s, tables, paths = saved
    assert len(paths) == 2
    for path in paths:
        doc = json.loads(path.read_text())  # strict JSON (dumps refuses NaN)
        keys = [k for k in doc if k in VLLM_KEYS]
        assert keys == VLLM_KEYS  # every key, in vLLM's order
        assert all(k in doc for k in PER_METRIC)
        assert path.name.startswith(f"prefixbench-{doc['request_rate']}qps-Qwen2-1.5B-")
        assert doc["label"] in path.name and len(doc["date"]) == len("20250101-120000")


def test_the_numbers_are_the_runs(saved):
    s, tables, paths = saved
    doc = json.loads(paths[0].read_text())
    reqs = tables.requests.filter((pl.col("policy") == doc["label"]) & ~pl.col("warmup"))
    done = reqs.filter(pl.col("outcome") == "completed")
    assert doc["num_prompts"] == 500 and doc["completed"] == done.height
    assert doc["total_input_tokens"] == done["prompt_tokens"].sum()
    assert doc["request_rate"] == s.workload.arrivals.rate
    assert doc["burstiness"] == pytest.approx(0.25)  # gamma shape = 1 / cv² = 1/4
    assert doc["max_concurrency"] is None
    assert len(doc["ttfts"]) == doc["num_prompts"] == len(doc["input_lens"])
    first = done.row(0, named=True)
    i = reqs["request_id"].to_list().index(first["request_id"])
    assert doc["ttfts"][i] == pytest.approx(first["ttft_ms"] / 1000)  # vLLM stores seconds
    assert doc["mean_ttft_ms"] == pytest.approx(done["ttft_ms"].mean())
