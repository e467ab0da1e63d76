"""Memory in GB: gpu_memory_utilization as vLLM's flag, and a budget factor that stands for
one size whatever --set changes (docs/model.md, "Memory in GB").

Expected sizes are worked by hand from the models' config.json and the datasheets."""

from __future__ import annotations

import pytest

from prefixbench.errors import ScenarioError
from prefixbench.scenario.loader import load_scenario
from prefixbench.system.runner import prepare

SHORT = ["run.requests=400", "run.warmup_requests=50"]

# meta-llama/Llama-3.1-8B config.json: hidden 4096, 32 layers, 32 heads, 8 KV heads,
# head_dim 128, intermediate 14336, vocab 128256, untied embeddings, bf16.
LLAMA_PARAMS = (
    2 * 128256 * 4096  # embeddings + LM head
    + 32
    * (
        4096 * 4096 * 2  # q, o
        + 4096 * 1024 * 2  # k, v (8 KV heads x 128)
        + 3 * 4096 * 14336  # gate, up, down
        + 2 * 4096  # two RMSNorms
    )
    + 4096  # final norm
)
LLAMA_WEIGHTS = LLAMA_PARAMS * 2  # bf16
LLAMA_KV_PER_TOKEN = 2 * 32 * 8 * 128 * 2  # K and V, 32 layers, 8 heads x 128, bf16
H100_HBM = 80e9  # NVIDIA H100 SXM datasheet: 80 GB HBM3
L40S_HBM = 48e9  # NVIDIA L40S datasheet: 48 GB GDDR6


def _reserve(tp: int, step_tokens: int = 1024, batch: int = 64) -> float:
    """Activation reserve per device: 1024 tokens x (4 x 4096 + 2 x 14336 / tp) bf16 values
    plus 64 rows of fp32 logits over the 128256-token vocabulary."""
    return step_tokens * (4 * 4096 + 2 * 14336 / tp) * 2 + batch * 128256 * 4


def _kv_gb(scenario, extra=()):
    prep = prepare(load_scenario(scenario, [*SHORT, *extra]))
    return prep.base.budget_tokens * prep.kv_bpt / 1e9, prep


def _llama_h100(rate: float, devices: int = 1, acc: str = "h100-sxm"):
    return [
        "model=llama-3.1-8b",
        f"cluster.decode.accelerator={acc}",
        f"cluster.prefill.accelerator={acc}",
        f"cluster.decode.devices={devices}",
        "memory.gpu_memory_utilization=0.9",
        f"workload.arrivals.rate={rate}",
    ]


def test_gpu_memory_utilization_is_vllms_pool_in_gb():
    expected = (0.9 * H100_HBM - LLAMA_WEIGHTS - _reserve(1)) / 1e9  # 55.7 GB
    gb, prep = _kv_gb("tool_call", _llama_h100(4.0))
    assert prep.kv_bpt == LLAMA_KV_PER_TOKEN
    assert gb == pytest.approx(expected, abs=LLAMA_KV_PER_TOKEN / 1e9)
    assert 55 < expected < 56  # what a vLLM user sees on one H100 at 0.9


def test_gpu_memory_utilization_is_tensor_parallel_aware():
    # two L40S as one TP-2 instance: both devices' share, the weights once, two reserves
    expected = (0.9 * 2 * L40S_HBM - LLAMA_WEIGHTS - 2 * _reserve(2)) / 1e9
    gb, _ = _kv_gb("tool_call", _llama_h100(4.0, devices=2, acc="l40s"))
    assert gb == pytest.approx(expected, abs=LLAMA_KV_PER_TOKEN / 1e9)


def test_doubling_the_rate_leaves_the_kv_gb_unchanged():
    expected = (0.9 * H100_HBM - LLAMA_WEIGHTS - _reserve(1)) / 1e9
    at4, _ = _kv_gb("tool_call", _llama_h100(4.0))
    at8, _ = _kv_gb("tool_call", _llama_h100(8.0))
    assert at4 == at8 == pytest.approx(expected, abs=LLAMA_KV_PER_TOKEN / 1e9)


@pytest.mark.parametrize(
    "change",
    [
        ["workload.arrivals.rate=28"],  # the rate doubled (tool_call states 14 req/s)
        ["cluster.decode.accelerator=h100-sxm", "cluster.prefill.accelerator=h100-sxm"],
        ["model.kv_dtype=fp8"],
        ["cluster.decode.devices=2"],
        ["seed=3"],
    ],
    ids=["rate", "accelerator", "kv-fp8", "devices", "seed"],
)
def test_a_budget_factor_is_one_size_whatever_set_changes(change):
    """budget_factor multiplies the reference demand measured on the scenario as its file
    states it: changing the rate, hardware, KV format or seed keeps the GB."""
    base, ref_prep = _kv_gb("tool_call", ["memory.budget_factor=0.5"])
    moved, prep = _kv_gb("tool_call", ["memory.budget_factor=0.5", *change])
    # whole tokens: within one token's bytes (fp8 halves the bytes per token)
    assert moved == pytest.approx(base, abs=2 * ref_prep.kv_bpt / 1e9)
    assert prep.reference_gb == pytest.approx(ref_prep.reference_gb, rel=1e-12)


def test_the_reference_is_the_file_as_written_on_the_model_run():
    """The file's own rate gives the reference: a factor of 1.0 there is the reference
    demand itself, and the same factor at twice the rate is the same size."""
    own, prep = _kv_gb("tool_call", ["memory.budget_factor=1.0"])
    assert own == pytest.approx(prep.reference_tokens * prep.kv_bpt / 1e9, abs=prep.kv_bpt / 1e9)
    other_model, p2 = _kv_gb("tool_call", ["model=qwen2-0.5b"])
    assert p2.model.name == "qwen2-0.5b" and other_model != own  # the model is part of it


def test_kv_budget_gb_and_utilization_are_exclusive():
    with pytest.raises(ScenarioError, match="give one of them"):
        load_scenario(
            "tool_call", ["memory.kv_budget_gb=4", "memory.gpu_memory_utilization=0.9"]
        )


def test_capacity_search_holds_memory_fixed():
    """capacity probes rates by copying the scenario: every probe keeps the file's size."""
    from prefixbench.study.capacity import _with_rate

    s = load_scenario("tool_call", [*SHORT, "memory.budget_factor=0.5"])
    sizes = set()
    for rate in (3.5, 14.0, 56.0):
        prep = prepare(_with_rate(s, rate))
        sizes.add(prep.base.budget_tokens)
    assert len(sizes) == 1
