"""`prefixbench import`: every listed vLLM, SGLang and `vllm bench serve` flag has a mapping
(docs/import.md), unknown flags warn, values we cannot honour are errors."""

from __future__ import annotations

import json
import math

import pytest

from prefixbench.errors import ScenarioError
from prefixbench.scenario.launch.importer import import_deployment
from prefixbench.scenario.launch.rows import NOT_MODELLED, UNKNOWN

M = "meta-llama/Llama-3.1-8B"  # the catalog's llama-3.1-8b
NIXL_P = """--kv-transfer-config '{"kv_connector":"NixlConnector","kv_role":"kv_producer"}'"""
NIXL_D = """--kv-transfer-config '{"kv_connector":"NixlConnector","kv_role":"kv_consumer"}'"""
BENCH = "vllm bench serve --dataset-name random --request-rate 4 --num-prompts 300"
SGL = "python -m sglang.launch_server --model-path"


def vllm(prefill: str = "", decode: str = "", bench: str = BENCH, **kw):
    return import_deployment(
        prefill=f"vllm serve {M} {NIXL_P} {prefill}",
        decode=f"vllm serve {M} {NIXL_D} {decode}",
        bench=bench,
        hardware=kw.pop("hardware", "h100-sxm"),
        link="roce-200g",
        **kw,
    )


def sglang(prefill: str = "", decode: str = "", bench: str = BENCH):
    return import_deployment(
        prefill=f"{SGL} {M} --disaggregation-mode prefill {prefill}",
        decode=f"{SGL} {M} --disaggregation-mode decode {decode}",
        bench=bench,
        hardware="h100-sxm",
    )


def field(result, path: str):
    node = result.scenario
    for key in path.split("."):
        node = node[key]
    return node


def row_for(result, text: str):
    return next(r for r in result.rows if text in r.flag)


# ------------------------------------------------------------------ vLLM serve


def test_vllm_parallel_sizes():
    r = vllm("--tensor-parallel-size 2", "-tp 4 --pipeline-parallel-size 2 --data-parallel-size 3")
    assert field(r, "cluster.prefill.tp") == 2 and field(r, "cluster.prefill.devices") == 2
    assert field(r, "cluster.decode.tp") == 4 and field(r, "cluster.decode.pp") == 2
    assert field(r, "cluster.decode.devices") == 8
    assert field(r, "cluster.decode_instances") == 3


def test_vllm_flag_equals_and_underscores():
    r = vllm("--tensor_parallel_size=2", "--max-num-seqs=96")
    assert field(r, "cluster.prefill.tp") == 2 and field(r, "cluster.max_decode_batch") == 96


def test_vllm_gpu_memory_utilization_sizes_the_kv_pool():
    # Llama 3.1 8B: 8.03B parameters (HF page) in bf16 = 16.06 GB; H100 SXM 80 GB
    r = vllm("--gpu-memory-utilization 0.9", "-tp 2 --gpu-memory-utilization 0.85")
    assert field(r, "memory.gpu_memory_utilization") == 0.85
    share = (0.9 * 80 - 16.06) / (80 - 16.06)
    assert field(r, "cluster.prefill_cache_fraction") == pytest.approx(share, abs=1e-3)


def test_vllm_memory_too_small_for_the_weights_is_an_error():
    with pytest.raises(ScenarioError, match="leaves no room"):
        vllm(decode="--gpu-memory-utilization 0.1")


def test_vllm_kv_cache_dtype_block_size_and_batching():
    r = vllm("--max-num-batched-tokens 16k", "--kv-cache-dtype fp8 --block-size 32 "
             "--max-num-seqs 128 --max-num-batched-tokens 4096")  # fmt: skip
    assert field(r, "model_format.kv_dtype") == "fp8"
    assert field(r, "cluster.block_size") == 32
    assert field(r, "cluster.max_decode_batch") == 128
    assert field(r, "cluster.prefill_token_budget") == 16_000  # vLLM: k = 1,000
    assert field(r, "cluster.chunk_token_budget") == 4096


