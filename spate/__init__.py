"""spate: share one job's work safely across a fleet of Trio workers.

This module is the table of contents of the public API; everything here is re-exported
from the private modules behind it. The other public modules are :mod:`spate.store` (the
contract a store adapter implements), :mod:`spate.telemetry` (tracing and metrics wiring) and
:mod:`spate.ops` (operator actions: status, requeue, delete); every module with an
underscore is private.
"""

# The public submodules, so that `import spate` is enough to reach spate.store.Won (as trio's
# own submodules are reachable from `import trio`).
from spate import ops as ops
from spate import store as store
from spate import telemetry as telemetry
from spate._config import Config
from spate._errors import (
    ConfigError,
    FatalCoordinationError,
    Fenced,
    PlanError,
    SpateError,
    StoreError,
    StoreUnavailable,
    ValueTooLarge,
)
from spate._events import (
    AllComplete,
    Event,
    Gained,
    Lost,
    Progress,
    Quarantined,
    RevokeRequested,
    SplitRequested,
    Stalled,
)
from spate._metrics import BalanceReport, Gauges, MetricsHooks
from spate._plan import Plan, PlanContext, SplitSpec
from spate._runtime.coordinator import Coordinator, open_coordinator
from spate._runtime.worker import Handler, Left, Planner, SplitHandle, Verdict, run_worker
from spate._version import __version__

__all__ = [
    "AllComplete",
    "BalanceReport",
    "Config",
    "ConfigError",
    "Coordinator",
    "Event",
    "FatalCoordinationError",
    "Fenced",
    "Gained",
    "Gauges",
    "Handler",
    "Left",
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
    "SplitRequested",
    "SplitSpec",
    "Stalled",
    "StoreError",
    "StoreUnavailable",
    "ValueTooLarge",
    "Verdict",
    "__version__",
    "open_coordinator",
    "run_worker",
]

# Public names report their public home: `spate.Fenced`, not `spate._errors.Fenced`, in reprs,
# tracebacks and pickles (as trio's do). The public submodules are only re-exports (a test
# pins that), so their names are fixed here.
from spate._module_metadata import fixup_module_metadata as _fixup

_fixup(__name__, globals(), __all__)
for _public in (ops, store, telemetry):
    _fixup(_public.__name__, vars(_public), _public.__all__)
del _fixup, _public
