"""The coordination machine: every piece of a coordinator's state, and every rule, with no I/O.

The machine is sans-IO in the h11/h2 sense. It never awaits, never reads a clock of its own and
never touches a store or a task. Its inputs are method calls: watch events
(:meth:`Machine.watch_put` ...), timer ticks (:meth:`Machine.heartbeat`, :meth:`Machine.step`
when a deadline passes), the outcomes of the writes it asked for (through the flows it
started), and API calls (:meth:`Machine.commit_flow` ...). Its outputs go through the
:class:`Effects` it was built with: run this flow, emit this event, wake me at ``t``, run the
planner. The clocks (the monotonic one every rule reads, and the wall clock that only stamps
advisory record fields) and the process nonce are passed in, so a test (or the simulator)
drives it with any time and any identity it likes.

This class is the machine's one facade, as ``h11.Connection`` is h11's: the runtime and the
simulator call its methods, never its components, and ask it the policy they follow too (the
startup sequence, the ticker schedule, which watch events to drop or hold back), so that a
runtime only moves bytes and time.

The rules live in the components, one concern each, built here (each given the others it
needs through its constructor) and nowhere else: :mod:`spate._core.leader.leadership` (election,
planning, the rebalance policy, publishing), :mod:`spate._core.tenancy.claims` and
:mod:`spate._core.tenancy.tenancies` (claims; renewals, commit, fail, release),
:mod:`spate._core.tenancy.quarantine`, :mod:`spate._core.tenancy.revocation` (drains and their
deadlines), :mod:`spate._core.leader.verdict` (the verdict), :mod:`spate._core.membership.presence`
(the presence key and the session), :mod:`spate._core.backstop` (the reconcile),
:mod:`spate._core.leader.job_listing`, :mod:`spate._core.membership.handover`,
:mod:`spate._core.membership.departure`, and :mod:`spate._core.notice_router` (where each change the
view reports goes), and last :mod:`spate._core.step_order` (the order in which one step moves them).
They see the machine only as a :class:`spate._core.host.Host` and each other only through the narrow
protocols there or the objects they were given.

Work per input is proportional to what it changed: a watch event that is the echo of the
machine's own write is recognised by its revision before anything is decoded and changes
nothing (:meth:`Machine.watch_put` answers ``False``, and the runtime then skips the step); a
step evaluates the rules against the view, whose indexes (the placement index, the
near-quarantine set, the tallies) are kept up to date split by split.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from functools import partial
from typing import Any, Protocol, TypeAlias

import outcome

from spate._config import Config
from spate._core.backstop import Backstop
from spate._core.echo import is_echo
from spate._core.flows import Flow
from spate._core.host import PlannerRun, SessionFacts
from spate._core.leader.job_listing import JobListing
from spate._core.leader.leadership import Leadership
from spate._core.leader.ownership import OwnershipReads
from spate._core.leader.phase import LeaderPhase
from spate._core.leader.residuals import ResidualSeeds
from spate._core.leader.split_requests import SplitRequests
from spate._core.leader.verdict import VerdictJudge
from spate._core.membership.departure import Departure
from spate._core.membership.handover import HandoverPoll
from spate._core.membership.presence import Presence
from spate._core.membership.startup import (
    STARTUP_STEPS,
    STEP_TIMEOUT_FACTOR,
    StartupStep,
    StartupTries,
    join_flow,
    startup_step_flow,
)
from spate._core.notice_router import NoticeRouter
from spate._core.protocol import fingerprint_hash, stable_hash_str
from spate._core.records import Keys
from spate._core.schedule import heartbeat_delay, reconcile_interval
from spate._core.step_order import StepOrder
from spate._core.tenancy.claims import Claims
from spate._core.tenancy.commits import commit_flow
from spate._core.tenancy.point_reads import reread
from spate._core.tenancy.revocation import DrainTable, Revocations
from spate._core.tenancy.splitting import split_flow
from spate._core.tenancy.tenancies import Tenancies
from spate._core.view.changes import PlacementChanges
from spate._core.view.scopes import Scopes, WatchScope
from spate._core.view.view import (
    Notice,
    View,
)
from spate._errors import FatalCoordinationError, Fenced
from spate._events import Event, Progress
from spate._metrics import MetricsHooks
from spate._plan import PlanContext, Planner
from spate._store import Delete, Entry, Keyspace, Put
from spate.telemetry._context import Context

__all__ = ["Effects", "Machine"]

_Err: TypeAlias = BaseException | None
"""What a flow of an API call ends with: the error to raise to its caller, or None."""

logger = logging.getLogger("spate.coordinator")

HoldBackRule: TypeAlias = Callable[[Keyspace, str, "Put | Delete"], bool]
"""A driver's :meth:`~spate._core.flow_engine.FlowEngine.hold_back`: True when it kept the event."""


