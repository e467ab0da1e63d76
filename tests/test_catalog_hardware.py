"""What user hardware does to a run, checked by hand from datasheet and config.json numbers.

Two presets: ``optical_mac`` (seed 003, experiment 4: 10x an H100's FLOP/s at its HBM
bandwidth) and ``splitwise_hetero`` (Splitwise-HA: H100 prefill, A100 decode). Each
expected figure below is written from the raw numbers: the per-operator roofline of
docs/model.md §2 (the GEMMs' max(FLOPs / (peak · MFU · T / (T + T½)), weights / (bandwidth ·
MBU)) plus attention's max(FLOPs / (peak · 0.72), KV / (bandwidth · 0.88)) plus the
overhead) with the default efficiency (GEMM MFU 0.68, T½ 96 tokens, MBU 0.7, 1 ms per
step), never with prefixbench's cost model.
"""

from __future__ import annotations

import numpy as np
import pytest

from prefixbench.scenario.loader import load_scenario
from prefixbench.system.runner import prepare, simulate_policy

MFU, MBU, OVERHEAD = 0.68, 0.7, 1e-3
T_HALF, MFU_ATTN, MBU_KV = 96, 0.72, 0.88  # one TP group per instance on the ideal fabric
# Datasheets (catalog/accelerators.py): dense BF16 TFLOP/s, HBM GB/s
H100 = (989.5e12, 3350e9)
A100 = (312e12, 2039e9)  # A100 80GB SXM
OPTICAL = (10 * 989.5e12, 3350e9)  # scenarios/hardware/optical_mac.yaml

# Llama 70B shape from config.json: 80 layers, hidden 8192, 64 heads / 8 KV heads of 128,
# MLP 28672 (gated: 3 matrices). Per layer: q 8192·8192, k and v 8192·1024 each, o 8192·8192,
# MLP 3·8192·28672; two RMSNorm vectors per layer plus the final one.
_LAYER = 8192 * 8192 + 2 * 8192 * 1024 + 8192 * 8192 + 3 * 8192 * 28672  # 855,638,016
BODY = 80 * _LAYER + 80 * 2 * 8192 + 8192  # 68,452,360,192 parameters
LINEAR_FLOPS = 2 * BODY  # per token
ATTN = 2 * 80 * 64 * (128 + 128)  # FLOPs per (query, key) pair: QK^T and AV
KV_BPT = 2 * 80 * 8 * 128 * 2  # K and V, 8 KV heads of 128, bf16: 327,680 bytes/token


def _llama(vocab: int) -> tuple[float, float]:
    """(weight bytes a step reads, LM-head FLOPs per logits token): untied embeddings, bf16;
    a step reads the LM head but not the input-embedding table (docs/model.md §2.7)."""
    return (BODY + vocab * 8192) * 2, 2 * vocab * 8192


LLAMA31_70B = _llama(128256)  # Llama-3.1-70B
LLAMA2_70B = _llama(32000)  # Llama-2-70B


def prefill_s(n: int, model, dev, devices: int) -> float:
    weights, lm_head = model
    gemm = (n * LINEAR_FLOPS + lm_head) * (n + T_HALF) / n
    attn = ATTN * n * (n + 1) / 2
    return _ops(gemm, weights, attn, KV_BPT * n, dev, devices) + OVERHEAD


def _ops(gemm, weights, attn, kv, dev, devices) -> float:
    """GEMMs (FLOPs already over eff(T) / MFU) plus attention, each max(compute, memory)."""
    t_gemm = max(gemm / (dev[0] * devices * MFU), weights / (dev[1] * devices * MBU))
    return t_gemm + max(attn / (dev[0] * devices * MFU_ATTN), kv / (dev[1] * devices * MBU_KV))


def decode_s(batch: int, context: int, model, dev, devices: int) -> float:
    weights, lm_head = model
    gemm = batch * (LINEAR_FLOPS + lm_head) * (batch + T_HALF) / batch
    return _ops(gemm, weights, ATTN * context, KV_BPT * context, dev, devices) + OVERHEAD


def _lone(prompt: int, output: int) -> list[str]:
    """Requests 1,000 s apart, no shared prefix: each runs alone, so every step is priced
    for one request and the timestamps can be checked step by step. On the ideal fabric:
    the figures here are the roofline's (the TP comm terms: tests/test_parallelism.py)."""
    return [
        "cluster.prefill.fabric=ideal",
        "cluster.decode.fabric=ideal",
        "workload.arrivals.rate=0.001",
        "workload.share_fraction=0",
        f"workload.suffix_length={{kind: fixed, value: {prompt}}}",
        f"workload.output_length={{kind: fixed, value: {output}}}",
        "run.requests=4",
        "run.warmup_requests=0",
    ]


def _columns(name: str, sets: list[str]) -> dict:
    res = simulate_policy(prepare(load_scenario(name, sets)), "transfer_per_request")
    return res.columns


def _span(c: dict, start: str, end: str) -> np.ndarray:
    return np.asarray(c[end]) - np.asarray(c[start])


# ------------------------------------------------------------------ optical MAC


def test_hand_figures_optical_prefill_is_compute_bound_and_ten_times_faster():
    # 8,192-token prompt on 4 devices: 1.21 PFLOP against 144 GB of weights and KV
    h100 = prefill_s(8192, LLAMA31_70B, H100, 4)
    optical = prefill_s(8192, LLAMA31_70B, OPTICAL, 4)
    assert h100 == pytest.approx(0.4535, abs=1e-4)
    assert optical == pytest.approx(0.04625, abs=1e-5)  # still compute-bound


