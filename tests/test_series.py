"""The decode series coefficients' memo (engine/series.py coeffs, layout.G_CO_*): a repeated
batch and context return the bits computed for them, a change recomputes."""

from __future__ import annotations

import numpy as np

from prefixbench.engine import layout as L
from prefixbench.engine.jit import entry
from prefixbench.engine.series import coeffs, computed_coeffs


@entry
def _both(F, batch, ctx):
    return coeffs(F, batch, ctx), computed_coeffs(F, batch, ctx)


def _params() -> np.ndarray:
    """A state array with round decode constants: attention 2 FLOP per token at 4 FLOP/s,
    KV 8 B per token at 16 B/s, 100 B of weights at 50 B/s, 0.5 s overhead."""
    F = np.zeros(L.G_CO_O + 1)
    c = L.FP_DC
    F[c + L.C_ATT], F[c + L.C_AR], F[c + L.C_KV], F[c + L.C_KR] = 2.0, 4.0, 8.0, 16.0
    F[c + L.C_W], F[c + L.C_BR], F[c + L.C_DOV] = 100.0, 50.0, 0.5
    F[c + L.C_FRD], F[c + L.C_SG], F[c + L.C_STAU] = 1.0, 1.0, 1.0
    F[L.G_CO_B] = -1.0
    return F


def test_coefficients_by_hand_then_from_the_memo():
    F = _params()
    # batch 3, context 10: a1 = 2·10/4, s1 = 2·3/4, a2 = 8·10/16, s2 = 8·3/16,
    # overhead = weights 100/50 + 0.5 (no GEMM FLOPs, no fabric)
    want = (5.0, 1.5, 5.0, 1.5, 2.5)
    got, fresh = _both(F, 3, 10)
    assert tuple(got) == want and tuple(fresh) == want
    assert (F[L.G_CO_B], F[L.G_CO_C]) == (3.0, 10.0)
    F[L.G_CO_A1] = 99.0  # a stale memo would show: the same key returns the memo
    assert _both(F, 3, 10)[0][0] == 99.0


def test_a_new_batch_or_context_recomputes():
    F = _params()
    _both(F, 3, 10)
    got, fresh = _both(F, 3, 12)  # context changed: a1 = 2·12/4, a2 = 8·12/16
    assert tuple(got) == tuple(fresh) and got[0] == 6.0 and got[2] == 6.0
    got, fresh = _both(F, 4, 12)  # batch changed: s1 = 2·4/4, s2 = 8·4/16
    assert tuple(got) == tuple(fresh) and got[1] == 2.0 and got[3] == 2.0
    assert (F[L.G_CO_B], F[L.G_CO_C]) == (4.0, 12.0)


def test_a_fresh_state_has_no_memo():
    """allocate() marks the memo empty (batch -1), so a run's first batch of 0 sequences
    and context 0 cannot read zeros as its coefficients."""
    ip = np.zeros(L.NIP, np.int64)
    ip[L.IP_NP], ip[L.IP_ND], ip[L.IP_NC], ip[L.IP_MAXB] = 1, 1, 1, 4
    e = np.zeros(0, np.int64)
    _, F, *_ = L.allocate(e.astype(np.int32), e.astype(np.int32), np.zeros(0), np.zeros(1, np.int64),
                          np.zeros(1, np.int64), 0, 0, ip, np.zeros(L.NFP), e)  # fmt: skip
    assert F[L.G_CO_B] == -1.0
