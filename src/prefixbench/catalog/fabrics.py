"""Scale-up fabrics: the links between the devices of ONE instance (TP/PP/EP traffic).

``bandwidth_gbps`` is GB/s (10^9 bytes/s) per device and direction: NVLink as half of
NVIDIA's "total" (bidirectional) per-GPU figure, behind NVSwitch so every pair of devices
gets it; PCIe x16 as GT/s × 16 lanes × 128/130 / 8 bits.

``latency_us`` is the time of one step of a ring collective (one hop), from NCCL's own
tuning model (``src/graph/tuning.cc``, table ``hwLat``, Ring/LL, the protocol NCCL picks for
small messages): 0.6 µs on NVLink, 1.0 µs on PCI. NCCL does not distinguish NVLink
generations, so neither do we. NCCL's per-collective base latency (``baseLat``, ~6.6 µs for
Ring/LL) is NOT charged (docs/model.md §2.8).

A TP all-reduce of ``S`` bytes costs ``α + 2(tp − 1)/tp · S / B_bus`` (docs/model.md §2.8).
Where it was measured, ``allreduce_alpha_us`` (α) and ``allreduce_busbw_gbps`` (B_bus) are a
least-squares line through what vLLM actually dispatches (the fastest of its custom
all-reduce, NCCL and symmetric-memory backends) on H100s: vLLM's
``benchmarks/kernels/benchmark_device_communicators.py`` at TP 6, bf16, hidden 8192, 0.5 to
4 MiB (github.com/vllm-project/vllm/pull/24111, "Isolated primitives benchmark results",
H100): 13, 16, 18, 21, 25, 31 µs at 0.5, 1, 1.5, 2, 3, 4 MiB, i.e. 5.0 µs per MiB and an
intercept of 10.7 µs; 5.0 µs/MiB = 2·5/6 · 2^20 B / B_bus gives B_bus = 349.5 GB/s. Only
NVLink 4 has such a measurement in the catalog; the other fabrics keep the ring model
(``α = 2(tp − 1)·latency``, ``B_bus`` = the link bandwidth), which under-prices small
messages.

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
_VLLM_AR = "https://github.com/vllm-project/vllm/pull/24111 (H100, TP 6, all-reduce 0.5-4 MiB)"


@dataclass(frozen=True)
class FabricSpec:
    """A scale-up fabric, per device and direction."""

    name: str
    bandwidth_gbps: float  # GB/s per device per direction (math.inf: ideal)
    latency_us: float  # per ring step (hop)
    kind: str = ""
    source: str = ""
    allreduce_alpha_us: float | None = None  # measured fixed cost of one TP all-reduce
    allreduce_busbw_gbps: float | None = None  # measured all-reduce bus bandwidth

    @property
    def bytes_per_s(self) -> float:
        return self.bandwidth_gbps * 1e9

    def allreduce_terms(self, tp: int) -> tuple[float, float]:
        """(seconds, bytes/s) of one TP all-reduce of S bytes: α + 2(tp−1)/tp · S / B_bus.
        Without a measurement, the ring model: α = 2(tp − 1)·latency, B_bus = bandwidth."""
        alpha = (
            self.allreduce_alpha_us / 1e6
            if self.allreduce_alpha_us is not None
            else 2.0 * (tp - 1) * self.latency_s
        )
        busbw = self.allreduce_busbw_gbps
        return alpha, (busbw * 1e9 if busbw is not None else self.bytes_per_s)

    @property
    def latency_s(self) -> float:
        return self.latency_us / 1e6


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
        allreduce_alpha_us=10.7,
        allreduce_busbw_gbps=349.5,
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