class Effects(Protocol):
    """What the machine asks of its runtime (the Trio driver, or a test's fake)."""

    def start(
        self,
        flow: Flow[Any],
        done: Callable[[outcome.Outcome[Any]], None],
        context: Context | None = None,
    ) -> None:
        """Run ``flow``: perform its store requests and resume it with their results."""
        ...

    def busy(self, keyspace: Keyspace, key: str) -> bool:
        """Whether a flow holds ``key`` or waits for it."""
        ...

    def emit(self, event: Event) -> None:
        """Deliver ``event`` to the user (never blocks)."""
        ...

    def wake_at(self, deadline: float) -> None:
        """Make sure :meth:`Machine.step` runs again by ``deadline``."""
        ...

    def request_step(self) -> None:
        """Make sure :meth:`Machine.step` runs soon (state changed outside an input)."""
        ...

    def run_planner(
        self,
        planner: Planner,
        ctx: PlanContext,
        deliver: Callable[[outcome.Outcome[Any]], None],
    ) -> PlannerRun:
        """Call ``planner`` off the machine; ``deliver`` its outcome later, as an input."""
        ...


class Machine:
    """One coordinator's state and rules. Not thread-safe: one caller at a time."""

    def __init__(
        self,
        *,
        job: str,
        instance: str,
        planner: Planner,
        config: Config,
        fingerprint: str,
        metrics: MetricsHooks,
        locality: str,
        nonce: str,
        clock: Callable[[], float],
        wall_ms: Callable[[], int],
        max_value_size: int,
        session: SessionFacts,
        effects: Effects,
    ) -> None:
        assert config.lease_duration is not None
        self.job = job
        self.instance = instance
        self.config = config
        self.lease = config.lease_duration
        self.fingerprint = fingerprint
        self.metrics = metrics
        self.keys = Keys(job)
        self.nonce = nonce
        self.max_value_size = max_value_size
        self.session = session
        self._clock = clock
        self._wall_ms = wall_ms
        self._effects = effects
        # Heartbeat jitter is per process (two runs of one pod drift apart); placement ties
        # are per job (every leader breaks them the same way).
        self.jitter_seed = stable_hash_str(0, f"{instance}/{nonce}")
        self.tie_seed = fingerprint_hash(fingerprint)
        self.placement_changes = PlacementChanges()
        self.view = View(
            self.keys,
            max_attempts=config.max_attempts,
            changes=self.placement_changes,
            session_leases=not session.keeps_keys,
            own=(instance, nonce),
        )
        self.scopes = Scopes(self.keys, instance, durable_leases=not session.keeps_keys)
        self._ready = False
        # The components, and the two narrow links between them (see spate._core.host).
        drains = DrainTable(self)
        self._tenancies = Tenancies(self, drains)
        self._claims = Claims(self, self._tenancies)
        self._revocations = Revocations(self, holdings=self._claims, drains=drains)
        self._ownership = OwnershipReads(self)
        self._residuals = ResidualSeeds(self)
        self._requests = SplitRequests(self, self._ownership)
        self._leader = Leadership(
            self, planner, requests=self._requests.of, ask_split=self._requests.ask_hot
        )
        self._verdict = VerdictJudge(self, lead=self._leader)
        leader = self._leader
        leading, carried = (lambda: leader.leading), leader.balance.carried_loads
        self._presence = Presence(self, locality, self._tenancies, leading, carried=carried)
        self._backstop = Backstop(self, self.scopes, self._claims)
        self._handover = HandoverPoll(self)
        self._departure = Departure(
            self, self._leader, self._tenancies, self._handover, self._presence
        )
        self._job_listing = JobListing(self, self.scopes, self._sees_whole_job)
        self._router = NoticeRouter(
            self,
            self.scopes,
            self._claims,
            self._leader,
            self._ownership,
            self._residuals,
            self._requests,
        )
        self._steps = StepOrder(
            self,
            effects.wake_at,
            scopes=self.scopes,
            job_listing=self._job_listing,
            leader=self._leader,
            ownership=self._ownership,
            residuals=self._residuals,
            requests=self._requests,
            claims=self._claims,
            revocations=self._revocations,
            verdict=self._verdict,
            handover=self._handover,
        )

    # -- the Host face (what the components use) -----------------------------------------------

    @property
    def parting(self) -> bool:
        """Whether this worker is leaving the job (set by :meth:`depart_flow`)."""
        return self._departure.parting

    @property
    def locality(self) -> str:
        """This worker's locality, as its presence record advertises it."""
        return self._presence.locality

    @locality.setter
    def locality(self, locality: str) -> None:
        self._presence.locality = locality

    @property
    def presence_rev(self) -> int:
        """Revision of this worker's presence key as it last wrote it."""
        return self._presence.rev

    @property
    def presence_ok_at(self) -> float:
        """When the last presence write that landed was sent (a per-key store's session renewal)."""
        return self._presence.ok_at

    @property
    def bulk_records(self) -> int:
        """Records of bulk work in progress (a plan's seeding), for the runtime's memory policy."""
        return self._leader.seeding + self._job_listing.bulk

    @property
    def ready(self) -> bool:
        """Whether the first watches delivered their snapshots (the rules may run)."""
        return self._ready

    @property
    def sees_job(self) -> bool:
        """Whether the view holds the whole job (leading, its snapshots and listing folded)."""
        return self.scopes.sees_job

    def now(self) -> float:
        """The injected clock."""
        return self._clock()

    def wall_ms(self) -> int:
        """The injected wall clock, in milliseconds.

        For advisory record fields, and for the job's incarnation when this worker creates its
        plan record (the high part of every fence: see :func:`~spate._core.records.fence_of`).
        """
        return self._wall_ms()

    def start(
        self,
        flow: Flow[Any],
        done: Callable[[outcome.Outcome[Any]], None] | None = None,
        *,
        context: Context | None = None,
    ) -> None:
        """Have ``flow`` run; by default an exception out of it stops the coordinator.

        ``context`` is the trace context of the API call the flow serves: its writes' spans
        join that trace.
        """
        self._effects.start(flow, done or _unwrap, context)

    def busy(self, keyspace: Keyspace, key: str) -> bool:
        """Whether a flow holds ``key`` or waits for it."""
        return self._effects.busy(keyspace, key)

    def request_step(self) -> None:
        """Have the rules look again soon (what they read changed)."""
        self._effects.request_step()

    def emit(self, event: Event) -> None:
        """Send ``event`` to the user."""
        self._effects.emit(event)

    def run_planner(
        self,
        planner: Planner,
        ctx: PlanContext,
        deliver: Callable[[outcome.Outcome[Any]], None],
    ) -> PlannerRun:
        """Have the runtime call the planner."""
        return self._effects.run_planner(planner, ctx, deliver)

    def duplicate_instance(self, where: str) -> FatalCoordinationError:
        """The error for a second live worker using this instance id."""
        return FatalCoordinationError(
            f"another live worker uses instance id {self.instance!r} (a foreign process nonce "
            f"appeared on {where}); instance ids must be unique per live worker — use the pod "
            "or host name, not a constant. This worker stopped to keep one owner per split."
        )

    # -- the facade (what the runtime and the simulator call) ---------------------------------

    @property
    def leading(self) -> bool:
        """Whether this worker leads the job right now."""
        return self._leader.leading

    @property
    def leader_phase(self) -> LeaderPhase:
        """Where this worker stands in leading the job (see :mod:`spate._core.leader.phase`)."""
        return self._leader.phase

    @property
    def owned(self) -> frozenset[str]:
        """The splits this worker holds right now."""
        return frozenset(self._claims.owned)

    def holds(self, split: str) -> bool:
        """Whether this worker holds ``split`` right now."""
        return split in self._claims.owned

    @property
    def watches(self) -> tuple[WatchScope, ...]:
        """The watches this worker wants open now (see :mod:`spate._core.view.scopes`).

        A follower's three exact keys; the leader's ephemeral prefix, the same two durable
        keys and, on a store with per-key TTLs, the durable lease prefix. A runtime looks again
        after every step and opens or closes watches to match.
        """
        return self.scopes.wanted

    def commit_flow(
        self, split: str, progress: Progress, fence: int | None = None
    ) -> Flow[BaseException | None]:
        """The API call :meth:`Coordinator.commit <spate.Coordinator.commit>`: one fenced CAS.

        Returns the error to raise to the caller (``Fenced``, ``StoreUnavailable``), or None
        once the write landed. ``fence`` names the tenancy the write is for (None: any).
        """
        return commit_flow(self._tenancies, split, progress, fence)

    def split_flow(
        self,
        split: str,
        primary: bytes,
        residual: bytes,
        weight: int | None,
        fence: int | None = None,
    ) -> Flow[str | BaseException]:
        """The API call :meth:`Coordinator.split <spate.Coordinator.split>`: one fenced CAS.

        Returns the residual's id once the write landed, or the error to raise to the caller.
        ``fence`` names the tenancy the write is for (None: any).
        """
        return split_flow(self._tenancies, split, primary, residual, weight, fence)

    def tenancy_ended(self, split: str, fence: int | None) -> Fenced | None:
        """Why a call for ``split`` naming tenancy ``fence`` (None: any) must not act, if so."""
        return self._tenancies.tenancy_ended(split, fence)

    def report_load(self, split: str, amount: object, fence: int | None = None) -> None:
        """The API call :meth:`Coordinator.report_load <spate.Coordinator.report_load>`.

        Synchronous, no write: the load rides on the next presence renewal.
        """
        self._tenancies.loads.report(split, amount, self.now(), fence)

    def fail_flow(self, split: str, reason: str, retry_after: float | None = None) -> Flow[_Err]:
        """The API call :meth:`Coordinator.fail <spate.Coordinator.fail>`: consume an attempt."""
        return self._tenancies.fail_flow(split, reason, retry_after)

    def decline_revoke(self, split: str) -> None:
        """The handler cannot stop ``split`` at a safe boundary: force its revocation now.

        A revocation the leader already took back simply ends. The caller has the machine
        step afterwards (the forced hand-back is a flow the step starts).
        """
        self._revocations.decline(split)

    def handed_over(self, splits: Iterable[str]) -> bool:
        """After a departure, whether ``splits`` have moved on (see ``wait_handed_over``).

        Answered from the view: each is owned elsewhere or finished, or nobody is going to
        take the rest. A follower's view knows that only once it has read those splits and
        the workers since it left (see :mod:`spate._core.membership.handover`).
        """
        return self._handover.handed_over(splits)

    def replan_tick(self) -> None:
        """The replan interval passed: an open plan is asked for again (leader only)."""
        self._leader.replan_tick()

    # -- the ticker schedule (the periods are the machine's; see spate._core.schedule) -------

    def heartbeat_delay(self, round_: int) -> float:
        """Seconds until this process's heartbeat number ``round_ + 1`` (from 0): jittered."""
        return heartbeat_delay(self.jitter_seed, round_, self.lease)

    def reconcile_interval(self, *, expiry_reaches_watchers: bool) -> float:
        """Seconds between reconcile listings (at most a lease where expiry is silent)."""
        return reconcile_interval(self.config, expiry_reaches_watchers=expiry_reaches_watchers)

    @property
    def replan_interval(self) -> float:
        """Seconds between replan ticks."""
        return self.config.replan_interval

    # -- the step ----------------------------------------------------------------------------

    def step(self) -> None:
        """Move every rule forward from the current state (see :mod:`spate._core.step_order`)."""
        self._steps.step()

    # -- watches -----------------------------------------------------------------------------

    def watch_opening(self, scope: WatchScope) -> None:
        """A watch is about to open: keys learned from now on outlive its snapshot."""
        self.scopes.opening(scope, self.view.seq)

    def watch_snapshot(self, scope: WatchScope, entries: list[Entry]) -> None:
        """A watch's snapshot arrived: fold it as an authoritative listing of its scope."""
        since = self.scopes.since(scope, self.view.seq)
        keyspace = scope.keyspace
        if scope.exact:
            notices = self.view.apply_listing(keyspace, entries, since=since, covers=scope.covers)
        else:
            notices = self.view.apply_listing(keyspace, entries, since=since, prefix=scope.key)
        self.fold(notices)
        if keyspace is Keyspace.EPHEMERAL:
            self.placement_changes.owe()
        self.scopes.snapshot_folded(scope)
        if self.scopes.ready:
            self._ready = True
        self._job_listing.note_sees_job()

    def _sees_whole_job(self, now: float) -> None:
        """The view holds the whole job now: the leader's parts act on what they did not see."""
        self._leader.sees_job_now(now)
        self._requests.sees_job_now(now)
        self._residuals.sweep()

    def watch_put(self, keyspace: Keyspace, entry: Entry) -> bool:
        """A live watch put; ``False`` when it changed nothing (the echo of an own write)."""
        if self.view.already_seen(keyspace, entry.key, entry.revision):
            return False
        self.fold(self.view.apply_put(keyspace, entry))
        return True

    def watch_delete(self, keyspace: Keyspace, key: str, revision: int) -> None:
        """A live watch delete."""
        self.fold(self.view.apply_delete(keyspace, key, revision))

    def watch_event(self, keyspace: Keyspace, event: Put | Delete) -> bool | None:
        """A live watch event (:meth:`watch_put` or :meth:`watch_delete`)."""
        if isinstance(event, Put):
            return self.watch_put(keyspace, event.entry)
        self.watch_delete(keyspace, event.key, event.revision)
        return None

    def watch_input(
        self, keyspace: Keyspace, event: Put | Delete, hold_back: HoldBackRule | None = None
    ) -> Callable[[], bool | None] | None:
        """What a live watch event becomes: the input to run, or None when it needs none.

        A runtime asks this as the event arrives, before it wakes anything: the echo of an own
        write is dropped undecoded (:mod:`spate._core.echo`), and an event of a key an API call
        is writing is kept by ``hold_back`` (the driver's, :mod:`spate._core.hold_back`) until
        the call lets go of the key, when it comes back here without ``hold_back``.
        """
        if is_echo(self.view, keyspace, event):
            return None
        if hold_back is not None:
            key = event.entry.key if isinstance(event, Put) else event.key
            if hold_back(keyspace, key, event):
                return None
        return partial(self.watch_event, keyspace, event)

    # -- notices -----------------------------------------------------------------------------

    def reread(self, keyspace: Keyspace, key: str) -> Flow[None]:
        """Read ``key`` again and fold what it holds (:func:`.point_reads.reread`)."""
        return reread(self, keyspace, key)

    def fold(self, notices: list[Notice]) -> None:
        """Act on what changed in the view (see :mod:`spate._core.notice_router`)."""
        self._router.fold(notices)

    # -- startup (the sequence and its retries: spate._core.membership.startup)
    # --------------------------

    @property
    def startup_steps(self) -> tuple[StartupStep, ...]:
        """The startup sequence, in order: session, probe, join, announce."""
        return STARTUP_STEPS

    def startup_tries(self, step: StartupStep) -> StartupTries:
        """A fresh budget of tries for ``step`` (``Config.startup_max_attempts``)."""
        return StartupTries(step, self.config.startup_max_attempts)

    def startup_timeout(self, op_timeout: float) -> float:
        """How long one try of a startup step may take."""
        return op_timeout * STEP_TIMEOUT_FACTOR

    @property
    def probe_prefix(self) -> str:
        """The prefix of the startup probe's scratch keys."""
        return self.keys.probe_prefix

    def probe_scratch(self, tries: int) -> str:
        """The scratch name of probe try number ``tries`` (a lost reply may leave keys behind)."""
        return f"{self.nonce[:16]}{tries}"

    def startup_flow(self, step: StartupStep) -> Flow[None]:
        """The machine's part of ``step`` (join or announce; see :func:`startup_step_flow`).

        Raises :class:`~spate._core.membership.startup.Retry` when the try lost a benign race, and
        :class:`~spate.FatalCoordinationError` for a plan record it cannot read.
        """
        return startup_step_flow(step, partial(join_flow, self), self._presence.announce_flow)

    def announce_flow(self) -> Flow[bool]:
        """Write this worker's presence key (see :mod:`spate._core.membership.presence`)."""
        return self._presence.announce_flow()

    # -- heartbeat, presence, reconcile -------------------------------------------------------

    def heartbeat(self) -> None:
        """Renew presence (the session, on a per-key store) and leadership; fence starved splits."""
        now = self.now()
        self._presence.heartbeat()
        self._leader.heartbeat()
        self._claims.heartbeat(now)

    def reconcile(self) -> None:
        """Start the backstop reads (see :mod:`spate._core.backstop`), one at a time."""
        if self.ready:
            self._backstop.reconcile()

    # -- leaving -----------------------------------------------------------------------------

    def release_all_flow(self, splits: list[str]) -> Flow[None]:
        """Hand ``splits`` back, all at once (different keys: their writes overlap)."""
        return self._departure.release_all_flow(splits)

    def depart_flow(self) -> Flow[BaseException | None]:
        """Leave the job (see :mod:`spate._core.membership.departure`)."""
        return self._departure.depart_flow()


def _unwrap(result: outcome.Outcome[Any]) -> None:
    result.unwrap()
