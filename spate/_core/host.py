"""What the machine's components may see of each other and of the runtime: narrow, typed faces.

The machine (:mod:`spate._core.machine`) owns the components — claims, leadership, revocations,
the terminal verdict — and hands each of them a :class:`Host`: the coordinator's identity, the
shared read model of the store (:class:`spate._core.view.view.View`), the clock, and the effects a
component may ask for (start a flow, emit an event, run the planner). A component that needs
another's facts gets them through one of the small protocols below, never by reaching into the
other's attributes, so each rule lives in one module and the import graph has no cycles: the
components import this module, the machine imports the components, and nothing imports the
machine but the runtime.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from typing import Any, Literal, Protocol

import outcome

from spate._config import Config
from spate._core.flows import Flow
from spate._core.records import Keys
from spate._core.view.changes import PlacementChanges
from spate._core.view.view import Notice, View
from spate._errors import FatalCoordinationError
from spate._events import Event
from spate._metrics import MetricsHooks, RevocationOutcome
from spate._plan import PlanContext, Planner
from spate._store import Keyspace
from spate.telemetry._context import Context

__all__ = [
    "Drains",
    "Holdings",
    "Host",
    "Lead",
    "PlannerRun",
    "ReleaseOutcome",
    "SessionFacts",
]

ReleaseOutcome = Literal["released", "fenced", "failed", "missing"]
"""How one hand-back ended: landed, another worker had it already, the write failed, not held."""


class SessionFacts(Protocol):
    """What the claims need to know of the store session their leases live under."""

    @property
    def session(self) -> int:
        """The store session's number: bumped whenever a new session replaces the previous one."""
        ...

    @property
    def keeps_keys(self) -> bool:
        """Whether the session's keepalive keeps every lease key alive (nothing to renew)."""
        ...

    def starved(self, session: int, now: float, lease: float) -> bool:
        """Whether keys written under session number ``session`` may have expired by ``now``."""
        ...


class PlannerRun(Protocol):
    """A planner call the runtime is running for the leader (it can be abandoned)."""

    def cancel(self) -> None:
        """Abandon the call: its result is never delivered."""
        ...


class Host(Protocol):
    """The machine as one component sees it."""

    job: str
    instance: str
    nonce: str
    """This process's nonce: two processes under one instance id never share it."""
    keys: Keys
    config: Config
    lease: float
    fingerprint: str
    tie_seed: int
    metrics: MetricsHooks
    view: View
    placement_changes: PlacementChanges
    """What moved among the leader's placement inputs (the view and the leader report it)."""
    session: SessionFacts
    max_value_size: int
    """The store's largest value (a plan whose spec records exceed it is refused)."""

    @property
    def presence_rev(self) -> int:
        """Revision of this worker's presence key as it last wrote it."""
        ...

    @property
    def presence_ok_at(self) -> float:
        """When the last presence write that landed was sent (a per-key store's session renewal)."""
        ...

    @property
    def parting(self) -> bool:
        """Whether this worker is leaving the job (it claims nothing new)."""
        ...

    @property
    def sees_job(self) -> bool:
        """Whether the view holds the whole job (the leader's), not a follower's share."""
        ...

    def now(self) -> float:
        """The machine's clock (injected; the runtime passes Trio's)."""
        ...

    def wall_ms(self) -> int:
        """Wall-clock milliseconds (injected).

        For the advisory ``written_at_ms`` fields, and the job's incarnation when a worker
        creates the plan record (a fence's high part).
        """
        ...

    def fold(self, notices: list[Notice]) -> None:
        """Hand what changed in the view to the components that act on it."""
        ...

    def reread(self, keyspace: Keyspace, key: str) -> Flow[None]:
        """Read ``key`` and fold what the store holds now (a guarded write found it moved)."""
        ...

    def start(
        self,
        flow: Flow[Any],
        done: Callable[[outcome.Outcome[Any]], None] | None = None,
        *,
        context: Context | None = None,
    ) -> None:
        """Have the runtime run ``flow`` (by default an exception out of it is fatal)."""
        ...

    def busy(self, keyspace: Keyspace, key: str) -> bool:
        """Whether a flow holds ``key`` or waits for it (a renewal then waits a beat)."""
        ...

    def emit(self, event: Event) -> None:
        """Send ``event`` to the user."""
        ...

    def request_step(self) -> None:
        """Have the rules look again soon: a change they read was made outside an input.

        An API call running inline asks when it frees a lane or moves a drain; a plain
        commit changes nothing another rule reads and asks for nothing.
        """
        ...

    def run_planner(
        self,
        planner: Planner,
        ctx: PlanContext,
        deliver: Callable[[outcome.Outcome[Any]], None],
    ) -> PlannerRun:
        """Call ``planner`` off the machine; ``deliver`` gets its outcome as a later input."""
        ...

    def duplicate_instance(self, where: str) -> FatalCoordinationError:
        """The error for a second live worker found using this instance id."""
        ...


class Drains(Protocol):
    """The revocations, as the claims see them."""

    def note_progress(self, split: str) -> None:
        """A commit landed on ``split`` (a draining split's liveness signal)."""
        ...

    def settle(self, split: str, outcome: RevocationOutcome) -> None:
        """``split`` stopped being held: retire its revocation, if any, under ``outcome``."""
        ...


class Holdings(Protocol):
    """The claims, as the revocations see them."""

    @property
    def owned(self) -> Mapping[str, object]:
        """The splits this worker holds."""
        ...

    @property
    def assigned(self) -> Collection[str]:
        """The splits the leader's assignment gives this worker."""
        ...

    @property
    def busy(self) -> Collection[str]:
        """Splits with a claim, fail or hand-back in flight."""
        ...

    @property
    def assignment_seen(self) -> bool:
        """Whether an assignment for this worker exists ("nothing decided" otherwise)."""
        ...

    def release_flow(self, split: str) -> Flow[ReleaseOutcome]:
        """Hand ``split`` back cleanly."""
        ...


class Lead(Protocol):
    """The leadership, as the verdict sees it."""

    @property
    def verdict_generation(self) -> int | None:
        """The generation under which this worker may write the verdict now, or None.

        Set only while it leads, its generation bump has landed in the plan record, and no
        plan publish of its own is in flight (which the verdict's write would make lose).
        """
        ...
