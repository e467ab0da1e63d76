"""One registry per concept a user names or reads: hand-off policies, routers, trace
formats, summary metrics and study figures. Pure data and tiny lookups; every surface that
lists such a thing (CLI choices, scenario validation, plot colours and legends, the report,
the README policy table, `docs/reference.md`) derives from the entry here, and
`tests/test_registry.py` checks that each surface covers every entry.

Adding a policy is its engine module plus one entry in `policies.py` (docs/design.md,
"Adding a policy end to end").

May import: `prefixbench.errors`, `prefixbench.support` and the standard library only.
"""

from .figures import FIGURES, Figure
from .metrics import METRICS, Metric
from .policies import POLICIES, Policy, policy, policy_names
from .routers import DECODE_ROUTERS, PREFILL_ROUTERS, Router
from .traces import TRACE_FORMATS, TraceFormat

__all__ = [
    "DECODE_ROUTERS",
    "FIGURES",
    "METRICS",
    "POLICIES",
    "PREFILL_ROUTERS",
    "TRACE_FORMATS",
    "Figure",
    "Metric",
    "Policy",
    "Router",
    "TraceFormat",
    "policy",
    "policy_names",
]