def test_vllm_prefix_caching_picks_the_policy():
    assert field(vllm(), "policy") == "replicate_all_lru"  # V1's default: on
    assert field(vllm(decode="--enable-prefix-caching"), "policy") == "replicate_all_lru"
    assert field(vllm(decode="--no-enable-prefix-caching"), "policy") == "transfer_per_request"
    off = vllm(prefill="--no-enable-prefix-caching")
    assert field(off, "cluster.prefill_cache_fraction") == 0.0


def test_a_single_colocated_server_is_refused_not_doubled():
    with pytest.raises(ScenarioError, match="colocated deployment of 1 instance"):
        import_deployment(serve=f"vllm serve {M}", bench=BENCH)
    r = import_deployment(serve=f"{SGL} {M} --dp 3", bench=BENCH)
    assert (field(r, "cluster.prefill_instances"), field(r, "cluster.decode_instances")) == (1, 2)


def test_vllm_chunked_prefill():
    r = vllm(prefill="--enable-chunked-prefill")
    assert row_for(r, "--enable-chunked-prefill").status == NOT_MODELLED
    c = import_deployment(serve=f"vllm serve {M} -dp 2 --enable-chunked-prefill", bench=BENCH)
    assert field(c, "cluster.colocated_scheduler") == "chunked"
    assert field(c, "cluster.mode") == "colocated"


@pytest.mark.parametrize("connector", ["NixlConnector", "LMCacheConnectorV1", "MooncakeConnector"])
def test_vllm_kv_transfer_connectors(connector):
    def cfg(role):
        return f"""--kv-transfer-config '{{"kv_connector":"{connector}","kv_role":"{role}"}}'"""  # noqa: E731

    r = import_deployment(prefill=f"vllm serve {M} {cfg('kv_producer')}",
                          decode=f"vllm serve {M} {cfg('kv_consumer')}", bench=BENCH)  # fmt: skip
    assert connector in row_for(r, "--kv-transfer-config").note
    want = "replicate_tiered" if connector == "LMCacheConnectorV1" else "replicate_all_lru"
    assert field(r, "policy") == want


def test_vllm_kv_role_on_the_wrong_server_is_an_error():
    with pytest.raises(ScenarioError, match="kv_role"):
        import_deployment(prefill=f"vllm serve {M} {NIXL_D}", decode=f"vllm serve {M} {NIXL_D}",
                          bench=BENCH)  # fmt: skip


def test_vllm_offloading_connector_is_the_host_tier():
    cfg = json.dumps({"kv_connector": "MultiConnector", "kv_role": "kv_consumer",
                      "kv_connector_extra_config": {"connectors": [
                          {"kv_connector": "NixlConnector", "kv_role": "kv_consumer"},
                          {"kv_connector": "OffloadingConnector", "kv_role": "kv_consumer",
                           "kv_connector_extra_config": {"cpu_bytes_to_use": 64_000_000_000}}]}})  # fmt: skip
    r = import_deployment(prefill=f"vllm serve {M} {NIXL_P}",
                          decode=f"vllm serve {M} --kv-transfer-config '{cfg}'", bench=BENCH)  # fmt: skip
    assert field(r, "policy") == "replicate_tiered"
    assert field(r, "memory.host_kv_gb") == 64.0


def test_vllm_speculative_config():
    mtp = vllm(decode="""--speculative-config '{"method":"mtp","num_speculative_tokens":2}'""")
    assert field(mtp, "cluster.decode.speculative") == {"method": "mtp", "gamma": 2}
    spec = '{"model":"Qwen/Qwen2-0.5B","num_speculative_tokens":5}'
    draft = vllm(decode=f"--speculative-config '{spec}'")
    assert field(draft, "cluster.decode.speculative") == {
        "method": "draft", "draft_model": "qwen2-0.5b", "gamma": 5}  # fmt: skip
    with pytest.raises(ScenarioError, match="ngram"):
        vllm(decode="""--speculative-config '{"method":"ngram","num_speculative_tokens":3}'""")