def test_optical_mac_prefill_step_follows_its_flops():
    c = _columns("optical_mac", _lone(8192, 8))
    got = _span(c, "t_prefill_start", "t_prefill_end")
    np.testing.assert_allclose(got, prefill_s(8192, LLAMA31_70B, OPTICAL, 4), rtol=1e-9)


def test_optical_mac_decode_is_the_h100s_because_it_is_memory_bound():
    sets = _lone(2048, 16)
    optical = _columns("optical_mac", sets)
    h100 = _columns(
        "optical_mac",
        [*sets, "cluster.prefill.accelerator=h100-sxm", "cluster.decode.accelerator=h100-sxm"],
    )
    # 16 iterations of a batch of one; iteration j attends to 2,048 + j tokens
    want = sum(decode_s(1, 2048 + j, LLAMA31_70B, H100, 4) for j in range(16))
    assert want == sum(decode_s(1, 2048 + j, LLAMA31_70B, OPTICAL, 4) for j in range(16))
    for c in (optical, h100):
        np.testing.assert_allclose(_span(c, "t_decode_start", "t_done"), want, rtol=1e-9)
    # while its prefill is 7x faster (compute-bound on the H100 at 2,048 tokens)
    assert prefill_s(2048, LLAMA31_70B, H100, 4) / prefill_s(2048, LLAMA31_70B, OPTICAL, 4) > 6


def test_seed_experiment_4_ttft_drops_tpot_barely_moves():
    """Seed 003, experiment 4, at the seed's load (4 req/s): TTFT drops 2.7-fold because
    prefill is compute-bound (the seed's 10x FLOP/s; less than 10x: the GEMMs' weight read
    and the fixed costs do not scale); TPOT stays within 2% because decode reads HBM."""
    sets = ["run.requests=1000", "run.warmup_requests=100"]
    h100_sets = [
        *sets,
        "cluster.prefill.accelerator=h100-sxm",
        "cluster.decode.accelerator=h100-sxm",
    ]

    def means(extra):
        prep = prepare(load_scenario("optical_mac", extra))
        c = simulate_policy(prep, "transfer_per_request").columns
        out = np.asarray(prep.requests.output_len)
        arrival = np.asarray(prep.requests.arrival)
        done = np.isfinite(c["t_done"])
        keep = done & (np.arange(len(out)) >= 100) & (out > 1)
        ttft = (c["t_first_token"] - arrival)[keep].mean()
        tpot = ((c["t_done"] - c["t_first_token"])[keep] / (out[keep] - 1)).mean()
        return ttft, tpot, done.mean()

    ttft_o, tpot_o, done_o = means(sets)
    ttft_h, tpot_h, done_h = means(h100_sets)
    assert done_o == done_h == 1.0
    assert ttft_h / ttft_o > 2.5
    assert tpot_o / tpot_h == pytest.approx(1.0, abs=0.02)


# ------------------------------------------------------------------ Splitwise-HA


def test_hand_figures_splitwise():
    # 2,048-token prompt on 8 devices: compute-bound on both parts, 3.1x apart
    assert prefill_s(2048, LLAMA2_70B, H100, 8) == pytest.approx(0.05649, abs=1e-5)
    assert prefill_s(2048, LLAMA2_70B, A100, 8) == pytest.approx(0.1770, abs=1e-4)
    # one decode iteration at 2,048 tokens: memory-bound, 137.4 GB of weights (less the
    # input-embedding table) at 0.7 plus 2,048 · 327,680 B of KV at 0.88 of 8 · 2,039 GB/s
    # (A100s) or 8 · 3,350 GB/s (H100s), + 1 ms
    assert decode_s(1, 2048, LLAMA2_70B, A100, 8) == pytest.approx(0.013083, abs=1e-6)
    assert decode_s(1, 2048, LLAMA2_70B, H100, 8) == pytest.approx(0.008354, abs=1e-6)


def test_splitwise_prefill_runs_on_h100_decode_on_a100_kv_over_hdr():
    c = _columns("splitwise_hetero", _lone(2048, 16))
    np.testing.assert_allclose(
        _span(c, "t_prefill_start", "t_prefill_end"),
        prefill_s(2048, LLAMA2_70B, H100, 8),
        rtol=1e-9,
    )
    np.testing.assert_allclose(
        _span(c, "t_decode_start", "t_first_token"),
        decode_s(1, 2048, LLAMA2_70B, A100, 8),
        rtol=1e-9,
    )
    np.testing.assert_allclose(
        _span(c, "t_decode_start", "t_done"),
        sum(decode_s(1, 2048 + j, LLAMA2_70B, A100, 8) for j in range(16)),
        rtol=1e-9,
    )
    # the KV of 2,048 tokens over the 8 HDR NICs (25 GB/s each, hardware/dgx_a100_hdr.yaml)
    # of the 8-device instances, sharded: 671,088,640 bytes at 8 x 25 = 200 GB/s plus 2 us
    np.testing.assert_allclose(
        _span(c, "t_transfer_start", "t_transfer_end"), KV_BPT * 2048 / 200e9 + 2e-6, rtol=1e-9
    )
