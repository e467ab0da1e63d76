"""Accelerator presets from vendor datasheets.

``peak_tflops`` is the dense BF16 tensor-core peak: NVIDIA datasheets print the 2:4
structured-sparsity figure first ("with sparsity"), so dense = sparse / 2. Bandwidth is in
GB/s and memory in GB as printed (10^9 bytes). ``peak_fp8_tflops`` and ``peak_int8_tflops``
are the same datasheets' dense FP8 and INT8 tensor peaks (sparse / 2; None where the part
has no such cores or the datasheet prints none): an FP8 (W8A8) or INT8 (W8A8) checkpoint's
GEMMs run at them (docs/model/cost-model.md "Per-operator roofline").
"""

from __future__ import annotations

from .specs import AcceleratorSpec

# --- power (docs/model.md §2.11). TDP is each datasheet's board power limit (the
# comment on each preset). Idle power is an assumption: 11.5 % of TDP, the share one
# third-party measurement found on an H200 SXM (80.3 W idle against a 700 W TDP,
# https://api.serialalice.pt/alice-benchmark); vendors publish no idle figure. Memory
# energy: HBM2 moves a bit for about 3.9 pJ (O'Connor et al., "Fine-Grained DRAM", MICRO
# 2017, https://doi.org/10.1145/3123939.3124545), used for HBM2e/HBM3/HBM3e too; GDDR6 is
# taken as twice that (assumption: GDDR-class memory costs about twice HBM per bit).
IDLE_SHARE = 0.115
HBM_PJ_PER_BIT = 3.9
GDDR6_PJ_PER_BIT = 7.8
POWER_SOURCE = (
    "TDP: the datasheet above; idle: 11.5 % of TDP (assumption, H200 measurement); "
    "memory: O'Connor et al. MICRO 2017 (HBM2 3.9 pJ/bit)"
)