def test_vllm_quantization():
    assert field(vllm("-q fp8", "--quantization fp8"), "model_format.weights") == "fp8"
    assert field(vllm("--quantization awq", "--quantization awq"), "model_format.weights") == "int4"
    with pytest.raises(ScenarioError, match="not modelled"):
        vllm("--quantization bitsandbytes", "--quantization bitsandbytes")


# ------------------------------------------------------------------ SGLang


def test_sglang_parallel_memory_and_batching():
    r = sglang("--tp 2 --chunked-prefill-size 4096",
               "--tp 2 --dp 2 --mem-fraction-static 0.8 --page-size 64 "
               "--max-running-requests 256")  # fmt: skip
    assert field(r, "cluster.prefill.tp") == 2 and field(r, "cluster.decode.devices") == 2
    assert field(r, "cluster.decode_instances") == 2
    assert field(r, "memory.gpu_memory_utilization") == 0.8
    assert field(r, "cluster.block_size") == 64
    assert field(r, "cluster.max_decode_batch") == 256
    assert field(r, "cluster.prefill_token_budget") == 4096


def test_sglang_disaggregation_flags_pick_the_policy():
    assert field(sglang(), "policy") == "transfer_per_request"  # no decode radix cache
    radix = sglang(decode="--disaggregation-decode-enable-radix-cache")
    assert field(radix, "policy") == "replicate_all_lru"
    tiered = sglang(decode="--disaggregation-decode-enable-radix-cache "
                    "--enable-hierarchical-cache --hicache-ratio 3 --mem-fraction-static 0.8 "
                    "--hicache-write-policy write_through")  # fmt: skip
    assert field(tiered, "policy") == "replicate_tiered"
    # KV pool = 0.8 × 80 GB − 16.06 GB weights − the activation reserve (physics/sizing.py)
    # of 1024 step tokens × (4·4096 + 2·14336) × 2 B + 64 sequences × 128,256 × 4 B of fp32
    # logits = 0.1251 GB: 47.81 GB, and the host pool 3 × that
    pool = 0.8 * 80 - 16.06 - (1024 * (4 * 4096 + 2 * 14336) * 2 + 64 * 128256 * 4) / 1e9
    assert field(tiered, "memory.host_kv_gb") == pytest.approx(3 * pool, abs=0.01)
    assert row_for(tiered, "--hicache-write-policy").status == "approximate"


def test_sglang_transfer_backend_and_mode_checks():
    r = sglang("--disaggregation-transfer-backend nixl")
    assert "cluster.link" in row_for(r, "--disaggregation-transfer-backend").field
    with pytest.raises(ScenarioError, match="disaggregation-mode"):
        import_deployment(prefill=f"{SGL} {M} --disaggregation-mode decode",
                          decode=f"{SGL} {M} --disaggregation-mode decode", bench=BENCH)  # fmt: skip


def test_sglang_kv_dtype_and_speculative():
    r = sglang("--kv-cache-dtype fp8_e5m2", "--kv-cache-dtype fp8_e5m2 "
               "--speculative-algorithm NEXTN --speculative-num-steps 3")  # fmt: skip
    assert field(r, "model_format.kv_dtype") == "fp8"
    assert field(r, "cluster.decode.speculative") == {"method": "mtp", "gamma": 3}


# ------------------------------------------------------------------ vllm bench serve


def bench(extra: str):
    return vllm(bench=f"vllm bench serve --request-rate 4 --num-prompts 300 {extra}")


