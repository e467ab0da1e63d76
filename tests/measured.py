"""Public measurements (tests/data/measured/, see its README) next to prefixbench's figures.

Each function returns rows of (source, configuration, measured ms, prefixbench ms) so that
tests/test_validation.py can pin the error bands and docs/validation.md can show the table.
The prefixbench side is always the cost model at the given efficiency, never fitted here.
"""

from __future__ import annotations

import csv
from pathlib import Path

from prefixbench.catalog import ACCELERATORS, MODELS
from prefixbench.catalog.fabrics import get_fabric
from prefixbench.catalog.formats import with_formats
from prefixbench.catalog.specs import AcceleratorSpec
from prefixbench.physics import costmodel as cm

DATA = Path(__file__).parent / "data" / "measured"
VIDUR_GPU = {"h100": "h100-sxm", "a100": "a100-80gb"}  # Vidur: DGX nodes, 80 GB parts
VIDUR_MODEL = {"Llama-2-7b-hf": "llama-2-7b", "Meta-Llama-3-8B": "llama-3.1-8b"}
LINEAR_OPS = (
    "attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_act", "mlp_down_proj",
    "input_layernorm", "post_attention_layernorm", "attn_rope", "add",
)  # fmt: skip


def _read(name: str) -> list[dict]:
    with open(DATA / name, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def vidur_linear(eff: cm.Efficiency) -> list[dict]:
    """Vidur: one layer's projections, MLP and elementwise ops × layers, vs the product's
    GEMM operator over the layers' weights (costmodel.gemm_operator_time: 2 FLOPs per weight
    per token at eff(T), weights read once). Embedding/LM head and attention excluded on
    both sides."""
    rows = []
    for r in _read("vidur_linear_ops.csv"):
        n = int(r["num_tokens"])
        m, dev = MODELS[VIDUR_MODEL[r["model"]]], ACCELERATORS[VIDUR_GPU[r["gpu"]]]
        cost = cm.InstanceCost.build(m, dev, 1, eff)
        measured = m.layers * sum(float(r[f"{o}_ms"]) for o in LINEAR_OPS)
        body = cm.param_counts(m)["body"]
        flops, nbytes = 2 * body * n, body * m.weight_bytes
        t = cm.gemm_operator_time(cost, flops, n, nbytes, cost.flops_rate_prefill)
        t_m = nbytes / cost.byte_rate
        rows.append(
            {
                "source": "Vidur profiling",
                "config": f"{m.name} linear layers, {n} tokens, {dev.name}",
                "measured_ms": measured,
                "prefixbench_ms": float(t) * 1e3,
                "bound": "memory" if t == t_m else "compute",
                "split": r["split"],
            }
        )
    return rows


def _shape(name: str) -> tuple[int, int, int]:
    heads, kv_heads, head_dim = (int(x) for x in name.split("_")[-1].split("-")[:3])
    return heads, kv_heads, head_dim


# the catalog model of each kernel-bench shape (heads-kv_heads-head_dim)
BLIS_MODEL = {"32-8-128": "llama-3.1-8b", "32-32-128": "llama-2-7b"}


def _one_layer(model: str, eff: cm.Efficiency) -> tuple[cm.InstanceCost, float, float]:
    """(H100 cost, attention FLOPs per pair, KV bytes per token) of ONE layer of ``model``."""
    m = MODELS[model]
    cost = cm.InstanceCost.build(m, ACCELERATORS["h100-sxm"], 1, eff)
    return cost, cost.attn_coef / m.layers, cost.kv_bpt / m.layers


def blis_attention_prefill(eff: cm.Efficiency) -> list[dict]:
    """InferSim/BLIS: one causal attention layer over n tokens on H100, vs the product's
    attention operator (costmodel.attention_time) over n(n+1)/2 pairs, writing n tokens' KV."""
    rows = []
    for shape in ("32-8-128", "32-32-128"):
        model = BLIS_MODEL[shape]
        cost, per_pair, kv = _one_layer(model, eff)
        for r in _read(f"blis/mha_prefill_h100_{shape}.csv"):
            n = int(r["seq_len"])
            t = cm.attention_time(cost, per_pair * n * (n + 1) / 2, kv * n)
            rows.append(
                {
                    "source": "BLIS/InferSim kernel bench",
                    "config": f"{model} attention, 1 layer, prefill {n}, h100-sxm",
                    "measured_ms": float(r["latency_us"]) / 1e3,
                    "prefixbench_ms": float(t) * 1e3,
                    "bound": "compute",
                    "split": r["split"],
                }
            )
    return rows


def blis_attention_decode(eff: cm.Efficiency) -> list[dict]:
    """InferSim/BLIS: one decode attention layer (batch b, kv_len each) on H100, vs the
    product's attention operator: b·kv pairs, reading b·kv tokens' KV once."""
    rows = []
    for shape in ("32-8-128", "32-32-128"):
        model = BLIS_MODEL[shape]
        cost, per_pair, kv = _one_layer(model, eff)
        for r in _read(f"blis/mha_decode_h100_{shape}-tp1.csv"):
            b, ctx = int(r["batch_size"]), int(r["kv_len"])
            t = cm.attention_time(cost, per_pair * b * ctx, kv * b * ctx)
            rows.append(
                {
                    "source": "BLIS/InferSim kernel bench",
                    "config": f"{model} attention, 1 layer, decode b={b} kv={ctx}, h100-sxm",
                    "measured_ms": float(r["latency_us"]) / 1e3,
                    "prefixbench_ms": float(t) * 1e3,
                    "bound": "memory",
                    "split": r["split"],
                }
            )
    return rows


NVLINK4 = get_fabric("nvlink4")


def blis_vllm_end_to_end(eff: cm.Efficiency) -> list[dict]:
    """BLIS ground truth: vLLM on H100 at concurrency 1 (GuideLLM synchronous), TTFT vs one
    prefill step and TPOT vs one batch-1 decode iteration at the mean context."""
    rows = []
    dev = ACCELERATORS["h100-sxm"]
    for r in _read("blis_vllm_h100_sync.csv"):
        m = MODELS[r["model"]]
        tp = int(r["tp"])  # on the H100's own NVLink 4 (docs/model.md §2.8)
        cost = cm.InstanceCost.build(m, dev, tp, eff, cm.Parallelism(tp, fabric=NVLINK4))
        new, cached = int(r["prompt_tokens"]), int(r["prefix_tokens"])
        out = int(r["output_tokens"])
        # client-side TTFT (vLLM's definition): the step plus the request's and its prompt
        # tokens' costs on the serving path (docs/model.md §2.14)
        ttft = (
            cm.prefill_time(cost, [new], [cached]) + cm.client_overhead_ms(eff, new + cached) / 1e3
        )
        ctx = new + cached + out / 2
        tpot = float(cm.decode_iteration_time(cost, 1, ctx))
        where = f"{m.name} TP{r['tp']} {r['workload']}"
        rows.append(
            {
                "source": "BLIS ground truth (vLLM)",
                "config": f"{where}: TTFT, {new} new + {cached} cached",
                "measured_ms": float(r["ttft_ms"]),
                "prefixbench_ms": ttft * 1e3,
                "bound": "",
                "group": "vllm_ttft",
                "split": r["split"],
            }
        )
        rows.append(
            {
                "source": "BLIS ground truth (vLLM)",
                "config": f"{where}: TPOT, batch 1, context {ctx:.0f}",
                "measured_ms": float(r["tpot_ms"]),
                "prefixbench_ms": tpot * 1e3,
                "bound": "memory",
                "group": "vllm_tpot",
                "split": r["split"],
            }
        )
    return rows


def vllm_allreduce() -> list[dict]:
    """vLLM's all-reduce microbenchmark (the fastest backend it dispatches) against the
    product's α + bytes / β on NVLink 4 (costmodel.allreduce_time)."""
    rows = []
    for r in _read("allreduce_vllm.csv"):
        tp, nbytes = int(r["tp"]), float(r["mib"]) * 2**20
        rows.append(
            {
                "source": r["source"].split(" (")[0],
                "config": f"all-reduce {r['mib']} MiB, TP {tp}, nvlink4 ({r['backend']})",
                "measured_ms": float(r["measured_us"]) / 1e3,
                "prefixbench_ms": float(cm.allreduce_time(NVLINK4, tp, nbytes)) * 1e3,
                "bound": "",
                "group": "allreduce",
                "split": r["split"],
            }
        )
    return rows


_LINK_BY_GBPS = {"200": "roce-200g", "400": "ib-ndr400"}


def mooncake_transfer() -> list[dict]:
    """Mooncake transfer engine throughput (a 40 GB, or a long, transfer) against the
    product's latency + setup + bytes / min(η · NICs · line rate, ceiling)
    (costmodel.transfer_time)."""
    from prefixbench.catalog import LINKS

    rows = []
    for r in _read("kv_transfer_mooncake.csv"):
        link = LINKS[_LINK_BY_GBPS[r["gbps_per_nic"]]]
        nics = int(r["nics"])
        nbytes = float(r["gbytes"] or 1) * 1e9
        rows.append(
            {
                "source": r["source"].split(" (")[0],
                "config": f"{nbytes / 1e9:g} GB over {nics}× {r['gbps_per_nic']} Gbps ({link.name})",
                "measured_ms": nbytes / (float(r["measured_gbytes_per_s"]) * 1e9) * 1e3,
                "prefixbench_ms": float(cm.transfer_time(link, nbytes, nics)) * 1e3,
                "bound": "",
                # another host's NICs (its own ceiling) are a group of their own
                "group": "kv_transfer" + (f"_{r['host']}" if r.get("host") else ""),
                "split": r["split"],
            }
        )
    return rows


# NVIDIA H20 as InferSim's own hardware table gives it (alibaba/InferSim hardware/gpu.py:
# BF16 148, FP8 296 TFLOP/s, 4,096 GB/s, 96 GB, 78 SMs); not a catalog preset. Its GEMM
# constants are its own (AcceleratorSpec gemm_mfu, gemm_half_tokens, gemm_kernel_us,
# gemm_mbu; docs/model/cost-model.md "GEMM kernel fixed time"), fitted on the 16 FIT rows
# of infersim_gemm_h20.csv only (tests/data/measured/README.md: every other weight shape):
# least squares in log(predicted / measured) over a grid (MFU 0.80-1.00 by 0.01, T½ 0-40
# tokens by 2, kernel time 2-5 µs by 0.1, weights' MBU 0.30-0.60 by 0.01) gives 0.91,
# 10 tokens, 3.5 µs and 0.43 (fit rows: gmean 1.00, all within ±6 %).
H20 = AcceleratorSpec(
    name="h20", vendor="NVIDIA", peak_tflops=148.0, peak_fp8_tflops=296.0, hbm_gbps=4096.0,
    memory_gb=96.0, source="alibaba/InferSim hardware/gpu.py",
    gemm_mfu=0.91, gemm_half_tokens=10.0, gemm_kernel_us=3.5, gemm_mbu=0.43,
    gemm_source="alibaba/InferSim bench_data/gemm/h20/data.csv (DeepGEMM FP8), fit rows",
)  # fmt: skip


def infersim_gemm_h20(eff: cm.Efficiency) -> list[dict]:
    """InferSim (Alibaba): one FP8 GEMM (m tokens × k × n weights, DeepGEMM) on an H20, vs the
    product's GEMM kernel (costmodel.gemm_kernel_time) of an FP8 (W8A8) checkpoint: the
    kernel's fixed time plus max(2·m·k·n FLOPs at eff(m) of the FP8 peak, k·n weights read
    once at the H20's weights' MBU)."""
    m8 = with_formats(MODELS["llama-3.1-8b"], weights="fp8")  # only its weight format is used
    cost = cm.InstanceCost.build(m8, H20, 1, eff)
    rows = []
    for r in _read("infersim_gemm_h20.csv"):
        m, k, n = int(r["m"]), int(r["k"]), int(r["n"])
        t = cm.gemm_kernel_time(
            cost, 2.0 * m * k * n, m, k * n * m8.quant_bytes, cost.flops_rate_prefill
        )
        rows.append(
            {
                "source": "InferSim kernel bench (Alibaba)",
                "config": f"FP8 GEMM m={m} k={k} n={n}, h20",
                "measured_ms": float(r["latency_us"]) / 1e3,
                "prefixbench_ms": float(t) * 1e3,
                "bound": "",
                "group": "gemm_h20",
                "split": r["split"],
            }
        )
    return rows


# Who published each source (independent groups: a source string maps to one of them).
# Mooncake's README and the reports on its issue tracker count as one publisher.
PUBLISHERS = {
    "Vidur profiling": "Microsoft Research (Vidur)",
    "BLIS/InferSim kernel bench": "inference-sim (BLIS)",
    "BLIS ground truth (vLLM)": "inference-sim (BLIS)",
    "vllm-project/vllm": "vLLM project",
    "kvcache-ai/Mooncake": "Mooncake (kvcache-ai)",
    "github.com/kvcache-ai/Mooncake": "Mooncake (kvcache-ai)",
    "InferSim kernel bench (Alibaba)": "Alibaba (InferSim)",
}


def publisher(source: str) -> str:
    """The independent publisher of a row's ``source`` (KeyError for an unattributed one)."""
    key = next((k for k in PUBLISHERS if source.startswith(k)), None)
    if key is None:
        raise KeyError(f"no publisher recorded for source {source!r}")
    return PUBLISHERS[key]


def _tagged(rows: list[dict], group: str) -> list[dict]:
    """Kernel rows carry their split from the data files (tests/data/measured/README.md)."""
    for r in rows:
        r.setdefault("group", group)
        r.setdefault("split", "held-out")
    return rows


def all_rows(eff: cm.Efficiency) -> list[dict]:
    return (
        _tagged(vidur_linear(eff), "vidur_linear")
        + _tagged(blis_attention_prefill(eff), "attention_prefill")
        + _tagged(blis_attention_decode(eff), "attention_decode")
        + blis_vllm_end_to_end(eff)
        + vllm_allreduce()
        + mooncake_transfer()
        + infersim_gemm_h20(eff)
    )
