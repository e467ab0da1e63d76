"""Session hooks: Hypothesis's search made repeatable, and the fuzzer's input count and time
in the terminal summary."""

from __future__ import annotations

import os
import sys

from hypothesis import settings

# an out-of-range summary figure is a bug: raise in every test (metrics/invariants.py)
os.environ["PREFIXBENCH_STRICT"] = "1"

# The same inputs on every run, so a test run (CI's included) passes or fails for the code,
# not for the draw; PREFIXBENCH_FUZZ_RANDOM=1 searches afresh (docs/reliability.md).
settings.register_profile("repeatable", derandomize=True, database=None)
if not os.environ.get("PREFIXBENCH_FUZZ_RANDOM"):
    settings.load_profile("repeatable")


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
