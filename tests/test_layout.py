"""engine/layout.py allocate: every array at its final size, the disaggregated run's extra
sections in place (docs/performance.md "The engine's state, set up once")."""

from __future__ import annotations

import numpy as np

from prefixbench.engine import layout as L
from prefixbench.engine import refresh as rf
from prefixbench.engine.costaware import tail_init, tail_size


def _state(policy: int, sections: int, l3: bool):
    P, D, U, n = 2, 3, 5, 4
    ip = np.zeros(L.NIP, np.int64)
    ip[L.IP_NP], ip[L.IP_ND], ip[L.IP_NC], ip[L.IP_MAXB], ip[L.IP_POLICY] = P, D, 1, 8, policy
    fp = np.arange(L.NFP, dtype=np.float64)
    lens = np.full(n, 9, np.int32)
    ptr = np.zeros(n + 1, np.int64)
    return L.allocate(lens, lens, np.arange(n, dtype=np.float64), ptr, ptr, 0, U, ip, fp,
                      np.zeros(0, np.int64), sections, l3)  # fmt: skip


def test_the_sections_sit_between_the_per_request_rows_and_the_power_records():
    """F grows by exactly the sections, zeroed, starting where costaware.tail says (after
    paged's two rows: H_PGF + 2n) and ending where the power records (counted from the end,
    3 per instance) begin; the rest of F is what it is without them."""
    n, D, U = 4, 3, 5
    IS0, F0, *_ = _state(L.POL_ALL_LRU, 0, False)
    size = tail_size(D, U) + rf.size(U)
    assert size == 2 * D + 2 * D * U + 4 + 3 * U  # costaware.py, refresh.py docstrings
    IS, F, *_ = _state(L.POL_ALL_LRU, size, False)
    at = int(IS[L.H_PGF]) + 2 * n
    assert F.shape[0] == F0.shape[0] + size and (F[at : at + size] == 0).all()
    assert F.shape[0] - at - size == 3 * (2 + D)
    np.testing.assert_array_equal(F[:at], F0[:at])
    np.testing.assert_array_equal(IS, IS0)
    assert int(rf.section(IS)) == at + tail_size(D, U)
    tail_init(F, at, D)  # no first admission yet: NaN in each instance's first field
    assert np.isnan(F[at : at + 2 * D : 2]).all() and not F[at + 1 : at + 2 * D : 2].any()


def test_the_l3_store_s_records_follow_the_host_tiers_in_b32():
    P, D, U = 2, 3, 5
    IS, _, _, B32, _ = _state(L.POL_TIERED, 0, True)
    assert int(IS[L.H_L3]) == 4 * (D + P + D) * U and B32.shape[0] == 4 * (D + P + D + 1) * U
    IS, _, _, B32, _ = _state(L.POL_TIERED, 0, False)
    assert int(IS[L.H_L3]) == 0 and B32.shape[0] == 4 * (D + P + D) * U
