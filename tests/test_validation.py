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
from measured import all_rows

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
    assert len(ROWS) >= 50
    for r in ROWS:
        assert r["source"] and r["split"] in ("fit", "held-out"), r
    sources = {r["source"].split()[0] for r in ROWS}
    assert len(sources) >= 4, sources


@pytest.mark.parametrize("group", ["allreduce", "vllm_tpot", "vllm_ttft"])
def test_held_out_accuracy(group):
    _accurate(group)


UNFINISHED = {
    # The per-operator roofline (token-dependent GEMM efficiency, separate weight and KV
    # bandwidth) is not built yet: one flat MFU and MBU per phase (docs/validation.md).
    "vidur_linear": "flat MFU: 0.87× near the ridge, 1.3× at 4k tokens",
    "attention_prefill": "flat MFU 0.5 against FlashAttention's 0.64–0.77: 1.28–1.46×",
    "attention_decode": "one MBU for weights and KV; KV streams at ~0.9: 1.19–1.34×",
    "kv_transfer": "one η per link kind: a single 400G NIC reaches 0.84, eight 0.475",
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


def test_fit_points_reproduce_their_constants():
    # The constants read from the fit points reproduce them within the fit's own residual
    # (all-reduce: one line through TP 6 and TP 2 together, 0.88–1.18; transfer: exact).
    for group, tol in (("allreduce", 0.20), ("kv_transfer", 0.01)):
        for r in ROWS:
            if r["group"] == group and r["split"] == "fit":
                ratio = r["prefixbench_ms"] / r["measured_ms"]
                assert abs(ratio - 1.0) <= tol, (r["config"], ratio)
