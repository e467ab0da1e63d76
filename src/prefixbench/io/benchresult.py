"""`run --save-result`: one JSON per policy in the layout of `vllm bench serve --save-result`.

The keys and their order follow vllm/benchmarks/serve.py (the result it saves): first the
setup (``date`` as ``%Y%m%d-%H%M%S``, ``endpoint_type``, ``backend``, ``label``,
``model_id``, ``tokenizer_id``, ``num_prompts``), then the traffic (``request_rate``, a
number or the string ``"inf"``; ``burstiness``; ``max_concurrency``), then the benchmark
result (``duration``, ``completed``, ``failed``, ``total_input_tokens``,
``total_output_tokens``, ``request_throughput``, ``request_goodput``,
``output_throughput``, ``total_token_throughput``, the per-request ``input_lens``,
``output_lens``, ``ttfts`` (seconds) and ``itls``, ``errors``, then
``mean_/median_/std_/pXX_`` of ``ttft``, ``tpot``, ``itl`` and ``e2el`` in ms).

What differs, and why: ``backend`` is ``prefixbench`` and ``label`` the policy (the file
is a simulation, not a measurement); ``itls`` holds null per request, because the engine
keeps inter-token gaps pooled per policy (metrics/itl.py), which the ``*_itl_ms`` figures
carry; ``policy`` and ``scenario`` are added as vLLM adds ``--metadata`` keys. Files are
named as vLLM names them, ``{backend}-{rate}qps-{model}-{date}.json``, with the policy in
front of the date.
"""

from __future__ import annotations

import math
from datetime import datetime
from pathlib import Path

from .export import DEFAULT_PERCENTILES, bench_metrics, dumps


def traffic(s) -> dict:
    """request_rate, burstiness and max_concurrency as vLLM writes them."""
    w = s.workload
    arrivals = getattr(w, "arrivals", None)
    if arrivals is not None:
        rate = arrivals.rate
        burst = 1.0 if arrivals.process == "poisson" else 1 / arrivals.cv**2
    else:  # a trace: its own (rescaled) timing
        rate, burst = getattr(w, "rate", None), None
    return {
        "request_rate": rate if rate is not None and math.isfinite(rate) else "inf",
        "burstiness": burst,
        "max_concurrency": None,
    }


def bench_result(s, model_id: str, policy: str, requests, summary: dict, stats=None,
                 percentiles=DEFAULT_PERCENTILES, date: str | None = None) -> dict:  # fmt: skip
    """One policy's result document (module docstring for the layout)."""
    import polars as pl

    steady = requests.filter(~pl.col("warmup"))
    metrics = bench_metrics(requests, summary, percentiles, stats)
    aggregates = {k: metrics.pop(k) for k in list(metrics) if k.endswith("_ms")}
    done = steady["outcome"] == "completed"
    ttft = steady["ttft_ms"].fill_nan(None)
    doc = {
        "date": date or datetime.now().strftime("%Y%m%d-%H%M%S"),
        "endpoint_type": "prefixbench",
        "backend": "prefixbench",
        "label": policy,
        "model_id": model_id,
        "tokenizer_id": model_id,
        "num_prompts": steady.height,
        "policy": policy,
        "scenario": s.name,
        **traffic(s),
        **metrics,
        "input_lens": steady["prompt_tokens"].to_list(),
        "output_lens": [
            int(o) if d else 0 for o, d in zip(steady["output_tokens"].to_list(), done.to_list(), strict=False)
        ],  # fmt: skip
        "ttfts": [None if t is None else t / 1e3 for t in ttft.to_list()],
        "itls": [None] * steady.height,
        "errors": [
            "" if d else str(o) for d, o in zip(done.to_list(), steady["outcome"].to_list(), strict=False)
        ],
        **aggregates,
    }
    return doc


def result_name(doc: dict) -> str:
    base = str(doc["model_id"]).split("/")[-1]
    return f"{doc['backend']}-{doc['request_rate']}qps-{base}-{doc['label']}-{doc['date']}.json"


def write_bench_results(s, model_id: str, tables, result_dir: Path, percentiles=None) -> list[Path]:
    """One file per policy of a run (``tables``: study.runs' RunTables) in ``result_dir``."""
    import polars as pl

    from prefixbench.errors import PrefixbenchError
    from prefixbench.support.files import write_atomic

    date = datetime.now().strftime("%Y%m%d-%H%M%S")
    paths = []
    for row in tables.summary.to_dicts():
        policy = row["policy"]
        reqs = tables.requests.filter(pl.col("policy") == policy)
        stats = (tables.stats or {}).get(policy)
        doc = bench_result(s, model_id, policy, reqs, row, stats,
                           percentiles or DEFAULT_PERCENTILES, date)  # fmt: skip
        path = Path(result_dir) / result_name(doc)
        paths.append(write_atomic(path, dumps(doc) + "\n", PrefixbenchError))
    return paths
