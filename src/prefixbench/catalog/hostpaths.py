"""Host<->GPU paths: how a decode instance's host-DRAM KV tier reaches its HBM.

``bandwidth_gbps`` is GB/s (10^9 bytes/s) per device and direction. PCIe x16 as GT/s × 16
lanes × 128/130 / 8 bits (the same figures as catalog/fabrics.py): Gen4 16 GT/s -> 31.5,
Gen5 32 GT/s -> 63.0. NVLink-C2C (Grace Hopper GH200): NVIDIA's datasheet gives 900 GB/s
bidirectional between the Grace CPU and the Hopper GPU -> 450 per direction.

``latency_us`` is one DMA's fixed cost. Assumption: 1 µs on every path, NCCL's own figure
for a PCI hop (``src/graph/tuning.cc``, ``hwLat``); it is small next to a block's copy time
(a 16-token block of a 7B model, ~2 MB, takes ~33 µs on PCIe Gen5) so the choice hardly
matters (docs/model.md, "Host tier").

Host DRAM per device, for ``cluster.decode.host_memory_gb``'s default: an NVIDIA DGX H100
has 2 TB of system memory for its 8 GPUs, 256 GB per device (DGX H100 datasheet).
"""

from __future__ import annotations

from prefixbench.support.suggest import did_you_mean

from ..errors import CatalogError
from .fabrics import FabricSpec

_PCIE = "https://pcisig.com/specifications ; https://en.wikipedia.org/wiki/PCI_Express"
_C2C = (
    "https://www.nvidia.com/en-us/data-center/grace-hopper-superchip/ (NVLink-C2C 900 GB/s "
    "bidirectional)"
)
_LAT = "assumption: 1 µs per DMA (NCCL src/graph/tuning.cc hwLat, PCI)"
HOST_DRAM_GB_PER_DEVICE = 256.0
HOST_DRAM_SOURCE = (
    "NVIDIA DGX H100 datasheet: 2 TB system memory, 8x H100 "
    "(https://resources.nvidia.com/en-us-dgx-systems/ai-enterprise-dgx)"
)


# the same record as a scale-up fabric's (GB/s and latency per device and direction)
HostPathSpec = FabricSpec


HOST_PATHS: dict[str, HostPathSpec] = {
    p.name: p
    for p in (
        HostPathSpec("pcie4-x16", 31.5, 1.0, "host", f"{_PCIE} ; {_LAT}"),
        HostPathSpec("pcie5-x16", 63.0, 1.0, "host", f"{_PCIE} ; {_LAT}"),
        HostPathSpec("nvlink-c2c", 450.0, 1.0, "host", f"{_C2C} ; {_LAT}"),
    )
}


def get_host_path(name: str) -> HostPathSpec:
    key = name.strip().lower()
    if key in HOST_PATHS:
        return HOST_PATHS[key]
    raise CatalogError(
        f"unknown host path '{name}'",
        fix=did_you_mean(name, HOST_PATHS) + f" (host paths: {', '.join(HOST_PATHS)})",
    )
