"""The host<->GPU path as a stage of the stability verdict (docs/model.md §5.4)."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import pytest

from prefixbench.metrics.stability import assess, host_path_load, unstable_line
from prefixbench.metrics.summary import requests_frame
from prefixbench.scenario.loader import load_scenario
from prefixbench.system.runner import prepare, simulate_policy

PCIE4 = 16 * 16 * 128 / 130 / 8 * 1e9  # 16 GT/s x 16 lanes, 128b/130b: 31.5 GB/s


def test_host_path_load_is_path_seconds_over_the_window_per_instance():
    """630 GB moved on two PCIe Gen4 x16 paths (31.5 GB/s each) while requests arrived
    over 10 s: each path needs 630e9 / 31.5e9 / 2 = 10 s per 10 s: rho = 1."""
    b = SimpleNamespace(host_path_bytes_per_s=31.5e9, n_decode=2)
    assert host_path_load(b, {"host_path_bytes": 630e9}, 10.0) == pytest.approx(1.0, rel=1e-12)
    assert host_path_load(b, {"host_path_bytes": 0.0}, 10.0) is None


def _tiered(path_bytes_per_s: float):
    over = [
        "model=llama-2-7b",
        "cluster.prefill.accelerator=h100-sxm",
        "cluster.decode.accelerator=h100-sxm",
        "cluster.decode.host_path=pcie4-x16",
        "cluster.decode.host_memory_gb=512",
        "cluster.link.bandwidth_gbps=50",
        "memory.kv_budget_gb=20",
        "memory.host_kv_gb=400",
        "workload.arrivals.rate=40",
        "run.requests=2500",
    ]
    prep = prepare(load_scenario("tool_call", over))
    assert prep.base.host_path_bytes_per_s == pytest.approx(PCIE4, rel=1e-3)
    prep = dataclasses.replace(
        prep, base=dataclasses.replace(prep.base, host_path_bytes_per_s=path_bytes_per_s)
    )
    res = simulate_policy(prep, "replicate_tiered")
    return assess(prep, requests_frame(prep, "replicate_tiered", res), res.stats), res


def test_a_saturated_host_path_makes_the_run_unstable_and_is_named():
    """llama-2-7b, 20 GB of HBM KV over a 400 GB host pool at 40 req/s: on PCIe Gen4 x16
    the demotions keep the path about a fifth busy (stable); on an eighth of that rate
    (a x2 link, 3.9 GB/s) they need more path time than the run has: unstable, and the
    warning names the host path."""
    ok, _ = _tiered(PCIE4)
    assert ok.stable and ok.rho["host_path"] < 0.5
    bad, res = _tiered(PCIE4 / 8)
    assert bad.rho["host_path"] > 1.0
    assert not bad.stable and bad.saturated == "host_path"
    line = unstable_line("replicate_tiered", bad.columns())
    assert "host path saturates" in line
