"""Hot-set refresh state: the window of block uses a refresh ranks (``memory.hotset_refresh_s``).

Section of ``F`` after the cost-aware tail (costaware.tail): the refresh period (0: never),
the hot-set capacity in tokens, whether warm-up traffic crosses the link (1.0) or is free,
the KV bytes the refreshes have warmed so far, then per block id its uses since the last refresh (pooled over the decode instances: the
hot set is cluster-wide, like the first one), its tokens, and a scratch row for the new
set's order. warmup.refresh does the refresh itself.
"""

from __future__ import annotations

import numpy as np

from . import layout as L
from .costaware import tail
from .jit import entry, jit

S_PERIOD, S_CAP, S_LINK, S_BYTES, S_N = 0, 1, 2, 3, 4  # S_BYTES: KV the refreshes warmed


def size(n_ids: int) -> int:
    """Floats of the section (layout.allocate reserves them, zeroed)."""
    return S_N + 3 * n_ids


def init(F: np.ndarray, at: int, period: float, cap_tokens: int, link: bool) -> None:
    """Initialise the (zeroed) section at ``F[at:]``."""
    F[at + S_PERIOD], F[at + S_CAP], F[at + S_LINK] = period, cap_tokens, float(link)


@entry  # also called from Python (api._prewarm_stats)
def section(IS):
    D, U = IS[L.IP_ND], IS[L.IP_U]
    return tail(IS) + 2 * D + 2 * D * U


@jit
def count(IS, F, bid, bt, i0, i1):
    """An admitted replicate_hotset request used blocks ``bid[i0:i1]`` (refresh on only)."""
    s = section(IS)
    if F[s + S_PERIOD] <= 0.0:
        return
    U = IS[L.IP_U]
    for j in range(i0, i1):
        F[s + S_N + bid[j]] += 1.0
        F[s + S_N + U + bid[j]] = bt[j]
