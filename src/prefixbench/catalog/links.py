"""Prefill→decode KV link presets.

``bandwidth_gbps`` is usable GB/s (bytes) in one direction over one channel:
PCIe after 128b/130b line coding; NVLink as half of NVIDIA's "total" (bidirectional) per-GPU
figure; InfiniBand/RoCE/Ethernet as line rate / 8 (protocol headers not deducted).

``latency_us`` is a typical one-way per-transfer latency. These are ORDER-OF-MAGNITUDE
values, not datasheet numbers: they depend on the NIC, switch hops, message size, software
stack (GPUDirect or not) and load. Rough ranges used: PCIe / NVLink copy ~1-2 us, RDMA
(InfiniBand, RoCE) ~2-5 us end to end (Kalia et al., "Design Guidelines for High
Performance RDMA Systems", USENIX ATC 2016,
https://www.usenix.org/conference/atc16/technical-sessions/presentation/kalia, measure
RDMA operations in the low microseconds), kernel TCP over Ethernet ~20-50 us.
For transfers of whole prefixes (MBs to GBs) bandwidth dominates, so these rough values
rarely decide a result; override them in a scenario when you have measurements.

A KV transfer costs ``latency + setup + bytes / (efficiency · NICs · bandwidth)``
(docs/model.md "KV transfer cost"). ``efficiency`` (η) and ``setup_us`` are measured for
the RDMA kinds only:

- η and the ceiling: Mooncake's transfer engine moving 40 GB (the KV of 128k Llama-3-70B
  tokens) reaches 87 GB/s over 4×200 Gbps RoCE and 190 GB/s over 8×400 Gbps RoCE
  (kvcache-ai/Mooncake README.md, "Performance" of the Transfer Engine). One η per link
  kind cannot hold both that and a single 400 Gbps NIC at 42 GB/s (0.84 of its line rate,
  github.com/kvcache-ai/Mooncake/issues/813): what falls with the NIC count is not each
  NIC's efficiency but the node behind them. The transfer engine stripes a transfer's
  slices over the NICs (kvcache-ai/Mooncake doc/en/transfer-engine.md, multi-NIC
  aggregation), and the aggregate stops at the host's PCIe / memory path: eight 400 G NICs
  reach about 190 of 400 GB/s in Mooncake's own figure (the shortfall asked about in
  github.com/kvcache-ai/Mooncake/issues/434; 8 IB NICs at 163.7 GB/s against ~50 for one
  in issues/570; a NIC→host-memory bottleneck inside the node in
  github.com/sgl-project/sglang/issues/32777). So the RDMA kinds carry one per-NIC
  η = 87 / 100 = 0.87 (the 4×200 G figure, below any ceiling) and a per-instance ceiling
  of 190 GB/s (the 8×400 G figure, where 8 × 0.87 × 50 = 348 would exceed it):
  rate = min(η · NICs · line rate, ceiling). Both are read from those two fit points
  only; a different host (PCIe generation, NUMA layout, GPU vs DRAM buffers) has a
  different ceiling (set ``ceiling_gbps`` in a hardware file).
- setup: 450 µs per request's transfer, the fixed part of a small KV transfer through a
  P/D connector (descriptor lists built in Python, a transfer posted, a completion
  notified). vLLM's NixlConnector was measured at ~3 ms per request before its
  descriptor lists were prepared once ("Optimize NIXL Connector xfer Launch",
  github.com/vllm-project/vllm/issues/23780); NIXL's prepped-transfer API
  (github.com/ai-dynamo/nixl/issues/176) brings it to the sub-millisecond range. ORDER
  OF MAGNITUDE: it depends on the block size (descriptors per transfer: ~105 ms for a
  5k-token pull at block size 16, github.com/vllm-project/vllm/issues/50913) and the
  connector version.

NVLink, PCIe and Ethernet keep η = 1 and no setup: no measurement of a connector over
them is in the catalog (set ``cluster.link.efficiency`` / ``setup_us`` when you have one).
"""

from __future__ import annotations

from .specs import LinkSpec

_PCIE = "https://pcisig.com/specifications ; https://en.wikipedia.org/wiki/PCI_Express"
_NVLINK = "https://www.nvidia.com/en-us/data-center/nvlink/"
_IB = "https://www.infinibandta.org/infiniband-roadmap/"
_ETH = "https://www.ieee802.org/3/"
_MOONCAKE = "https://github.com/kvcache-ai/Mooncake#performance"
_RDMA_SETUP_US = 450.0  # per request's transfer (see the module docstring)
_RDMA_ETA = 0.87  # per NIC: 87 GB/s over 4×200 Gbps (module docstring)
_RDMA_CEILING_GBPS = 190.0  # per instance: 190 GB/s over 8×400 Gbps (module docstring)

_PRESETS = [
    # PCIe x16, one direction: GT/s × 16 lanes × 128/130 / 8 bits.
    LinkSpec(name="pcie3-x16", kind="pcie", bandwidth_gbps=15.75, latency_us=2.0, source=_PCIE),
    LinkSpec(name="pcie4-x16", kind="pcie", bandwidth_gbps=31.5, latency_us=2.0, source=_PCIE),
    LinkSpec(name="pcie5-x16", kind="pcie", bandwidth_gbps=63.0, latency_us=2.0, source=_PCIE),
    # NVLink 3 (A100): 600 GB/s total per GPU -> 300 per direction.
    LinkSpec(name="nvlink3", kind="nvlink", bandwidth_gbps=300.0, latency_us=1.0, source=_NVLINK),
    # NVLink 4 (H100): 900 GB/s total per GPU -> 450 per direction.
    LinkSpec(name="nvlink4", kind="nvlink", bandwidth_gbps=450.0, latency_us=1.0, source=_NVLINK),
    # InfiniBand NDR, 4x port: 400 Gb/s -> 50 GB/s.
    LinkSpec(
        name="ib-ndr400",
        kind="infiniband",
        bandwidth_gbps=50.0,
        latency_us=2.0,
        efficiency=_RDMA_ETA,
        setup_us=_RDMA_SETUP_US,
        ceiling_gbps=_RDMA_CEILING_GBPS,
        source=f"{_IB} ; {_MOONCAKE}",
    ),
    # RoCE v2 runs at the Ethernet line rate.
    LinkSpec(
        name="roce-100g",
        kind="roce",
        bandwidth_gbps=12.5,
        latency_us=3.0,
        efficiency=_RDMA_ETA,
        setup_us=_RDMA_SETUP_US,
        ceiling_gbps=_RDMA_CEILING_GBPS,
        source=f"{_ETH} ; {_MOONCAKE}",
    ),
    LinkSpec(
        name="roce-200g",
        kind="roce",
        bandwidth_gbps=25.0,
        latency_us=3.0,
        efficiency=_RDMA_ETA,
        setup_us=_RDMA_SETUP_US,
        ceiling_gbps=_RDMA_CEILING_GBPS,
        source=f"{_ETH} ; {_MOONCAKE}",
    ),
    # Plain Ethernet with kernel TCP.
    LinkSpec(name="eth-10g", kind="ethernet", bandwidth_gbps=1.25, latency_us=50.0, source=_ETH),
    LinkSpec(name="eth-25g", kind="ethernet", bandwidth_gbps=3.125, latency_us=30.0, source=_ETH),
    LinkSpec(name="eth-100g", kind="ethernet", bandwidth_gbps=12.5, latency_us=20.0, source=_ETH),
]

LINKS: dict[str, LinkSpec] = {link.name: link for link in _PRESETS}
