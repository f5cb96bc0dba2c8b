"""spate: share one job's work safely across a fleet of Trio workers.

This module is the table of contents of the public API; everything here is re-exported
from the private modules behind it.
"""

from spate._version import __version__
from spate.config import Config
from spate.coordinator import Coordinator, open_coordinator
from spate.errors import (
    ConfigError,
    FatalCoordinationError,
    Fenced,
    PlanError,
    SpateError,
    StoreError,
    StoreUnavailable,
    ValueTooLarge,
)
from spate.events import (
    AllComplete,
    Event,
    Gained,
    Lost,
    Progress,
    Quarantined,
    RevokeRequested,
    Stalled,
)
from spate.metrics import Gauges, MetricsHooks
from spate.plan import Plan, PlanContext, SplitSpec
from spate.store import Keyspace, Store
from spate.worker import Handler, Planner, SplitHandle, Verdict, run_worker

__all__ = [
    "AllComplete",
    "Config",
    "ConfigError",
    "Coordinator",
    "Event",
    "FatalCoordinationError",
    "Fenced",
    "Gained",
    "Gauges",
    "Handler",
    "Keyspace",
    "Lost",
    "MetricsHooks",
    "Plan",
    "PlanContext",
    "PlanError",
    "Planner",
    "Progress",
    "Quarantined",
    "RevokeRequested",
    "SpateError",
    "SplitHandle",
    "SplitSpec",
    "Stalled",
    "Store",
    "StoreError",
    "StoreUnavailable",
    "ValueTooLarge",
    "Verdict",
    "__version__",
    "open_coordinator",
    "run_worker",
]
