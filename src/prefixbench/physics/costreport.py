"""What `prefixbench cost` prints: step times of one model on one instance, with their parts.

Every figure is the roofline of ``costmodel`` (docs/model.md §2) split into its compute and
memory terms so a reader can see which one binds and check the arithmetic: FLOPs, bytes,
the two candidate times, the bound and the step time the simulator uses. Plain dicts of
floats (``None`` where a figure does not exist), ready for strict JSON.
"""

from __future__ import annotations

import numpy as np

from prefixbench.catalog import get_accelerator, get_link, get_model
from prefixbench.catalog.fabrics import default_fabric, get_fabric
from prefixbench.catalog.specs import LinkSpec
from prefixbench.errors import ScenarioError, one_line
from prefixbench.physics import costmodel as cm

DEFAULT_TOKENS = (512, 2048, 8192, 32768)
DEFAULT_BATCH = (1, 16, 64, 256)
DEFAULT_CONTEXT = (1024, 4096)
DEFAULT_LINKS = ("nvlink4", "ib-ndr400", "roce-200g", "roce-100g", "eth-25g", "eth-10g")


def _roof(cost: cm.InstanceCost, gemm, tokens, rate, attn, kv_io, overhead, comm=0.0):
    """One step's operators as a dict (docs/model/cost-model.md "Per-operator roofline"):
    each group's compute and memory time, the step's bound (the side that sets the larger
    share of the time), fabric time and total (seconds)."""
    g_c = float(cm.gemm_time(cost, gemm, tokens, rate))
    g_m = float(cost.weights_read(tokens)) / cost.byte_rate
    a_c, a_m = float(attn) / cost.attn_rate, float(kv_io) / cost.kv_rate
    compute = max(g_c, g_m) if g_c >= g_m else 0.0
    compute += max(a_c, a_m) if a_c >= a_m else 0.0
    total = max(g_c, g_m) + max(a_c, a_m)
    return {
        "flops": float(gemm + attn),
        "bytes": float(cost.weights_read(tokens)) + float(kv_io),
        "gemm_ms": max(g_c, g_m) * 1e3,
        "attention_ms": max(a_c, a_m) * 1e3,
        "compute_ms": (g_c + a_c) * 1e3,
        "memory_ms": (g_m + a_m) * 1e3,
        "overhead_ms": overhead * 1e3,
        "bound": "compute" if compute >= total - compute else "memory",
        "comm_ms": comm * 1e3,  # TP/PP/EP fabric time (docs/model.md §2.8)
        "ms": (total + overhead + comm) * 1e3,
    }


def prefill_row(cost: cm.InstanceCost, tokens: int) -> dict:
    """One prefill step of a single ``tokens``-token prompt, nothing cached."""
    gemm, attn, kv_io = cost.prefill_split(tokens, 0)
    row = {"tokens": tokens}
    comm = float(cost.comm_time(tokens))
    rate = cost.flops_rate_prefill
    row.update(_roof(cost, gemm, tokens, rate, attn, kv_io, cost.prefill_overhead, comm))
    row["attention_flops_share"] = float(attn) / float(gemm + attn)
    row["ms"] = cm.prefill_time(cost, [tokens], [0]) * 1e3  # the simulator's own figure
    return row


def decode_row(cost: cm.InstanceCost, batch: int, context: int) -> dict:
    """One decode iteration: ``batch`` sequences of ``context`` tokens each."""
    total = batch * context
    gemm = batch * (cost.linear_flops + cost.lm_head_flops)
    row = {"batch": batch, "context": context}
    comm = float(cost.comm_time(batch))
    row.update(
        _roof(
            cost,
            gemm,
            batch,
            cost.flops_rate_decode,
            cost.attn_coef * total,
            cost.kv_bpt * total,
            cost.decode_overhead,
            comm,
        )  # fmt: skip
    )
    row["ms"] = float(cm.decode_iteration_time(cost, batch, total)) * 1e3
    row["tokens_per_s"] = batch / (row["ms"] / 1e3)
    return row


def recompute_row(cost: cm.InstanceCost, tokens: int) -> dict:
    """Rebuilding the KV of a ``tokens``-token prefix on the decode instance (no logits)."""
    attn = cost.attn_coef * tokens * (tokens + 1) / 2
    row = {"tokens": tokens}
    comm = float(cost.comm_time(tokens))
    row.update(
        _roof(
            cost,
            tokens * cost.linear_flops,
            tokens,
            cost.flops_rate_prefill,
            attn,
            cost.kv_bpt * tokens,
            cost.prefill_overhead,
            comm,
        )  # fmt: skip
    )
    row["ms"] = float(cm.recompute_time(cost, tokens)) * 1e3
    # Link bandwidth below which recomputing beats moving the prefix's KV (latency ignored).
    row["break_even_gbps"] = cost.kv_bpt * tokens / (row["ms"] / 1e3) / 1e9
    return row


def transfer_rows(cost: cm.InstanceCost, link: LinkSpec, tokens: list[int], nics: int) -> list:
    """The KV of each prefix length moved in one transfer over ``nics`` NICs of ``link``:
    latency + setup + bytes / min(η · NICs · line rate, ceiling), each term shown
    (docs/model.md "KV transfer cost"); one row per token count."""
    rate = cm.link_rate(link, nics)
    rows = []
    for n in tokens:
        nbytes = cost.kv_bpt * n
        rows.append(
            {
                "link": one_line(link.name),
                "tokens": n,
                "bytes": nbytes,
                "nics": nics,
                "bandwidth_gbps": link.bandwidth_gbps,  # line rate per NIC
                "efficiency": link.efficiency,
                "ceiling_gbps": link.ceiling_gbps,  # the instance's NICs together, or None
                "effective_gbps": rate / 1e9,  # min(η · NICs · line rate, ceiling)
                "latency_ms": link.latency_us / 1e3,
                "setup_ms": link.setup_us / 1e3,
                "wire_ms": nbytes / rate * 1e3,
                "ms": float(cm.transfer_time(link, nbytes, nics)) * 1e3,
            }
        )
    return rows


