"""engine/jit.py: fixed-signature helpers load when first used, not at import, and stay
closed to other signatures once loaded (as numba's eager ``njit(signature)`` is)."""

from __future__ import annotations

import subprocess
import sys

import pytest

_PROBE = """
import numpy as np
from prefixbench.engine import jit, queues
fixed = [v for m in (queues,) for v in vars(m).values() if isinstance(v, jit._Fixed)]
print(len(fixed), sum(bool(f.overloads) for f in fixed))
"""


def test_importing_the_engine_loads_no_fixed_signature_helper():
    out = subprocess.run(
        [sys.executable, "-c", _PROBE], capture_output=True, text=True, check=True
    ).stdout.split()
    assert int(out[0]) > 5  # queues.py's helpers are fixed-signature
    assert out[1] == "0"  # none compiled or loaded by the import


def test_a_fixed_helper_has_one_signature_and_converts_arguments():
    import numpy as np

    from prefixbench.engine import layout as L
    from prefixbench.engine import queues

    EHT, EHI = np.empty(8), np.empty(24, dtype=np.int64)
    IS = np.zeros(256, dtype=np.int64)  # the global slots the heap uses (GI_SEQ, GI_HSZ)
    queues.push(EHT, EHI, IS, 1, L.EV_ARRIVAL, 0, 0)  # an int time converts to float64
    assert len(queues.push.overloads) == 1
    assert IS[L.GI_HSZ] == 1 and EHT[0] == 1.0
    with pytest.raises(TypeError):
        queues.push(EHT.astype(np.float32), EHI, IS, 1.0, L.EV_ARRIVAL, 0, 0)