_PRESETS = [
    AcceleratorSpec(
        name="l4",
        vendor="NVIDIA",
        peak_tflops=121.0,  # datasheet: BF16 Tensor Core 242 TFLOPS with sparsity
        peak_fp8_tflops=242.5,  # datasheet: FP8 Tensor Core 485 TFLOPS with sparsity
        peak_int8_tflops=242.5,  # datasheet: INT8 Tensor Core 485 TOPS with sparsity
        hbm_gbps=300.0,  # GDDR6, 300 GB/s
        memory_gb=24.0,
        source="https://www.nvidia.com/en-us/data-center/l4/",
        tdp_w=72.0,  # L4 datasheet: max thermal design power 72 W
        idle_w=round(IDLE_SHARE * 72.0, 1),
        memory_pj_per_bit=GDDR6_PJ_PER_BIT,
        power_source=POWER_SOURCE,
    ),
    AcceleratorSpec(
        name="a10g",
        vendor="NVIDIA",
        # NVIDIA publishes no datasheet for the A10G (an AWS-only variant of the A10), and AWS
        # states only "24 GB of memory per GPU". The 70 TFLOPS dense BF16 and 600 GB/s are from
        # Baseten's A10 vs A10G comparison (third party). For scale, the A10 datasheet
        # (https://www.nvidia.com/en-us/data-center/products/a10-gpu/) gives 125 TFLOPS dense
        # BF16 and the same 600 GB/s, 24 GB.
        peak_tflops=70.0,
        hbm_gbps=600.0,
        memory_gb=24.0,
        source=(
            "https://aws.amazon.com/ec2/instance-types/g5/ ; "
            "https://www.baseten.co/blog/nvidia-a10-vs-a10g-for-ml-model-inference/"
        ),
        tdp_w=300.0,  # no datasheet: the power limit nvidia-smi shows on EC2 g5 (assumption; A10 card: 150 W)
        idle_w=round(IDLE_SHARE * 300.0, 1),
        memory_pj_per_bit=GDDR6_PJ_PER_BIT,
        power_source=POWER_SOURCE,
    ),
    AcceleratorSpec(
        name="l40s",
        vendor="NVIDIA",
        peak_tflops=362.05,  # datasheet: BF16 Tensor Core 362.05 dense | 733 with sparsity
        peak_fp8_tflops=733.0,  # datasheet: FP8 Tensor Core 733 | 1,466 with sparsity
        peak_int8_tflops=733.0,  # datasheet: INT8 Tensor Core 733 | 1,466 with sparsity
        hbm_gbps=864.0,  # GDDR6, 864 GB/s
        memory_gb=48.0,
        source="https://www.nvidia.com/en-us/data-center/l40s/",
        tdp_w=350.0,  # L40S datasheet: max power consumption 350 W
        idle_w=round(IDLE_SHARE * 350.0, 1),
        memory_pj_per_bit=GDDR6_PJ_PER_BIT,
        power_source=POWER_SOURCE,
    ),
    AcceleratorSpec(
        name="a100-40gb",
        vendor="NVIDIA",
        peak_tflops=312.0,  # datasheet: BFLOAT16 Tensor Core 312 | 624 with sparsity
        peak_int8_tflops=624.0,  # datasheet: INT8 Tensor Core 624 | 1,248 with sparsity (no FP8)
        hbm_gbps=1555.0,  # A100 40GB SXM: 1,555 GB/s HBM2
        memory_gb=40.0,
        source=(
            "https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/"
            "nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf"
        ),
        tdp_w=400.0,  # A100 datasheet: max TDP 400 W (SXM)
        idle_w=round(IDLE_SHARE * 400.0, 1),
        memory_pj_per_bit=HBM_PJ_PER_BIT,
        power_source=POWER_SOURCE,
    ),
    AcceleratorSpec(
        name="a100-80gb",
        vendor="NVIDIA",
        peak_tflops=312.0,  # same compute as the 40 GB part
        peak_int8_tflops=624.0,  # datasheet: INT8 Tensor Core 624 | 1,248 with sparsity (no FP8)
        hbm_gbps=2039.0,  # A100 80GB SXM: 2,039 GB/s HBM2e (the PCIe card is 1,935)
        memory_gb=80.0,
        source=(
            "https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/"
            "nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf"
        ),
        tdp_w=400.0,  # A100 datasheet: max TDP 400 W (SXM)
        idle_w=round(IDLE_SHARE * 400.0, 1),
        memory_pj_per_bit=HBM_PJ_PER_BIT,
        power_source=POWER_SOURCE,
    ),
    AcceleratorSpec(
        name="h100-sxm",
        vendor="NVIDIA",
        peak_tflops=989.5,  # datasheet: BF16 Tensor Core 1,979 TFLOPS with sparsity (SXM)
        peak_fp8_tflops=1979.0,  # datasheet: FP8 Tensor Core 3,958 TFLOPS with sparsity
        peak_int8_tflops=1979.0,  # datasheet: INT8 Tensor Core 3,958 TOPS with sparsity
        hbm_gbps=3350.0,  # HBM3, 3.35 TB/s
        memory_gb=80.0,
        source="https://www.nvidia.com/en-us/data-center/h100/",
        tdp_w=700.0,  # H100 datasheet: max TDP up to 700 W (SXM)
        idle_w=round(IDLE_SHARE * 700.0, 1),
        memory_pj_per_bit=HBM_PJ_PER_BIT,
        power_source=POWER_SOURCE,
    ),
    AcceleratorSpec(
        name="h200",
        vendor="NVIDIA",
        peak_tflops=989.5,  # datasheet: BF16 Tensor Core 1,979 TFLOPS with sparsity (SXM)
        peak_fp8_tflops=1979.0,  # datasheet: FP8 Tensor Core 3,958 TFLOPS with sparsity
        peak_int8_tflops=1979.0,  # datasheet: INT8 Tensor Core 3,958 TOPS with sparsity
        hbm_gbps=4800.0,  # HBM3e, 4.8 TB/s
        memory_gb=141.0,
        source="https://www.nvidia.com/en-us/data-center/h200/",
        tdp_w=700.0,  # H200 datasheet: max TDP up to 700 W (SXM)
        idle_w=round(IDLE_SHARE * 700.0, 1),
        memory_pj_per_bit=HBM_PJ_PER_BIT,
        power_source=POWER_SOURCE,
    ),
    AcceleratorSpec(
        name="b200",
        vendor="NVIDIA",
        # HGX B200 per-GPU figures: FP16/BF16 Tensor Core 4.5 PFLOPS with sparsity -> 2.25
        # dense; 180 GB HBM3E at 7.7 TB/s (HGX B200 totals: up to 1.4 TB, 62 TB/s over 8 GPUs).
        # Cross-checked with https://glennklockwood.com/garden/processors/B200 (HGX B200 BF16:
        # 2250 dense / 4500 sparse TFLOPS).
        peak_tflops=2250.0,
        peak_fp8_tflops=4500.0,  # HGX B200: FP8/FP6 Tensor Core 9 PFLOPS with sparsity
        peak_int8_tflops=4500.0,  # HGX B200: INT8 Tensor Core 9 POPS with sparsity
        hbm_gbps=7700.0,
        memory_gb=180.0,
        source="https://www.nvidia.com/en-us/data-center/hgx/",
        tdp_w=1000.0,  # HGX B200 / DGX B200: 1,000 W per GPU
        idle_w=round(IDLE_SHARE * 1000.0, 1),
        memory_pj_per_bit=HBM_PJ_PER_BIT,
        power_source=POWER_SOURCE,
    ),
]

ACCELERATORS: dict[str, AcceleratorSpec] = {a.name: a for a in _PRESETS}