def break_even(cost: cm.InstanceCost, link: LinkSpec, max_tokens: int, nics: int = 1) -> dict:
    """Prefix lengths (1..max_tokens) for which recomputing is faster than transferring.

    Recompute pays a fixed overhead and a quadratic attention term, transfer only its fixed
    cost and a linear term, so recompute can win at most on one interval of lengths;
    ``None`` if never.
    """
    n = np.arange(1, max_tokens + 1, dtype=np.float64)
    wins = cm.recompute_time(cost, n) < cm.transfer_time(link, cost.kv_bpt * n, nics)
    idx = np.flatnonzero(wins)
    lo = int(n[idx[0]]) if idx.size else None
    hi = int(n[idx[-1]]) if idx.size else None
    return {"link": one_line(link.name), "nics": nics, "recompute_wins_from": lo, "recompute_wins_to": hi}


def _mark(row: dict, max_context: int) -> dict:
    """Flag a prompt longer than the model accepts (the figure is then extrapolated)."""
    row["beyond_max_context"] = row["tokens"] > max_context
    return row


MAX_VALUE = 10**9  # tokens, batch or context: the scenario's token cap (MAX_TOKENS)


def _positive(kind: str, values) -> list[int]:
    vals = [int(v) for v in values]
    bad = [v for v in vals if not 0 < v <= MAX_VALUE]  # 10²³ tokens overflowed the arithmetic
    if not vals or bad:
        raise ScenarioError(
            f"{kind} must be whole numbers from 1 to {MAX_VALUE:,}, got {bad[0] if bad else 'none'}",
            where=f"--{kind}",
            fix="give a comma-separated list such as 1,16,64",
        )
    return vals


def _effective(eff: cm.Efficiency, dev) -> dict:
    """The efficiency block as priced on ``dev``: its own GEMM curve, weights' MBU and GEMM
    kernel time where it carries them (costmodel.gemm_constants, weight_mbu), so the
    figures shown are the ones used."""
    mfu_prefill, mfu_decode, half = cm.gemm_constants(eff, dev)
    return {
        **eff.model_dump(),
        "mfu_prefill": mfu_prefill,
        "mfu_decode": mfu_decode,
        "gemm_half_tokens": half,
        "mbu": cm.weight_mbu(eff, dev),
        "gemm_kernel_us": dev.gemm_kernel_us or 0.0,
    }


def cost_report(
    model: str,
    accelerator: str = "h100-sxm",
    devices: int = 1,
    links: list[str] | None = None,
    tokens=DEFAULT_TOKENS,
    batch=DEFAULT_BATCH,
    context=DEFAULT_CONTEXT,
    efficiency: cm.Efficiency | None = None,
    fabric: str | None = None,
    nics: int = 1,
) -> dict:
    """Every figure `prefixbench cost` shows, for a model name or a config.json path."""
    m = get_model(model)
    dev = get_accelerator(accelerator)
    if not 1 <= devices <= 1024:
        raise ScenarioError(
            f"devices must be 1 to 1024, got {devices}", where="--devices", fix="use 1 to 1024"
        )
    tokens = _positive("tokens", tokens)
    nics = _positive("nics", [nics])[0]
    batch = _positive("batch", batch)
    context = _positive("context", context)
    link_specs = [get_link(k) for k in (links or DEFAULT_LINKS)]
    eff = efficiency or cm.Efficiency()
    fab = get_fabric(fabric or default_fabric(accelerator))
    cost = cm.InstanceCost.build(m, dev, devices, eff, cm.Parallelism(tp=devices, fabric=fab))
    p = cm.param_counts(m)
    return {
        # names from a user's file are printed: control bytes escaped, as `run` does
        "model": one_line(m.name),
        "accelerator": one_line(dev.name),
        "devices": devices,
        "efficiency": _effective(eff, dev),
        "fabric": one_line(fab.name),
        "figures": {
            "comm_seconds_per_token": cost.comm_per_token,
            "comm_seconds_per_step": cost.comm_fixed,
            "kv_bytes_per_token": cost.kv_bpt,
            "weight_bytes": cm.weight_bytes(m),
            "params": p["total"],
            "active_params": p["active"],
            "linear_flops_per_token": cost.linear_flops,
            "lm_head_flops_per_token": cost.lm_head_flops,
            "attention_flops_per_pair": cost.attn_coef,
            "peak_flops": dev.peak_tflops * 1e12 * devices,
            "hbm_bytes_per_s": dev.hbm_gbps * 1e9 * devices,
            "max_context": m.max_context,
            "ridge_flops_per_byte": cm.ridge_point(dev),
            # the ridge after efficiencies: a step is compute-bound above it
            "effective_ridge_prefill": cost.flops_rate_prefill / cost.byte_rate,
            "effective_ridge_decode": cost.flops_rate_decode / cost.byte_rate,
        },
        "prefill": [_mark(prefill_row(cost, n), m.max_context) for n in tokens],
        "decode": [decode_row(cost, b, c) for b in batch for c in context],
        "kv": [{"tokens": n, "bytes": cost.kv_bpt * n} for n in tokens],
        "nics": nics,
        "transfer": [r for k in link_specs for r in transfer_rows(cost, k, tokens, nics)],
        "recompute": [_mark(recompute_row(cost, n), m.max_context) for n in tokens],
        "break_even": [
            break_even(cost, k, max(max(tokens), m.max_context), nics) for k in link_specs
        ],
    }
