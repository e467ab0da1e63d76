"""prefixbench's cost model against public measurements it was not fitted to
(docs/validation.md).

Every data file under tests/data/measured/ records each point's source and whether it is in
the fit set (what a constant of the model was read from) or held out (never used to set a
constant). The tests assert ACCURACY on the held-out points of each group, through the
product's own functions (tests/measured.py calls costmodel, never a copy of it): the
geometric mean of predicted / measured within 0.90–1.10 and at least 80 % of the points
within ±20 %. A group the model does not yet meet is marked ``xfail(strict=True)`` with the
reason: the test fails the day the group becomes accurate, so the mark must then go.
"""

from __future__ import annotations

import math

import pytest
from measured import all_rows, publisher

from prefixbench.physics.costmodel import Efficiency

EFF = Efficiency()  # the defaults
ROWS = all_rows(EFF)


def _held_out(group: str) -> list[float]:
    ratios = [
        r["prefixbench_ms"] / r["measured_ms"]
        for r in ROWS
        if r["group"] == group and r["split"] == "held-out"
    ]
    assert ratios, f"no held-out points in {group}"
    return ratios


def _accurate(group: str) -> None:
    ratios = _held_out(group)
    gmean = math.exp(sum(math.log(x) for x in ratios) / len(ratios))
    within = sum(abs(x - 1.0) <= 0.20 for x in ratios) / len(ratios)
    assert 0.90 <= gmean <= 1.10, f"{group}: geometric mean predicted/measured {gmean:.3f}"
    assert within >= 0.80, f"{group}: {within:.0%} of held-out points within ±20 %"


def test_every_point_has_a_source_and_a_split():
    assert len(ROWS) >= 60
    for r in ROWS:
        assert r["source"] and r["split"] in ("fit", "held-out"), r
    publishers = {publisher(r["source"]) for r in ROWS}  # independent groups, not strings
    assert len(publishers) >= 5, publishers


@pytest.mark.parametrize(
    "group",
    [
        "allreduce",
        "vllm_tpot",
        "vllm_ttft",
        "kv_transfer",
        "vidur_linear",
        "attention_prefill",
        "attention_decode",
        # the H20's own GEMM constants, kernel fixed time and weights' MBU from its wide
        # fit shapes; held out (the narrow ones): gmean 0.92, 100 % within ±20 %
        "gemm_h20",
    ],  # fmt: skip
)
def test_held_out_accuracy(group):
    _accurate(group)


UNFINISHED = {
    # A user report on AMD MI355 hosts (DRAM buffers, all six rows held out): 1, 2, 3 NICs
    # scale as the model says (1.13, 1.13 at the best ceiling below), then 4 NICs reach
    # 75.94 GB/s, less than 3 (135.03), 7 reach 84.60 and 8 reach 118.40. The transfer model
    # min(η · NICs · line, ceiling) never falls as NICs are added, and the report has no fit
    # row to read a per-host ceiling from. Even a ceiling chosen on these held-out rows
    # (scanned 10-400 GB/s in steps of 0.5) puts at most 4 of 6 within ±20 % (111 GB/s:
    # 1.13, 1.13, 1.28, 0.72, 0.80, 1.12). The reporter asks why and the thread has no
    # answer (kvcache-ai/Mooncake #1617). The one mechanism the benchmark's own code shows
    # does not make 4 NICs slower than 3: transfer_engine_bench (kvcache-ai/Mooncake
    # mooncake-transfer-engine/example/transfer_engine_bench.cpp at e94a0b86, DRAM mode)
    # allocates one buffer per NUMA node (numa_alloc_onnode, "numa node num: 2" in the
    # report's log), its worker threads alternate between them, and its NIC priority
    # matrix lists every given NIC as preferred for both "cpu:0" and "cpu:1". So half the
    # bytes cross the sockets (xGMI) whatever the NICs' placement: a constant share, i.e.
    # one more ceiling, monotone in NICs like the one above. The NICs used are named only
    # for the 7-NIC run (PCI buses 9, 25, 105, 121, 137, 233, 249; their sockets and PCIe
    # switches are not given, nor the 1-4 and 8-NIC lists), and the quoted log shows PCIe
    # relaxed ordering disabled (MC_IB_PCI_RELAXED_ORDERING=0).
    # Nothing in the report parametrises a per-socket or per-switch term without fitting it
    # to these held-out rows, so none is modelled.
    "kv_transfer_mi355": "4 NICs slower than 3 (MI355 report): no ceiling fits, 4 of 6 at best",
}


