"""Session hooks: the fuzzer's input count and time in the terminal summary."""

from __future__ import annotations

import os
import sys

# an out-of-range summary figure is a bug: raise in every test (metrics/invariants.py)
os.environ["PREFIXBENCH_STRICT"] = "1"


def pytest_terminal_summary(terminalreporter) -> None:
    fuzz = sys.modules.get("test_fuzz")
    counts = getattr(fuzz, "COUNTS", None)
    if not counts:
        return
    seconds = fuzz.SECONDS
    tr = terminalreporter
    tr.section("fuzz inputs")
    for name in sorted(counts):
        tr.write_line(f"{counts[name]:>7,}  {seconds[name]:6.1f} s  {name}")
    tr.write_line(f"{sum(counts.values()):>7,}  {sum(seconds.values()):6.1f} s  total")
