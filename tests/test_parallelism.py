"""TP/PP/EP communication over the scale-up fabric (docs/model.md §2.8), by hand.

Every expected figure is written out from raw numbers: the model's config.json (Llama-3.1-70B:
80 layers, hidden 8192, 64 heads, 8 KV heads, head dim 128, MLP 28672, vocabulary 128256,
untied; DeepSeek-V2-Lite: 27 layers of which 26 MoE, hidden 2048, 6 experts per token), the
H100 SXM datasheet (989.5 TFLOP/s dense BF16, 3,350 GB/s) and NVLink 4 (450 GB/s per
direction, 0.6 µs per ring step from NCCL's tuning table).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from enginecases import make_requests
from robustness_util import assert_one_stderr_line
from typer.testing import CliRunner

from prefixbench import catalog
from prefixbench.catalog.fabrics import FABRICS, default_fabric, get_fabric
from prefixbench.cli import app
from prefixbench.errors import CatalogError, ScenarioError
from prefixbench.physics.costmodel import (
    Efficiency,
    InstanceCost,
    Parallelism,
    comm_coeffs,
    decode_iteration_time,
    decode_series_coeffs,
    prefill_time,
)
from prefixbench.scenario.loader import load_scenario

GOLDEN = Path(__file__).parent / "golden"
NVL4_BPS, NVL4_LAT = 450e9, 0.6e-6
# NVLink 4 all-reduce, measured (vllm-project/vllm pulls 24111 and 22086, H100 TP 6 and
# TP 2, 0.5-4 MiB): 8.6 µs + bytes / 190.7 GB/s, whatever the TP degree
AR_ALPHA, AR_BPS = 8.6e-6, 190.7e9
# GEMM MFU 0.5, MBU 0.7 for weights and KV alike (so a memory-bound step is one bytes /
# bandwidth below), 1 ms overheads
EFF = Efficiency(mfu_prefill=0.5, mfu_decode=0.5, mbu=0.7, mbu_kv=0.7)

# Llama-3.1-70B by hand (config.json): per layer q 8192², k and v 2·8192·1024, o 8192²,
# MLP 3·8192·28672, two norms of 8192; 80 layers, a final norm; embeddings and LM head
# 128256·8192 each.
L70_BODY = 80 * (8192 * 8192 * 2 + 2 * 8192 * 1024 + 3 * 8192 * 28672 + 2 * 8192) + 8192
L70_WEIGHT_BYTES = 2 * (L70_BODY + 2 * 128256 * 8192)  # bf16: 141,107,412,992
# what a step reads: all but the untied input-embedding table (docs/model.md §2.7)
L70_READ_BYTES = L70_WEIGHT_BYTES - 2 * 128256 * 8192
L70_KV_PER_TOKEN = 2 * 80 * 8 * 128 * 2  # 327,680


def llama70b():
    return catalog.get_model("llama-3.1-70b")


def h100():
    return catalog.get_accelerator("h100-sxm")


def nvlink4(tp, pp=1, ep=1):
    return Parallelism(tp=tp, pp=pp, ep=ep, fabric=get_fabric("nvlink4"))


def test_hand_numbers_are_the_catalog_numbers():
    assert L70_WEIGHT_BYTES == 141_107_412_992
    f = get_fabric("nvlink4")
    assert (f.bandwidth_gbps, f.latency_us) == (450.0, 0.6)


def test_all_reduce_time_by_hand():
    # One all-reduce of 64 tokens × 8192 × 2 bytes = 1,048,576 B over tp = 8 on NVLink 4:
    # 8.6 µs + 1,048,576 / 190.7e9 = 8.6 µs + 5.4986 µs (the measured α + S/β; the ring
    # model of NCCL's hop latency gave 12.48 µs, against 12-16 µs measured at 1 MiB)
    one = 8.6e-6 + 1_048_576 / 190.7e9
    assert one == pytest.approx(14.0986e-6, rel=1e-4)
    cost = InstanceCost.build(llama70b(), h100(), 8, EFF, nvlink4(8))
    # two all-reduces per layer, 80 layers
    assert float(cost.comm_time(64)) == pytest.approx(160 * one, rel=1e-12)
    assert 160 * one == pytest.approx(2.25577e-3, rel=1e-5)


def test_unmeasured_fabrics_keep_the_ring_model():
    # NVLink 3 (A100): no all-reduce measurement; 2·7/8 · S / 300 GB/s + 2·7 · 0.6 µs
    f = get_fabric("nvlink3")
    assert f.allreduce_alpha_us is None and f.allreduce_gbps is None
    one = 2 * 7 / 8 * 1_048_576 / 300e9 + 2 * 7 * 0.6e-6
    cost = InstanceCost.build(llama70b(), h100(), 8, EFF, Parallelism(tp=8, fabric=f))
    assert float(cost.comm_time(64)) == pytest.approx(160 * one, rel=1e-12)


def test_decode_iteration_tp8_is_roofline_over_8_plus_comm():
    # batch 64, 2,048 tokens of context each: memory-bound on 8 H100s
    b, ctx = 64, 64 * 2048
    nbytes = L70_READ_BYTES + L70_KV_PER_TOKEN * ctx  # 181,955,739,648 B
    flops = b * 2 * (L70_BODY + 128256 * 8192) + 2 * 80 * 64 * 256 * ctx
    assert flops / (989.5e12 * 8 * 0.5) < nbytes / (3350e9 * 8 * 0.7)  # memory-bound
    roofline_one_device = nbytes / (3350e9 * 0.7)
    comm = 160 * ((b * 8192 * 2) / AR_BPS + AR_ALPHA)
    want = roofline_one_device / 8 + 1e-3 + comm
    cost = InstanceCost.build(llama70b(), h100(), 8, EFF, nvlink4(8))
    assert float(decode_iteration_time(cost, b, ctx)) == pytest.approx(want, rel=1e-12)
    # the closed form's constant carries the same comm term
    a1, s1, a2, s2, o = decode_series_coeffs(cost, b, ctx)
    assert max(a1, a2) + o == pytest.approx(want, rel=1e-12)
    # (o also holds the GEMM operator, constant for the batch: the weights' read)
    assert o == pytest.approx(L70_READ_BYTES / (3350e9 * 8 * 0.7) + 1e-3 + comm, rel=1e-12)


def test_prefill_step_tp8_adds_the_all_reduces_of_its_new_tokens():
    n = 2048
    cost = InstanceCost.build(llama70b(), h100(), 8, EFF, nvlink4(8))
    ideal = InstanceCost.build(llama70b(), h100(), 8, EFF)
    comm = 160 * ((n * 8192 * 2) / AR_BPS + AR_ALPHA)
    got = prefill_time(cost, [n], [0]) - prefill_time(ideal, [n], [0])
    assert got == pytest.approx(comm, rel=1e-9)
    assert comm == pytest.approx(29.53e-3, rel=1e-3)  # `prefixbench cost --devices 8`


def test_pipeline_bubble_by_hand():
    # tp 4 × pp 2 on 8 H100s, one micro-batch per iteration: the stages run one after the
    # other, so a step sees 4 devices' HBM at a time; the iteration is the SUM over stages,
    # twice the tp = 8 roofline (no throughput gain for a single batch).
    b, ctx = 64, 64 * 2048
    nbytes = L70_READ_BYTES + L70_KV_PER_TOKEN * ctx
    memory = nbytes / (3350e9 * 4 * 0.7)
    msg = b * 8192 * 2  # one group (8 / (4·2) = 1) carries all 64 tokens
    all_reduces = 160 * (msg / AR_BPS + AR_ALPHA)
    boundary = msg / NVL4_BPS + NVL4_LAT  # one stage-to-stage send
    want = memory + 1e-3 + all_reduces + boundary
    cost = InstanceCost.build(llama70b(), h100(), 8, EFF, nvlink4(4, pp=2))
    assert float(decode_iteration_time(cost, b, ctx)) == pytest.approx(want, rel=1e-12)
    tp8 = InstanceCost.build(llama70b(), h100(), 8, EFF)
    ideal8 = float(decode_iteration_time(tp8, b, ctx)) - 1e-3
    assert memory == pytest.approx(2 * ideal8, rel=1e-12)


def test_expert_parallel_all_to_all_by_hand():
    m = catalog.get_model("deepseek-v2-lite")
    assert (m.layers, m.first_dense_layers, m.hidden_size, m.experts_per_token) == (
        27,
        1,
        2048,
        6,
    )
    # ep 8, tp 1 on 8 devices, a 64-token step: 8 tokens per device, each sent to 6
    # experts: 8·6·2048·2 = 196,608 B, 7/8 of it leaves the device; dispatch and combine
    # on each of the 26 MoE layers.
    one = 7 / 8 * 196_608 / NVL4_BPS + NVL4_LAT
    per_token, fixed = comm_coeffs(m, 8, nvlink4(1, ep=8))
    assert per_token * 64 + fixed == pytest.approx(52 * one, rel=1e-12)
    assert fixed == pytest.approx(52 * 0.6e-6, rel=1e-12)
    # a dense model has no all-to-all: ep changes nothing
    assert comm_coeffs(llama70b(), 8, nvlink4(1, ep=8)) == (0.0, 0.0)


def test_one_device_and_the_ideal_fabric_pay_exactly_zero():
    assert comm_coeffs(llama70b(), 1, nvlink4(1)) == (0.0, 0.0)
    ideal = Parallelism(tp=4, pp=2, ep=1, fabric=FABRICS["ideal"])
    assert comm_coeffs(llama70b(), 8, ideal) == (0.0, 0.0)
    for tokens in (1, 64, 4096):
        c = InstanceCost.build(
            llama70b(), h100(), 8, EFF, Parallelism(tp=8, fabric=FABRICS["ideal"])
        )
        assert float(c.comm_time(tokens)) == 0.0


def test_default_fabric_follows_the_accelerator():
    assert default_fabric("h100-sxm") == "nvlink4"
    assert default_fabric("a100-80gb") == "nvlink3"
    assert default_fabric("b200") == "nvlink5"
    assert default_fabric("l4") == "pcie4-x16"
    assert default_fabric("hardware/optical_mac.yaml") == "ideal"  # unknown: no comm
    s = load_scenario("medium_chat", ["cluster.decode.accelerator=h100-sxm"])
    par = s.cluster.decode.parallelism()
    assert (par.tp, par.pp, par.ep, par.fabric.name) == (1, 1, 1, "nvlink4")
    with pytest.raises(CatalogError, match="unknown fabric"):
        get_fabric("nvlink9")


def test_split_that_does_not_divide_the_devices_is_refused():
    with pytest.raises(ScenarioError, match=r"tp·pp·ep = 3·1·1 = 3 does not divide devices = 8"):
        load_scenario("medium_chat", ["cluster.decode.devices=8", "cluster.decode.tp=3"])
    with pytest.raises(ScenarioError, match=r"tp·pp·ep = 4·2·2 = 16"):
        load_scenario(
            "medium_chat",
            ["cluster.prefill.devices=8", "cluster.prefill.tp=4", "cluster.prefill.pp=2",
             "cluster.prefill.ep=2"],
        )  # fmt: skip
    # 4 · 1 · 1 divides 8: two data-parallel TP groups
    load_scenario("medium_chat", ["cluster.decode.devices=8", "cluster.decode.tp=4"])
    # tp left out: the devices pp and ep leave (8 / 2 = 4)
    s = load_scenario("medium_chat", ["cluster.decode.devices=8", "cluster.decode.pp=2"])
    assert s.cluster.decode.parallelism().tp == 4
    with pytest.raises(ScenarioError, match=r"tp·pp·ep = 2·3·1 = 6 does not divide devices = 8"):
        load_scenario("medium_chat", ["cluster.decode.devices=8", "cluster.decode.pp=3"])


def test_cli_refuses_the_split_in_one_line(tmp_path):
    runner = CliRunner(env={"COLUMNS": "120", "NO_COLOR": "1", "TERM": "dumb"})
    r = runner.invoke(
        app,
        ["run", "--set", "cluster.decode.devices=8", "--set", "cluster.decode.pp=3",
         "--out", str(tmp_path)],
    )  # fmt: skip
    line = assert_one_stderr_line(r, code=2)
    assert "cluster.decode" in line and "3·1 = 6 does not divide devices = 8" in line, line


def _summary(name: str, sets: list[str]) -> dict:
    from test_golden import KEYS

    from prefixbench.scenario.models import POLICIES
    from prefixbench.study.runs import run_scenario

    # the seed's reserve admission, as when those goldens were stored
    sets = ["memory.admission=reserve", *sets]
    s = load_scenario(name, ["run.requests=1000", "run.warmup_requests=100", *sets])
    rows = run_scenario(s, list(POLICIES), keep_requests=False).summary.to_dicts()
    return {r["policy"]: {k: r[k] for k in KEYS} for r in rows}


@pytest.mark.parametrize("name", ["splitwise_hetero", "optical_mac"])
def test_zero_cost_fabric_is_bit_identical_to_ideal_tensor_parallelism(name):
    """The multi-device presets (splitwise_hetero: 8× H100 prefill, 8× A100 decode;
    optical_mac: 4 devices each) on the ideal fabric reproduce the goldens stored BEFORE
    communication was modelled, exactly (== on every float); their recompute_on_decode rows
    were regenerated when recompute became chunks in decode iterations, and every row when
    steps became per-operator rooflines (docs/model/cost-model.md)."""
    want = json.loads((GOLDEN / f"{name}_ideal_fabric.json").read_text())
    # ... and with the link and the request as they were then: line rate, no connector
    # setup, no NIC ceiling (1e5 GB/s never binds), no per-request or per-prompt-token cost
    # (docs/model.md "KV transfer cost", §2.14); those runs
    # sized memory on the ideal fabric, and a budget factor now measures it on the file's
    # fabric (docs/model.md, "Memory in GB"), so the golden's size is stated in GB
    gb = next(iter(want.values()))["kv_budget_gb"]
    then = [
        "cluster.link.efficiency=1",
        "cluster.link.setup_us=0",
        "cluster.link.ceiling_gbps=1e5",
        "efficiency.request_overhead_ms=0",
        "efficiency.prompt_overhead_us=0",
        f"memory.kv_budget_gb={gb!r}",
    ]
    got = _summary(name, ["cluster.prefill.fabric=ideal", "cluster.decode.fabric=ideal", *then])
    assert set(want) <= set(got)
    got = {p: m for p, m in got.items() if p in want}  # policies added since have no old run
    assert json.loads(json.dumps(got)) == want
    moved = _summary(name, then)  # default NVLink: every latency grows
    for policy, m in moved.items():
        if policy not in want:
            continue
        assert m["ttft_mean_ms"] > want[policy]["ttft_mean_ms"], policy
        assert m["tpot_mean_ms"] > want[policy]["tpot_mean_ms"], policy


def test_engine_step_times_carry_the_comm_terms_by_hand():
    """One 2,048-token request, 4 output tokens, on Llama-3.1-70B: prefill on 8 H100s at
    tp 8, decode on 8 H100s at tp 4 × pp 2, NVLink 4, zero-latency 3.125 GB/s link. Every
    stage written out from the raw numbers above."""
    from prefixbench.system.runner import EngineConfig, simulate

    m, dev = llama70b(), h100()
    cfg = EngineConfig(
        policy="transfer_per_request",
        prefill_cost=InstanceCost.build(m, dev, 8, EFF, nvlink4(8)),
        decode_cost=InstanceCost.build(m, dev, 8, EFF, nvlink4(4, pp=2)),
    )
    n, out = 2048, 4
    cols = simulate(make_requests([0.0], [n], [out], [[]]), cfg).columns
    f_lin, f_head = 2.0 * L70_BODY, 2.0 * 128256 * 8192
    attn = 2.0 * 80 * 64 * (128 + 128)
    # prefill: per operator on 8 devices (one tp-8 group: T½ = 96 tokens), the GEMMs and
    # attention compute-bound (attention at the default 0.72), plus 160 all-reduces of
    # 2,048 tokens (tp 8)
    gemm = (n * f_lin + f_head) * (n + 96) / (n * 989.5e12 * 8 * 0.5)
    assert gemm > L70_READ_BYTES / (3350e9 * 8 * 0.7)
    t_attn = attn * n * (n + 1) / 2 / (989.5e12 * 8 * 0.72)
    assert t_attn > L70_KV_PER_TOKEN * n / (3350e9 * 8 * 0.7)
    step = gemm + t_attn + 1e-3 + 160 * ((n * 8192 * 2) / AR_BPS + AR_ALPHA)
    assert cols["t_prefill_end"][0] == pytest.approx(step, rel=1e-12)
    land = step + n * L70_KV_PER_TOKEN / 3.125e9
    assert cols["t_transfer_end"][0] == pytest.approx(land, rel=1e-12)
    # decode, batch 1: 4 devices' HBM at a time (pp 2), tp-4 all-reduces of one token, one
    # stage boundary
    comm = 160 * ((8192 * 2) / AR_BPS + AR_ALPHA) + (8192 * 2 / NVL4_BPS + NVL4_LAT)
    its = [
        max((f_lin + f_head) * (1 + 96) / (989.5e12 * 4 * 0.5), L70_READ_BYTES / (3350e9 * 4 * 0.7))
        + max(
            attn * (n + j) / (989.5e12 * 4 * 0.72),
            L70_KV_PER_TOKEN * (n + j) / (3350e9 * 4 * 0.7),
        )
        + 1e-3
        + comm
        for j in range(out)
    ]
    assert cols["t_first_token"][0] == pytest.approx(land + its[0], rel=1e-12)
    assert cols["t_done"][0] == pytest.approx(land + sum(its), rel=1e-12)


def test_a_tp_degree_that_does_not_divide_the_heads_is_refused():
    """qwen2-1.5b has 12 attention heads (config.json num_attention_heads): TP 8 cannot
    shard them, as vLLM refuses; TP 4 can."""
    from prefixbench.system.runner import prepare

    short = ["run.requests=50", "run.warmup_requests=0"]
    with pytest.raises(ScenarioError, match="tensor parallelism 8 does not divide the 12"):
        prepare(load_scenario("medium_chat", [*short, "cluster.decode.devices=8"]))
    prepare(load_scenario("medium_chat", [*short, "cluster.decode.devices=4"]))
