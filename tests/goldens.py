"""Compare a run's summary figures with a stored golden file (tests/golden/), or write it.

``PREFIXBENCH_UPDATE_GOLDEN=1`` rewrites the file; a missing file is written and the test
fails so that it gets checked in. Values match at 1e-9 relative (the engine is
deterministic); NaN matches NaN only.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest


def check_golden(path: Path, got: dict[str, dict], name: str) -> None:
    """``got``: case (policy, scheduler/on_full, …) → metric → value."""
    update = os.environ.get("PREFIXBENCH_UPDATE_GOLDEN")
    if update or not path.exists():
        path.write_text(json.dumps(got, indent=1, sort_keys=True) + "\n")
        if not update:
            pytest.fail(f"{path} did not exist and was written; check it in")
    want = json.loads(path.read_text())
    assert set(got) == set(want)
    for case, metrics in want.items():
        for key, value in metrics.items():
            g = got[case][key]
            if isinstance(value, float) and math.isnan(value):
                assert isinstance(g, float) and math.isnan(g), (case, key)
            else:
                assert g == pytest.approx(value, rel=1e-9, abs=1e-12), (name, case, key)
