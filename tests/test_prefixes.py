"""The per-prefix rows from the engine's columns (metrics/prefixes.py) against the
definition: tests/reference_prefixes.py prefix_table's polars group_by over the request table, to the
bit (counts, integer sums, and the compensated float sums and means)."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
from polars.testing import assert_frame_equal
from reference_prefixes import prefix_table

from prefixbench.metrics.summary import requests_frame
from prefixbench.scenario.loader import load_scenario
from prefixbench.study.aggregate import point_prefixes, prefix_rows
from prefixbench.system.runner import prepare, simulate_policy

POLICIES = ["transfer_per_request", "replicate_all_lru", "replicate_tiered", "cost_aware"]
CASES = [
    ("enterprise_hotset", []),
    ("tool_call", ["memory.budget_factor=0.35"]),
    ("medium_chat", ["memory.admission=reserve", "memory.budget_factor=0.3"]),
    ("enterprise_hotset", ["cluster.mode=colocated"]),
]
VALUES = {"model": "m", "workload": "w", "budget_factor": 0.5, "seed": 3, "admission": "paged"}
CONSTANTS = {k: pl.lit(v) for k, v in VALUES.items()}
CONSTANTS["seed"] = pl.lit(3).cast(pl.Int64)


@pytest.fixture(scope="module", params=CASES, ids=lambda c: f"{c[0]}{'+' if c[1] else ''}")
def runs(request):
    name, sets = request.param
    s = load_scenario(name, ["run.requests=2500", "run.warmup_requests=300", *sets])
    prep = prepare(s)
    return prep, [(p, simulate_policy(prep, p)) for p in POLICIES]


def test_a_points_prefix_rows_are_the_request_tables_group_by(runs):
    prep, results = runs
    table = pl.concat([requests_frame(prep, p, res) for p, res in results])
    want = prefix_table(table, CONSTANTS)
    got = point_prefixes([prefix_rows(prep, p, res) for p, res in results], VALUES)
    assert want.height > 10 and want["ttft_mean_ms"].null_count() < want.height
    assert_frame_equal(got, want, check_exact=True)


def test_the_cases_tell_a_compensated_sum_from_a_plain_one(runs):
    """The float figures are polars' compensated (Kahan) sums: on these runs a plain
    running sum of the same values in the same order differs from them in the last bit
    for some prefix, so the comparison above catches an uncompensated pass."""
    prep, results = runs
    differ = 0
    for p, res in results:
        df = requests_frame(prep, p, res).filter(
            ~pl.col("warmup") & (pl.col("prefix_id") >= 0) & (pl.col("outcome") == "completed")
        )
        got = prefix_rows(prep, p, res)
        exact = dict(zip(got["prefix_id"].tolist(), got["ttft_mean_ms"].tolist(), strict=True))
        for (k,), g in df.group_by("prefix_id", maintain_order=True):
            plain = float(np.cumsum(g["ttft_ms"].to_numpy())[-1] / g.height)
            assert plain == pytest.approx(exact[k], rel=1e-12)
            differ += plain != exact[k]
    assert differ


def test_a_run_without_prefixes_has_no_rows():
    s = load_scenario("enterprise_hotset", ["run.requests=400", "run.warmup_requests=50"])
    prep = prepare(s)
    res = simulate_policy(prep, "transfer_per_request")
    prep.requests.prefix_id[:] = -1  # no request shares a prefix
    want = prefix_table(requests_frame(prep, "transfer_per_request", res), CONSTANTS)
    got = point_prefixes([prefix_rows(prep, "transfer_per_request", res)], VALUES)
    assert want.height == 0
    assert_frame_equal(got, want, check_exact=True)
