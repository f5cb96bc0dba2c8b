"""The fleet simulator, its history recorder and its invariant checker.

Record a fleet (yours or the simulator's) into a :class:`History`, then :func:`check` it:

- :class:`Recorder` — taps for one history: a store wrapper recording every write with its
  true outcome, a handler wrapper recording gains and acknowledged commits, and metrics hooks
  recording revocation outcomes; :func:`final_listing` reads the job's final state.
- :func:`check` — the invariants (:data:`INVARIANTS`) every history of a spate fleet must
  keep; each broken one is a :class:`Violation`.
- :func:`run_seed` / :func:`run_checked` — run a whole simulated fleet (a
  :class:`Scenario`, drawn from a seed or scripted) and check it. The default engine,
  :func:`simulate_machines`, drives the coordination machines on a discrete-event scheduler
  with injected clocks and nonces, so a seed replays bit for bit; the ``"trio"`` engine,
  :func:`simulate`, runs whole ``run_worker`` calls under a mock clock.
  ``python -m spate_testing.sim`` runs thousands of seeds.

See docs/testing.md for how to use them on your own workload.
"""

from spate._module_metadata import fixup_module_metadata as _fixup_module_metadata
from spate_testing.sim._checker import INVARIANTS as INVARIANTS
from spate_testing.sim._checker import Violation as Violation
from spate_testing.sim._checker import check as check
from spate_testing.sim._fleet import SimRun as SimRun
from spate_testing.sim._fleet import simulate as simulate
from spate_testing.sim._history import History as History
from spate_testing.sim._machines import simulate_machines as simulate_machines
from spate_testing.sim._recorder import Recorder as Recorder
from spate_testing.sim._recorder import final_listing as final_listing
from spate_testing.sim._runner import ENGINES as ENGINES
from spate_testing.sim._runner import Engine as Engine
from spate_testing.sim._runner import SeedResult as SeedResult
from spate_testing.sim._runner import SimHang as SimHang
from spate_testing.sim._runner import replay_command as replay_command
from spate_testing.sim._runner import run_checked as run_checked
from spate_testing.sim._runner import run_scenario as run_scenario
from spate_testing.sim._runner import run_seed as run_seed
from spate_testing.sim._scenario import Scenario as Scenario
from spate_testing.sim._scenario import Scripted as Scripted
from spate_testing.sim._workload import Workload as Workload

__all__ = [
    "ENGINES",
    "INVARIANTS",
    "Engine",
    "History",
    "Recorder",
    "Scenario",
    "Scripted",
    "SeedResult",
    "SimHang",
    "SimRun",
    "Violation",
    "Workload",
    "check",
    "final_listing",
    "replay_command",
    "run_checked",
    "run_scenario",
    "run_seed",
    "simulate",
    "simulate_machines",
]

# Its names report this module as their home (in reprs, tracebacks, pickles), as spate's do.
_fixup_module_metadata(__name__, globals(), __all__)
