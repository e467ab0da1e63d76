"""Scale-up fabrics: the links between the devices of ONE instance (TP/PP/EP traffic).

``bandwidth_gbps`` is GB/s (10^9 bytes/s) per device and direction: NVLink as half of
NVIDIA's "total" (bidirectional) per-GPU figure, behind NVSwitch so every pair of devices
gets it; PCIe x16 as GT/s × 16 lanes × 128/130 / 8 bits.

``latency_us`` is the time of one step of a ring collective (one hop), from NCCL's own
tuning model (``src/graph/tuning.cc``, table ``hwLat``, Ring/LL, the protocol NCCL picks for
small messages): 0.6 µs on NVLink, 1.0 µs on PCI. NCCL does not distinguish NVLink
generations, so neither do we. NCCL's per-collective base latency (``baseLat``, ~6.6 µs for
Ring/LL) is NOT charged (docs/model.md §2.8).

A TP all-reduce of ``S`` bytes costs ``α + S / β`` where measured (docs/model.md §2.8):
``allreduce_alpha_us`` (α) and ``allreduce_gbps`` (β, bytes of the message per second) are
a least-squares line through what vLLM actually dispatches on H100s (the fastest of its
custom all-reduce, NCCL and symmetric-memory backends), bf16, hidden 8192:
vLLM's ``benchmarks/kernels/benchmark_device_communicators.py`` at TP 6, 0.5 to 4 MiB:
13, 16, 18, 21, 25, 31 µs (github.com/vllm-project/vllm/pull/24111, "Isolated primitives
benchmark results", H100), and ``benchmark_fused_collective.py``'s unfused all-reduce +
RMSNorm at TP 2, 0.5, 1, 2 MiB: 10, 12, 17 µs (github.com/vllm-project/vllm/pull/22086,
"H100 TP=2 No quant"). The fit: α = 8.6 µs, 5.50 µs per MiB, i.e. β = 190.7 GB/s; the
one-shot and multimem kernels vLLM uses up to a few MiB take about the same time per byte
at any TP degree, so β does not depend on it. Only NVLink 4 has such a measurement in the
catalog; the other fabrics keep the ring model (``α = 2(tp − 1)·latency``,
``S / β = 2(tp − 1)/tp · S / bandwidth``), which under-prices small messages.

The ``ideal`` fabric (infinite bandwidth, zero latency) reproduces ideal tensor parallelism
exactly, bit for bit.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from prefixbench.support.suggest import did_you_mean

from ..errors import CatalogError

_NCCL = "https://github.com/NVIDIA/nccl/blob/master/src/graph/tuning.cc (hwLat, Ring/LL)"
_NVLINK = "https://www.nvidia.com/en-us/data-center/nvlink/"
_PCIE = "https://pcisig.com/specifications ; https://en.wikipedia.org/wiki/PCI_Express"
_VLLM_AR = (
    "https://github.com/vllm-project/vllm/pull/24111 (H100 TP 6) ; "
    "https://github.com/vllm-project/vllm/pull/22086 (H100 TP 2): all-reduce 0.5-4 MiB"
)


@dataclass(frozen=True)
class FabricSpec:
    """A scale-up fabric, per device and direction."""

    name: str
    bandwidth_gbps: float  # GB/s per device per direction (math.inf: ideal)
    latency_us: float  # per ring step (hop)
    kind: str = ""
    source: str = ""
    allreduce_alpha_us: float | None = None  # measured fixed cost of one TP all-reduce
    allreduce_gbps: float | None = None  # measured: message bytes per second past α

    @property
    def bytes_per_s(self) -> float:
        return self.bandwidth_gbps * 1e9

    @property
    def latency_s(self) -> float:
        return self.latency_us / 1e6

    def allreduce_terms(self, tp: int) -> tuple[float, float]:
        """(α seconds, seconds per message byte) of one TP all-reduce: α + S · β⁻¹.
        Without a measurement, the ring: 2(tp − 1)·latency and 2(tp − 1)/tp / bandwidth."""
        if self.allreduce_alpha_us is not None and self.allreduce_gbps is not None:
            return self.allreduce_alpha_us / 1e6, 1.0 / (self.allreduce_gbps * 1e9)
        return 2.0 * (tp - 1) * self.latency_s, 2.0 * (tp - 1) / tp / self.bytes_per_s


_PRESETS = [
    # NVLink 3 (A100 SXM, 12 links, NVSwitch gen 2): 600 GB/s total -> 300 per direction.
    FabricSpec("nvlink3", 300.0, 0.6, "nvlink", f"{_NVLINK} ; {_NCCL}"),
    # NVLink 4 (H100/H200 SXM, 18 links, NVSwitch gen 3): 900 GB/s total -> 450.
    FabricSpec(
        "nvlink4",
        450.0,
        0.6,
        "nvlink",
        f"{_NVLINK} ; {_NCCL} ; {_VLLM_AR}",
        allreduce_alpha_us=8.6,
        allreduce_gbps=190.7,
    ),
    # NVLink 5 (B200, NVSwitch gen 4): 1.8 TB/s total -> 900.
    FabricSpec("nvlink5", 900.0, 0.6, "nvlink", f"{_NVLINK} ; {_NCCL}"),
    # PCIe x16 through the host or a PCIe switch: 16 / 32 GT/s × 16 × 128/130 / 8.
    FabricSpec("pcie4-x16", 31.5, 1.0, "pcie", f"{_PCIE} ; {_NCCL}"),
    FabricSpec("pcie5-x16", 63.0, 1.0, "pcie", f"{_PCIE} ; {_NCCL}"),
    # No communication cost: today's ideal tensor parallelism.
    FabricSpec("ideal", math.inf, 0.0, "ideal", "docs/model.md §2.8"),
]

FABRICS: dict[str, FabricSpec] = {f.name: f for f in _PRESETS}

# The fabric a device ships with (datasheets): SXM parts sit on NVSwitch baseboards, PCIe
# cards talk over PCIe. Devices not listed (user hardware files) default to ``ideal``.
DEFAULT_FABRIC: dict[str, str] = {
    "l4": "pcie4-x16",  # L4 datasheet: PCIe Gen4 x16, 64 GB/s bidirectional, no NVLink
    "a10g": "pcie4-x16",  # A10 datasheet: PCIe Gen4 x16 (the A10G is its AWS variant)
    "l40s": "pcie4-x16",  # L40S datasheet: PCIe Gen4 x16, no NVLink
    "a100-40gb": "nvlink3",  # A100 datasheet, SXM: NVLink 600 GB/s
    "a100-80gb": "nvlink3",
    "h100-sxm": "nvlink4",  # H100 datasheet, SXM: NVLink 900 GB/s
    "h200": "nvlink4",  # H200 datasheet, SXM: NVLink 900 GB/s
    "b200": "nvlink5",  # HGX B200: fifth-generation NVLink, 1.8 TB/s per GPU
}


def get_fabric(name: str) -> FabricSpec:
    key = name.strip().lower()
    if key in FABRICS:
        return FABRICS[key]
    raise CatalogError(
        f"unknown fabric '{name}'",
        fix=did_you_mean(name, FABRICS) + f" (fabrics: {', '.join(FABRICS)})",
    )


def default_fabric(accelerator: str) -> str:
    """The catalog fabric of an accelerator name; ``ideal`` for one not in the catalog."""
    return DEFAULT_FABRIC.get(accelerator.strip().lower(), "ideal")
