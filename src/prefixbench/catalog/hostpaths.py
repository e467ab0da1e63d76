"""Host<->GPU path presets (the decode instance's path to host DRAM: swap, host KV tier).

``bandwidth_gbps`` is GB/s (1e9 bytes/s) in one direction, per device:

* PCIe x16 after 128b/130b line coding: GT/s × 16 lanes × 128/130 / 8 bits (PCI-SIG base
  specifications 4.0 and 5.0: 16 and 32 GT/s per lane) → 31.5 and 63.0 GB/s.
* NVLink-C2C (Grace Hopper): NVIDIA's GH200 datasheet gives 900 GB/s bidirectional between
  the Grace CPU and the Hopper GPU → 450 GB/s per direction.

``latency_us`` is the fixed cost of one copy (DMA set-up and completion), an ASSUMPTION of
~1-2 us in the same order as the PCIe/NVLink links of catalog/links.py; KV moves of whole
requests (MBs) are bandwidth-bound, so it rarely decides a result.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import CatalogError
from ..suggest import did_you_mean

_PCIE = "https://pcisig.com/specifications (PCIe 4.0/5.0: 16/32 GT/s per lane, 128b/130b)"
_C2C = "https://www.nvidia.com/en-us/data-center/grace-hopper-superchip/ (900 GB/s NVLink-C2C)"


@dataclass(frozen=True)
class HostPathSpec:
    name: str
    bandwidth_gbps: float  # GB/s per direction, per device
    latency_us: float
    source: str


HOST_PATHS: dict[str, HostPathSpec] = {
    p.name: p
    for p in (
        HostPathSpec("pcie4-x16", 31.5, 2.0, _PCIE),
        HostPathSpec("pcie5-x16", 63.0, 2.0, _PCIE),
        HostPathSpec("nvlink-c2c", 450.0, 1.0, _C2C),
    )
}


def get_host_path(name: str) -> HostPathSpec:
    """The preset called ``name``; CatalogError (with a did-you-mean) if there is none."""
    try:
        return HOST_PATHS[name]
    except KeyError:
        raise CatalogError(
            f"unknown host path '{name}'",
            where="cluster.decode.host_path",
            fix=did_you_mean(name, HOST_PATHS),
        ) from None
