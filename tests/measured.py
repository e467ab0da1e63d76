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


def vidur_linear(eff: cm.Efficiency, tokens=(1, 128, 512, 4096)) -> list[dict]:
    """Vidur: one layer's projections, MLP and elementwise ops × layers, vs the roofline of the
    layers' weights (2 FLOPs per weight per token; weights read once). Embedding/LM head and
    attention excluded on both sides."""
    rows = []
    for r in _read("vidur_linear_ops.csv"):
        n = int(r["num_tokens"])
        if n not in tokens:
            continue
        m, dev = MODELS[VIDUR_MODEL[r["model"]]], ACCELERATORS[VIDUR_GPU[r["gpu"]]]
        measured = m.layers * sum(float(r[f"{o}_ms"]) for o in LINEAR_OPS)
        body = cm.param_counts(m)["body"]
        t_c = 2 * body * n / (dev.peak_tflops * 1e12 * eff.mfu_prefill)
        t_m = body * m.weight_bytes / (dev.hbm_gbps * 1e9 * eff.mbu)
        rows.append(
            {
                "source": "Vidur profiling",
                "config": f"{m.name} linear layers, {n} tokens, {dev.name}",
                "measured_ms": measured,
                "prefixbench_ms": max(t_c, t_m) * 1e3,
                "bound": "compute" if t_c >= t_m else "memory",
            }
        )
    return rows


def _shape(name: str) -> tuple[int, int, int]:
    heads, kv_heads, head_dim = (int(x) for x in name.split("_")[-1].split("-")[:3])
    return heads, kv_heads, head_dim


def blis_attention_prefill(eff: cm.Efficiency, seqs=(4096, 8192, 32768)) -> list[dict]:
    """InferSim/BLIS: one causal attention layer over n tokens on H100, vs A·n(n+1)/2 per layer."""
    rows = []
    dev = ACCELERATORS["h100-sxm"]
    for fname, model in (("mha_prefill_h100_32-8-128.csv", "llama-3.1-8b"),):
        heads, _, hd = _shape(fname[:-4])
        for r in _read(f"blis/{fname}"):
            n = int(r["seq_len"])
            if n not in seqs:
                continue
            flops = 2 * heads * (hd + hd) * n * (n + 1) / 2
            rows.append(
                {
                    "source": "BLIS/InferSim kernel bench",
                    "config": f"{model} attention, 1 layer, prefill {n}, h100-sxm",
                    "measured_ms": float(r["latency_us"]) / 1e3,
                    "prefixbench_ms": flops / (dev.peak_tflops * 1e12 * eff.mfu_prefill) * 1e3,
                    "bound": "compute",
                }
            )
    return rows


def blis_attention_decode(
    eff: cm.Efficiency, points=((1, 131072), (16, 32768), (64, 4096), (256, 1024))
) -> list[dict]:
    """InferSim/BLIS: one decode attention layer (batch b, kv_len each) on H100, vs reading
    the KV once: b·kv·2·kv_heads·head_dim·2 bytes per layer."""
    rows = []
    dev = ACCELERATORS["h100-sxm"]
    fname, model = "mha_decode_h100_32-8-128-tp1.csv", "llama-3.1-8b"
    _, kv_heads, hd = _shape(fname[:-8])
    for r in _read(f"blis/{fname}"):
        b, kv = int(r["batch_size"]), int(r["kv_len"])
        if (b, kv) not in points:
            continue
        nbytes = b * kv * 2 * kv_heads * hd * 2
        rows.append(
            {
                "source": "BLIS/InferSim kernel bench",
                "config": f"{model} attention, 1 layer, decode b={b} kv={kv}, h100-sxm",
                "measured_ms": float(r["latency_us"]) / 1e3,
                "prefixbench_ms": nbytes / (dev.hbm_gbps * 1e9 * eff.mbu) * 1e3,
                "bound": "memory",
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
        # client-side TTFT (vLLM's definition): the step plus the request's fixed cost
        ttft = cm.prefill_time(cost, [new], [cached]) + eff.request_overhead_ms / 1e3
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
    product's latency + setup + bytes / (η · NICs · line rate) (costmodel.transfer_time)."""
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
                "group": "kv_transfer",
                "split": r["split"],
            }
        )
    return rows


def _tagged(rows: list[dict], group: str) -> list[dict]:
    """Kernel rows: every one held out (nothing in this change is fitted to them)."""
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
    )
