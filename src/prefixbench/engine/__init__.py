"""The simulation engine: one compiled event core for the disaggregated and colocated modes.

Public names (everything outside the engine imports these, and only these):
``simulate``, ``simulate_colocated``, ``EngineConfig``, ``ColocatedConfig``, ``SimResult``,
``TIME_COLUMNS``, ``Outcome``, ``Reason``, ``REASON_NAMES``. docs/design.md maps the modules.
"""

from .api import simulate, simulate_colocated, warm_up
from .config import (
    REASON_NAMES,
    SCHEDULERS,
    TIME_COLUMNS,
    ColocatedConfig,
    EngineConfig,
    SimResult,
)
from .layout import Outcome, Reason

__all__ = [
    "REASON_NAMES",
    "SCHEDULERS",
    "TIME_COLUMNS",
    "ColocatedConfig",
    "EngineConfig",
    "Outcome",
    "Reason",
    "SimResult",
    "simulate",
    "simulate_colocated",
    "warm_up",
]