@pytest.mark.parametrize(
    "group",
    [
        pytest.param(g, marks=pytest.mark.xfail(strict=True, reason=why))
        for g, why in UNFINISHED.items()
    ],
)
def test_held_out_accuracy_not_yet_met(group):
    _accurate(group)


def test_h20_gemm_curve_reproduces_its_fit_rows():
    # 0.91, 10 tokens, 3.5 µs and MBU 0.43 were read from these 16 rows (least squares in
    # log ratio, tests/measured.py H20): their geometric mean is 1.00 by construction.
    ratios = [
        r["prefixbench_ms"] / r["measured_ms"]
        for r in ROWS
        if r["group"] == "gemm_h20" and r["split"] == "fit"
    ]
    assert len(ratios) == 16
    gmean = math.exp(sum(math.log(x) for x in ratios) / len(ratios))
    assert 0.98 <= gmean <= 1.02, gmean


def test_fit_points_reproduce_their_constants():
    # The constants read from the fit points reproduce them within the fit's own residual
    # (all-reduce: one line through TP 6 and TP 2 together, 0.88–1.18; transfer: exact).
    for group, tol in (("allreduce", 0.20), ("kv_transfer", 0.01)):
        for r in ROWS:
            if r["group"] == group and r["split"] == "fit":
                ratio = r["prefixbench_ms"] / r["measured_ms"]
                assert abs(ratio - 1.0) <= tol, (r["config"], ratio)


def _profile(path, split: str) -> None:
    """The vLLM end-to-end points of ``split`` as a calibrate CSV: client-side TTFT and
    TPOT as a batch-1 decode iteration at the mean context (tests/measured.py)."""
    from measured import _read

    lines = ["phase,tokens,batch,context,devices,ms,model"]
    for r in _read("blis_vllm_h100_sync.csv"):
        if r["split"] != split:
            continue
        new, cached, out = (int(r[k]) for k in ("prompt_tokens", "prefix_tokens", "output_tokens"))
        lines.append(f"ttft,{new},,{cached},{r['tp']},{r['ttft_ms']},{r['model']}")
        ctx = round(new + cached + out / 2)
        lines.append(f"decode,,1,{ctx},{r['tp']},{r['tpot_ms']},{r['model']}")
    path.write_text("\n".join(lines) + "\n")


def _log_error(eff: Efficiency, groups: tuple[str, ...]) -> float:
    errs = [
        abs(math.log(r["prefixbench_ms"] / r["measured_ms"]))
        for r in all_rows(eff)
        if r["group"] in groups and r["split"] == "held-out"
    ]
    return sum(errs) / len(errs)


def test_calibrate_on_the_fit_set_does_not_get_worse_held_out(tmp_path):
    # The fit set has 4 end-to-end rows (two Llama-2-7B TP 1 runs: TTFT and TPOT each), too
    # few for calibrate's six parameters, so the fit is restricted to the three they
    # determine: prefill MFU and the per-request cost (the TTFT rows), MBU (the TPOT rows).
    from prefixbench.physics.calibrate import fit, read_profiles

    _profile(tmp_path / "fit.csv", "fit")
    ms = read_profiles([str(tmp_path / "fit.csv")], None, "h100-sxm", 1, None)
    assert len(ms) == 4
    res = fit(ms, params=("mfu_prefill", "request_overhead_ms", "mbu"))
    assert sorted(res.constrained) == ["mbu", "mfu_prefill", "request_overhead_ms"]
    for groups in (("vllm_ttft",), ("vllm_tpot",), ("vllm_ttft", "vllm_tpot")):
        assert _log_error(res.efficiency, groups) <= _log_error(EFF, groups), groups
    # and the fitted block meets the held-out target too (the defaults now do as well: the
    # per-prompt-token cost, fitted on the same two TTFT rows, stays at its default here)
    ratios = [
        r["prefixbench_ms"] / r["measured_ms"]
        for r in all_rows(res.efficiency)
        if r["group"] == "vllm_ttft" and r["split"] == "held-out"
    ]
    gmean = math.exp(sum(math.log(x) for x in ratios) / len(ratios))
    assert 0.90 <= gmean <= 1.10
    assert sum(abs(x - 1.0) <= 0.20 for x in ratios) / len(ratios) >= 0.80
