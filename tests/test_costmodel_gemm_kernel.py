"""The GEMM kernel's fixed time and an accelerator's own weights' MBU
(docs/model/cost-model.md "GEMM kernel fixed time").

Every expected number is written by hand from the model's config.json and the part's
figures (InferSim's H20 table: FP8 296 TFLOP/s, 4,096 GB/s; the constants fitted on the
fit rows of tests/data/measured/infersim_gemm_h20.csv: MFU 0.91, T½ 10 tokens, 3.5 µs per
kernel, weights at 0.43 of HBM), never with the code under test; each fails if the term
it guards were 10 % off.
"""

from __future__ import annotations

import pytest
from reference_roofline import Efficiency as RefEfficiency
from reference_roofline import Roofline

from prefixbench.catalog import MODELS, AcceleratorSpec
from prefixbench.catalog.formats import with_formats
from prefixbench.catalog.userfile import load_hardware
from prefixbench.errors import CatalogError
from prefixbench.physics import costmodel as cm

H20 = AcceleratorSpec(
    name="h20-like", vendor="NVIDIA", peak_tflops=148.0, peak_fp8_tflops=296.0,
    hbm_gbps=4096.0, memory_gb=96.0, gemm_mfu=0.91, gemm_half_tokens=10.0,
    gemm_kernel_us=3.5, gemm_mbu=0.43,
)  # fmt: skip
PLAIN = H20.model_copy(update={"gemm_kernel_us": None, "gemm_mbu": None})
LLAMA = MODELS["llama-3.1-8b"]  # config.json: num_hidden_layers 32
EFF = cm.Efficiency()  # prefill and decode overhead 1.0 ms each


def test_a_step_launches_four_gemm_kernels_per_layer_and_the_lm_head():
    assert cm.gemm_kernels(LLAMA) == 129  # 4 · 32 + 1


def test_every_step_pays_its_kernels_fixed_time():
    cost = cm.InstanceCost.build(LLAMA, H20, 1, EFF)
    # 1.0 ms + 129 kernels · 3.5 µs = 1.4515 ms, prefill and decode alike
    assert cost.prefill_overhead == pytest.approx(1.4515e-3, rel=1e-9)
    assert cost.decode_overhead == pytest.approx(1.4515e-3, rel=1e-9)
    plain = cm.InstanceCost.build(LLAMA, PLAIN, 1, EFF)
    assert plain.decode_overhead == pytest.approx(1.0e-3, rel=1e-9)  # not measured: 0 µs
    with_k = float(cm.decode_iteration_time(cost, 8, 8 * 1000))
    without = float(cm.decode_iteration_time(cm.InstanceCost.build(LLAMA, PLAIN, 1,
                    EFF.model_copy(update={"mbu": 0.43})), 8, 8 * 1000))  # fmt: skip
    assert with_k - without == pytest.approx(0.4515e-3, rel=1e-6)


def test_weights_stream_at_the_parts_own_mbu_unless_the_user_sets_one():
    cost = cm.InstanceCost.build(LLAMA, H20, 1, EFF)
    assert cost.byte_rate == pytest.approx(1.76128e12, rel=1e-9)  # 4,096 GB/s · 0.43
    given = cm.InstanceCost.build(LLAMA, H20, 1, cm.Efficiency(mbu=0.7))
    assert given.byte_rate == pytest.approx(2.8672e12, rel=1e-9)  # 4,096 GB/s · 0.7
    plain = cm.InstanceCost.build(LLAMA, PLAIN, 1, EFF)
    assert plain.byte_rate == pytest.approx(2.8672e12, rel=1e-9)  # the default 0.7


@pytest.mark.parametrize(
    "m, expected_us",
    [
        # 16 tokens: weights-bound. 2,048 · 2,048 FP8 bytes / (4,096 GB/s · 0.43) = 2.3814
        # µs against 2 · 16 · 2,048² FLOPs at 296 T · 0.91 · 16/26 = 0.8097 µs; + 3.5 µs
        (16, 5.8814),
        # 8,192 tokens: compute-bound. 68,719,476,736 FLOPs at 296 T · 0.91 · 8,192/8,202
        # = 255.433 µs; + 3.5 µs
        (8192, 258.933),
    ],
)
def test_one_fp8_gemm_kernel_on_the_h20(m, expected_us):
    m8 = with_formats(LLAMA, weights="fp8")
    cost = cm.InstanceCost.build(m8, H20, 1, EFF)
    k = n = 2048
    t = cm.gemm_kernel_time(cost, 2.0 * m * k * n, m, k * n * 1.0, cost.flops_rate_prefill)
    assert float(t) * 1e6 == pytest.approx(expected_us, rel=1e-4)


def test_the_reference_roofline_follows_both_terms():
    # the engine prices steps from InstanceCost's overheads and byte rate; the reference
    # simulator reads the same two fields of the accelerator on its own
    cost = cm.InstanceCost.build(LLAMA, H20, 1, EFF)
    ref = Roofline(LLAMA, H20, 1, RefEfficiency.of(EFF))
    assert ref.decode_iteration(8, 8000) == pytest.approx(
        float(cm.decode_iteration_time(cost, 8, 8000)), rel=1e-9
    )
    assert ref.prefill_step([(700, 300)]) == pytest.approx(
        cm.prefill_time(cost, [700], [300]), rel=1e-9
    )
    given = cm.Efficiency(mbu=0.6)
    ref = Roofline(LLAMA, H20, 1, RefEfficiency.of(given))
    assert ref.decode_iteration(8, 8000) == pytest.approx(
        float(cm.decode_iteration_time(cm.InstanceCost.build(LLAMA, H20, 1, given), 8, 8000)),
        rel=1e-9,
    )


ACCEL = """hardware: accelerator
name: my-gpu
vendor: me
peak_tflops: 500
hbm_gbps: 2000
memory_gb: 64
source: user
"""


def test_an_accelerator_file_carries_its_kernel_time_and_mbu(tmp_path):
    path = tmp_path / "hw.yaml"
    path.write_text(ACCEL + "gemm_kernel_us: 3.5\ngemm_mbu: 0.43\n", encoding="utf-8")
    spec = load_hardware(path)
    assert (spec.gemm_kernel_us, spec.gemm_mbu) == (3.5, 0.43)
    path.write_text(ACCEL + "gemm_kernel_us: -1\n", encoding="utf-8")
    with pytest.raises(CatalogError) as e:
        load_hardware(path)
    assert "gemm_kernel_us" in str(e.value) and "\n" not in str(e.value)


def test_cost_report_shows_the_mbu_and_kernel_time_it_priced_with(tmp_path):
    from prefixbench.physics.costreport import cost_report

    path = tmp_path / "h20.yaml"
    path.write_text(ACCEL + "gemm_kernel_us: 3.5\ngemm_mbu: 0.43\n", encoding="utf-8")
    eff = cost_report("llama-3.1-8b", accelerator=str(path))["efficiency"]
    assert (eff["mbu"], eff["gemm_kernel_us"]) == (0.43, 3.5)
    plain = cost_report("llama-3.1-8b", accelerator="h100-sxm")["efficiency"]
    assert (plain["mbu"], plain["gemm_kernel_us"]) == (0.7, 0.0)