def test_bench_random_lengths_and_shared_prefix():
    r = bench("--dataset-name random --random-input-len 1000 --random-output-len 100 "
              "--random-range-ratio 0.25 --random-prefix-len 400")  # fmt: skip
    w = r.scenario["workload"]
    assert w["suffix_length"] == {"kind": "uniform", "low": 750, "high": 1250}
    assert w["output_length"] == {"kind": "uniform", "low": 75, "high": 125}
    assert w["prefixes"]["count"] == 1 and w["prefixes"]["length"]["value"] == 400
    assert w["share_fraction"] == 1.0


def test_bench_prefix_repetition_defaults_and_values():
    r = bench("--dataset-name prefix_repetition --prefix-repetition-prefix-len 2048 "
              "--prefix-repetition-num-prefixes 8")  # fmt: skip
    w = r.scenario["workload"]
    assert w["prefixes"] == {"count": 8, "zipf_s": 0.0, "length": {"kind": "fixed", "value": 2048}}
    assert w["suffix_length"]["value"] == 256 and w["output_length"]["value"] == 128  # defaults


def test_bench_rate_burstiness_prompts_goodput():
    r = bench("--burstiness 0.25 --goodput ttft:500 tpot:40 --num-warmups 50")
    a = r.scenario["workload"]["arrivals"]
    assert a == {"rate": 4.0, "process": "gamma", "cv": pytest.approx(2.0)}  # 1/sqrt(0.25)
    assert r.scenario["slo"] == {"ttft_ms": 500.0, "tpot_ms": 40.0}
    assert r.scenario["run"] == {"requests": 350, "warmup_requests": 50}


def test_bench_datasets_we_cannot_honour():
    for name in ("sharegpt", "custom"):
        with pytest.raises(ScenarioError, match="tokenizer"):
            bench(f"--dataset-name {name} --dataset-path x.json")
    b = bench("--dataset-name burstgpt --dataset-path trace.csv")
    assert b.scenario["workload"] == {"kind": "trace", "path": "trace.csv", "format": "burstgpt",
                                      "rate": 4.0}  # fmt: skip


def test_bench_max_concurrency_warns_and_infinite_rate_is_an_error():
    r = bench("--max-concurrency 32")
    assert row_for(r, "--max-concurrency").status == NOT_MODELLED
    assert any("--max-concurrency 32" in w for w in r.warnings)
    with pytest.raises(ScenarioError, match="closed loop"):
        vllm(bench="vllm bench serve --max-concurrency 32 --num-prompts 100")


def test_bench_percentile_metrics_are_output_only():
    r = bench("--percentile-metrics ttft,tpot,itl --metric-percentiles 90,99")
    assert row_for(r, "--percentile-metrics").status == "output"
    assert "run --percentiles" in row_for(r, "--metric-percentiles").note


# ------------------------------------------------------------------ nothing silently dropped


def test_unknown_flags_warn_and_every_flag_has_a_row():
    r = vllm("--frobnicate 3 --port 8000", "--enforce-eager",
             bench=f"{BENCH} --wibble --base-url http://x")  # fmt: skip
    assert row_for(r, "--frobnicate 3").status == UNKNOWN
    assert row_for(r, "--wibble").status == UNKNOWN
    assert row_for(r, "--enforce-eager").status == NOT_MODELLED
    assert "CUDA graphs" in row_for(r, "--enforce-eager").note
    assert row_for(r, "--port 8000").status == "no effect"
    warned = " ".join(r.warnings)
    assert "--frobnicate" in warned and "--wibble" in warned and "--enforce-eager" in warned
    assert "--port" not in warned


def test_imported_scenario_is_strict_json_and_valid():
    from prefixbench.scenario.loader import validate

    r = vllm("-tp 2", "-tp 2 --gpu-memory-utilization 0.9")
    text = json.dumps(r.as_json(), allow_nan=False)
    assert "flags" in json.loads(text)
    s = validate(r.scenario, "test")
    assert s.model == M and math.isclose(s.workload.arrivals.rate, 4.0)
