"""What a sweep's worker processes start with: imported once by the process pool's fork
server (``study/backends.py``), so every worker forked from it begins with the scenario
models, the runner and the engine imported and the engine's machine code loaded, instead of
paying that start-up itself (docs/performance.md, "Start-up").

Nothing here starts a thread (polars, whose import starts a thread pool, is left to the
workers): a process forked while other threads hold locks can deadlock.
"""

from __future__ import annotations

import prefixbench.scenario.loader  # noqa: F401 - the scenario models, presets and YAML
import prefixbench.system.runner  # noqa: F401 - prepare and simulate_policy
from prefixbench.engine import warm_up

warm_up()  # the disaggregated mode's entry points, loaded from the cache (or compiled)
