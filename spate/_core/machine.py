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

The rules live in the components, one concern each, wired here and nowhere else:
:mod:`spate._core.leader` (election, planning, assignment), :mod:`spate._core.claims` (claims,
renewals, commit, fail, release, quarantine), :mod:`spate._core.revocation` (drains and their
deadlines), :mod:`spate._core.verdict` (the verdict). They see the machine only as a
:class:`spate._core.host.Host` and each other only through the narrow protocols there.

Work per input is proportional to what it changed: a watch event that is the echo of the
machine's own write is recognised by its revision before anything is decoded and changes
nothing (:meth:`Machine.watch_put` answers ``False``, and the runtime then skips the step); a
step evaluates the rules against the view, whose indexes (the placement index, the
near-quarantine set, the tallies) are kept up to date split by split.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable
from functools import partial
from typing import Any, Protocol, TypeAlias

import outcome

from spate._config import Config
from spate._core.changes import PlacementChanges
from spate._core.claims import Claims
from spate._core.echo import is_echo
from spate._core.flows import Flow, Fork, Hold, Op, Page
from spate._core.host import PlannerRun, ReleaseOutcome, SessionFacts
from spate._core.leader import Leadership, fingerprint_mismatch
from spate._core.ownership import OwnershipReads
from spate._core.protocol import fingerprint_hash, live_workers, stable_hash_str
from spate._core.records import Keys, PlanRecord, PresenceRecord, UnreadableRecord, decode, encode
from spate._core.residuals import ResidualSeeds
from spate._core.revocation import Revocations
from spate._core.schedule import heartbeat_delay, reconcile_interval
from spate._core.scopes import Scopes, WatchScope
from spate._core.split_requests import SplitRequests
from spate._core.splitting import split_flow
from spate._core.startup import STARTUP_STEPS, STEP_TIMEOUT_FACTOR, Retry, StartupStep, StartupTries
from spate._core.verdict import VerdictJudge
from spate._core.view import (
    AssignmentChanged,
    AssignmentGone,
    LeaderChanged,
    LeaderGone,
    LeaseChanged,
    LeaseGone,
    Notice,
    PlanChanged,
    PresenceChanged,
    PresenceGone,
    ProgressChanged,
    View,
)
from spate._errors import FatalCoordinationError, Fenced, StoreUnavailable
from spate._events import Event, Progress
from spate._metrics import Gauges, MetricsHooks
from spate._plan import PlanContext, Planner
from spate._store import Conflict, Delete, Entry, Keyspace, Put, Won
from spate.telemetry._context import Context

__all__ = ["Effects", "Machine"]

logger = logging.getLogger("spate.coordinator")

HoldBackRule: TypeAlias = Callable[[Keyspace, str, "Put | Delete"], bool]
"""A driver's :meth:`~spate._core.flow_engine.FlowEngine.hold_back`: True when it kept the event."""

RECHECK_AFTER = 0.1
"""Seconds before the machine looks again at a rule whose deadline passed without it acting."""
LIST_RETRY = 1.0
"""Seconds before a new leader's failed listing of the job is tried again."""
HANDOVER_POLL = 0.5
"""Seconds between a leaving follower's reads of where its handed-back splits went."""


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
        self.locality = locality
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
        self.presence_rev = 0
        self.presence_ok_at = 0.0
        """When the last presence write that landed was sent (on a per-key store, the session's
        last confirmed renewal: every lease of this worker lives until at least then + TTL)."""
        self._parting = False
        self.scopes = Scopes(self.keys, instance, durable_leases=not session.keeps_keys)
        self._ready = False
        self._handing_over: list[str] = []
        """After a departure, the splits it handed back (a follower polls for their new owners)."""
        self._handover_poll_at = 0.0
        self._handover_polling = False
        self._handover_seen = False
        self._reconciling = False
        # The components, and the two narrow links between them (see spate._core.host).
        self._claims = Claims(self)
        self._revocations = Revocations(self, holdings=self._claims)
        self._claims.drains = self._revocations
        self._leader = Leadership(self, planner)
        self._verdict = VerdictJudge(self, lead=self._leader)
        self._ownership = OwnershipReads(self)
        self._residuals = ResidualSeeds(self)
        self._requests = SplitRequests(self, self._ownership)
        self._leader.requests = self._requests.of
        self._listing = False
        self._bulk_listing = 0
        """Records a listing of the whole job in flight is expected to bring (see bulk_records)."""
        self._list_retry_at = 0.0
        self._saw_job = False

    # -- the Host face (what the components use) -----------------------------------------------

    @property
    def parting(self) -> bool:
        """Whether this worker is leaving the job (set by :meth:`depart_flow`)."""
        return self._parting

    @property
    def bulk_records(self) -> int:
        """Records of bulk work in progress (a plan's seeding), for the runtime's memory policy."""
        return self._leader.seeding + self._bulk_listing

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
    def owned(self) -> frozenset[str]:
        """The splits this worker holds right now."""
        return frozenset(self._claims.owned)

    def holds(self, split: str) -> bool:
        """Whether this worker holds ``split`` right now."""
        return split in self._claims.owned

    @property
    def watches(self) -> tuple[WatchScope, ...]:
        """The watches this worker wants open now (see :mod:`spate._core.scopes`).

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
        return self._claims.commit_flow(split, progress, fence)

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
        return split_flow(self._claims, split, primary, residual, weight, fence)

    def tenancy_ended(self, split: str, fence: int | None) -> Fenced | None:
        """Why a call for ``split`` naming tenancy ``fence`` (None: any) must not act, if so."""
        return self._claims.tenancy_ended(split, fence)

    def fail_flow(self, split: str, reason: str) -> Flow[BaseException | None]:
        """The API call :meth:`Coordinator.fail <spate.Coordinator.fail>`: consume an attempt.

        Returns the error to raise to the caller, or None once the failure is recorded.
        """
        return self._claims.fail_flow(split, reason)

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
        the members since it left (see :meth:`_poll_handover`).
        """
        wanted = list(splits)
        if wanted and not self.sees_job and not self._handover_seen:
            return False
        return self.view.handed_over(self.instance, wanted)

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
        """Move every rule forward from the current state (never awaits)."""
        now = self.now()
        if self.scopes.read_whole_job(self._leader.leading):
            self._saw_job = False
            if not self._leader.leading:
                # Back to a follower's watches: what it learned of its own share while it
                # led may be stale by now, so it reads its share again.
                self._ownership.clear()
                self._residuals.clear()
                self._requests.clear()
                self._claims.reread_share()
        if self.scopes.wants_listing and not self._listing and now >= self._list_retry_at:
            self._listing = True
            self.start(self._list_job())
        if self._leader.leading:
            self._residuals.step(now)
            if self.sees_job and not self._parting:
                self._requests.step(now)
                self._leader.ask(self._requests.take_unsent())
            self._ownership.step(now)
        self._leader.prune_departed(now)
        # A published verdict ends the job here before any other rule acts on it.
        self._verdict.observe()
        if not self._verdict.reported:
            if not self._parting:
                self._leader.step(now)
                self._claims.step(now)
                self._revocations.step(now)
            self._verdict.step(now)
        poll = self._poll_handover(now)
        self._report_gauges()
        for deadline in (
            poll,
            self._ownership.next_deadline(),
            self._residuals.next_deadline(),
            self._requests.next_deadline() if self._leader.leading else math.inf,
            self._list_retry_at if self.scopes.wants_listing else math.inf,
            self._leader.next_deadline(now),
            self._revocations.next_deadline(),
            self._verdict.next_deadline(),
            self._claims.next_deadline(),
        ):
            # A rule may report a deadline that has passed but that it cannot act on yet
            # (its key busy with a write in flight, say). Waking at once would step again at
            # the same instant and decide the same, forever: a busy spin, and under a mock
            # clock a hang, since virtual time never advances. Look again a moment later.
            if deadline < math.inf:
                self._effects.wake_at(max(deadline, now + RECHECK_AFTER))

    def _report_gauges(self) -> None:
        tallies = self.view.tallies
        self.metrics.gauges(
            Gauges(
                owned=len(self._claims.owned),
                completed=tallies.completed,
                quarantined=tallies.quarantined,
                draining=len(self._revocations.revoking),
                live_workers=live_workers(self.view.presence.keys(), self.instance),
                leader=self._leader.leading,
                idle=not self._claims.owned,
            )
        )

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
        self._note_sees_job()

    def _note_sees_job(self) -> None:
        if self.scopes.sees_job and not self._saw_job:
            self._saw_job = True
            self._leader.sees_job_now(self.now())
            self._requests.sees_job_now(self.now())
            self._residuals.sweep()

    def _list_job(self) -> Flow[None]:
        """The new leader's one listing of the durable keyspace: the whole job, once."""
        since = self.view.seq
        plan = self.view.plan
        # A spec and a progress record a split: reported as bulk work while the listing is in
        # flight, so the runtime defers full collections before its hundreds of thousands of
        # records arrive to be folded (see spate._runtime.bulk).
        self._bulk_listing = 2 * (plan.planned if plan is not None else 0)
        try:
            entries: list[Entry] = yield Op("list", Keyspace.DURABLE, self.keys.prefix)
        except StoreUnavailable as exc:
            logger.warning("listing the job failed (%s); retrying", exc)
            self._list_retry_at = self.now() + LIST_RETRY
            return
        finally:
            self._listing = False
            self._bulk_listing = 0
        if not self.scopes.whole_job:
            return  # it stopped leading meanwhile
        self.fold(self.view.apply_listing(Keyspace.DURABLE, entries, since=since))
        self.scopes.listed = True
        self._note_sees_job()

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
        """Read ``key`` and fold what the store holds now.

        For a clean-up whose guarded delete lost: the key moved on without the view hearing
        of it (an event lost with a broken watch, a write whose reply was lost). Guarded by a
        revision the view no longer has right, the next beat's attempt would lose again, and
        on a session store this process's keepalive would keep the key for ever. A failed
        read changes nothing: the next beat tries again.
        """
        try:
            entry: Entry | None = yield Op("get", keyspace, key)
        except StoreUnavailable:
            return
        if entry is None:
            self.fold(self.view.apply_delete(keyspace, key, None))
        else:
            self.fold(self.view.apply_put(keyspace, entry))

    def fold(self, notices: list[Notice]) -> None:
        """Act on what changed in the view."""
        for notice in notices:
            if type(notice) is ProgressChanged:
                # The bulk of them (one a split when a leader takes over): the branch below,
                # without its tests for the other kinds.
                self._claims.on_notice(notice)
                if self._leader.leading:
                    self._lead_on(notice)
            elif isinstance(notice, LeaseChanged | LeaseGone | ProgressChanged):
                self._claims.on_notice(notice)
                if isinstance(notice, LeaseGone):
                    self._leader.nudge_for(notice.split)
                if self._leader.leading:
                    self._lead_on(notice)
            elif isinstance(notice, AssignmentChanged | AssignmentGone):
                if isinstance(notice, AssignmentChanged):
                    self._leader.on_assignment(notice.record)
                if notice.instance == self.instance:
                    self._claims.on_assignment(notice)
            elif isinstance(notice, PresenceChanged):
                self._requests.membership_changed()
                self._on_presence(notice)
            elif isinstance(notice, PresenceGone):
                self._requests.membership_changed()
                if notice.instance != self.instance:
                    self._leader.on_departure(notice.instance, self.now())
            elif isinstance(notice, LeaderChanged | LeaderGone | PlanChanged):
                self._leader.on_notice(notice)
                if (
                    isinstance(notice, PlanChanged)
                    and notice.previous is not None
                    and notice.previous.verdict is not None
                    and notice.plan.verdict is None
                ):
                    # The operator reopened the job (spate requeue): progress records moved
                    # that no lease event tells the leader of.
                    self.scopes.relist()

    def _lead_on(self, notice: LeaseChanged | LeaseGone | ProgressChanged) -> None:
        """What a split's lease or progress tells the leader (reads, residuals, requests)."""
        if isinstance(notice, ProgressChanged):
            self._residuals.found(notice.record)
            self._requests.progressed(notice.split, notice.record)
            return
        if isinstance(notice, LeaseGone):
            self._requests.ended(notice.split)
        elif notice.new_tenancy:
            self._requests.began(notice.split, self.now())
        else:
            return
        self._ownership.note(notice.split)

    def _on_presence(self, notice: PresenceChanged) -> None:
        if notice.instance == self.instance:
            if notice.nonce not in (None, self.nonce) and notice.revision > self.presence_rev:
                raise self.duplicate_instance(f"presence key {self.keys.worker(self.instance)!r}")
            return
        self._leader.on_arrival(notice.instance, notice.new, self.now())
        presence = self.view.presence.get(notice.instance)
        if presence is not None and presence.parents and self._leader.leading:
            # A follower split these: their records name residuals for this leader to seed.
            for parent in presence.parents:
                self._ownership.note(parent)

    # -- startup (the sequence and its retries: spate._core.startup) --------------------------

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
        """The machine's part of ``step`` (join or announce).

        Raises :class:`~spate._core.startup.Retry` when the try lost a benign race, and
        :class:`~spate.FatalCoordinationError` for a plan record it cannot read.
        """
        if step.name == "join":
            flow = self.join_flow()
        elif step.name == "announce":
            flow = self.announce_flow()
        else:
            raise ValueError(f"{step.what} is the runtime's step, not the machine's")
        try:
            done = yield from flow
        except UnreadableRecord as exc:
            raise FatalCoordinationError(str(exc)) from exc
        if not done:
            raise Retry(step.race_lost)

    def join_flow(self) -> Flow[bool]:
        """Join the job: create its plan record with our fingerprint, or read the one that exists.

        Create first, read only when that loses: the worker that creates the job joins in one
        round trip and every other in two, however many start together, and the race of who
        creates it is no failure to retry (a lost create writes nothing, so a worker with
        another fingerprint is still refused before it writes anything). Returns False only if
        the record vanished between the two calls (deleted by hand): run it again.
        """
        key = self.keys.plan
        # The creation time is the job's incarnation: the fences of a job deleted and created
        # again start above the old job's (records.fence_of).
        fresh = encode(PlanRecord(fingerprint=self.fingerprint, incarnation_ms=self.wall_ms()))
        result = yield Op("create", Keyspace.DURABLE, key, fresh, operation="plan-create")
        if isinstance(result, Won):
            return True
        entry: Entry | None = yield Op("get", Keyspace.DURABLE, key)
        if entry is None:
            return False
        plan = decode(PlanRecord, key, entry.value)
        if plan.fingerprint != self.fingerprint:
            raise fingerprint_mismatch(self.job, plan.fingerprint, self.fingerprint)
        return True

    def announce_flow(self) -> Flow[bool]:
        """Write this worker's presence key, taking over one left under our instance id.

        A key already there is a predecessor not yet expired (taken over), or a live twin
        (which finds our nonce at its next renewal and stops). Returns False when the key
        moved while it was taken over: run it again.
        """
        key = self.keys.worker(self.instance)
        value = self.presence_record()
        sent = self.now()
        result = yield Op("create", Keyspace.EPHEMERAL, key, value, operation="announce")
        if not isinstance(result, Won):
            entry: Entry | None = yield Op("get", Keyspace.EPHEMERAL, key)
            if entry is None:
                return False  # the old key vanished: create it again
            result = yield Op(
                "update", Keyspace.EPHEMERAL, key, value, expected=entry.revision,
                operation="announce",
            )  # fmt: skip
            if not isinstance(result, Won):
                return False
        self.presence_rev = result.revision
        self.presence_ok_at = sent
        return True

    # -- heartbeat, presence, reconcile -------------------------------------------------------

    def heartbeat(self) -> None:
        """Renew presence (the session, on a per-key store) and leadership; fence starved splits."""
        now = self.now()
        if not self._parting and not self.busy(Keyspace.EPHEMERAL, self.keys.worker(self.instance)):
            self.start(self._renew_presence())
        self._leader.heartbeat()
        self._claims.heartbeat(now)

    def presence_record(self) -> bytes:
        """This worker's presence value (it advertises its lane budget and locality).

        A follower also names the splits it split since its last landed presence write (see
        :attr:`PresenceRecord.parents`): a split made without the leader's request, or under a
        leader that has gone since, reaches the leader within a heartbeat, at no extra write.
        """
        parents = () if self._leader.leading else tuple(sorted(self._claims.split_since))
        return encode(
            PresenceRecord(
                nonce=self.nonce,
                max_in_flight=self.config.max_in_flight,
                locality=self.locality,
                parents=parents,
            )
        )

    def _presence_landed(self, value: bytes) -> None:
        """A presence write of ``value`` landed: the splits it named have reached the leader."""
        named = decode(PresenceRecord, self.keys.worker(self.instance), value).parents
        self._claims.split_since.difference_update(named)

    def _renew_presence(self) -> Flow[None]:
        key = self.keys.worker(self.instance)
        yield Hold(Keyspace.EPHEMERAL, key)
        if self._parting:
            return
        sent = self.now()
        try:
            if self.presence_rev:
                value = self.presence_record()
                result = yield Op(
                    "update",
                    Keyspace.EPHEMERAL,
                    key,
                    value,
                    expected=self.presence_rev,
                    operation="presence-renew",
                )
                if isinstance(result, Won):
                    self.presence_rev = result.revision
                    self.presence_ok_at = sent
                    self._presence_landed(value)
                    return
            entry = yield Op("get", Keyspace.EPHEMERAL, key)
            if entry is None:
                if self.view.session_leases and self.presence_rev:
                    # The session expired: every lease it kept expired with it, and a peer may
                    # be taking them over already. End those tenancies before a new presence
                    # record could make their leases look alive again.
                    self._claims.session_ended()
                value = self.presence_record()
                result = yield Op("create", Keyspace.EPHEMERAL, key, value, operation="announce")
                if isinstance(result, Won):
                    self.presence_rev = result.revision
                    self.presence_ok_at = sent
                    self._presence_landed(value)
                return
            record = _presence_or_none(entry)
            if record is not None and record.nonce != self.nonce:
                raise self.duplicate_instance(f"presence key {key!r}")
            # Our own write whose reply was lost (maybe landed): adopt its revision.
            self.presence_rev = entry.revision
        except StoreUnavailable as exc:
            logger.debug("presence renewal failed (%s); the next heartbeat retries", exc)

    def reconcile(self) -> None:
        """Start the backstop listing of both keyspaces (one at a time)."""
        if not self._reconciling and self.ready:
            self._reconciling = True
            self.start(self._reconcile_flow())

    def _reconcile_flow(self) -> Flow[None]:
        started = self.now()
        if not self.sees_job:
            # A follower's backstop reads its own keys again, never the job (DESIGN §4b).
            try:
                for scope in self.scopes.follower:
                    yield from self.reread(scope.keyspace, scope.key)
                self._claims.reread_share()
                self.metrics.reconcile_duration(self.now() - started)
            finally:
                self._reconciling = False
            return
        try:
            for keyspace in (Keyspace.EPHEMERAL, Keyspace.DURABLE):
                try:
                    if not (yield from self._list_in_pages(keyspace)):
                        return
                except StoreUnavailable as exc:
                    logger.warning("reconcile listing failed (%s); the next tick retries", exc)
                    return
            # Grace windows elapse with time, not events: let the leader re-decide.
            self.placement_changes.owe()
            self.metrics.reconcile_duration(self.now() - started)
        finally:
            self._reconciling = False

    def _list_in_pages(self, keyspace: Keyspace) -> Flow[bool]:
        """The leader's backstop listing of one keyspace, folded page by page.

        Each page is folded as it comes and let go, so the listing holds about one page of
        records whatever the job's size (DESIGN §4b); what no page brought is decided at the
        end (:meth:`View.end_listing`). The set of keys seen is the one thing kept across
        pages: a key each, where the view already holds a record each.
        """
        since = self.view.seq
        seen: set[str] = set()
        cursor: object = None
        size = self.config.list_page_size
        while True:
            page: Page = yield Op(
                "list-page", keyspace, self.keys.prefix, cursor=cursor, page_size=size
            )
            if not self.sees_job:
                return False  # it stopped leading meanwhile: the rest is not a follower's
            seen.update(entry.key for entry in page.entries)
            self.fold(self.view.apply_page(keyspace, page.entries))
            if page.cursor is None:
                break
            cursor = page.cursor
        self.fold(self.view.end_listing(keyspace, seen, since=since))
        return True

    # -- leaving -----------------------------------------------------------------------------

    def _poll_handover(self, now: float) -> float:
        """A leaving follower reads where its handed-back splits went; the next poll's time.

        ``wait_handed_over`` is answered from the view, but a follower's view hears nothing of
        another worker's claim: so while it waits it reads those splits' progress records, and
        the members' presence and assignment records (``O(workers)``: to know whether anyone
        can take the rest), every :data:`HANDOVER_POLL` seconds.
        """
        if not self._parting or not self._handing_over or self.sees_job:
            return math.inf
        if self._handover_seen and self.view.handed_over(self.instance, self._handing_over):
            return math.inf
        if not self._handover_polling and now >= self._handover_poll_at:
            self._handover_polling = True
            self._handover_poll_at = now + HANDOVER_POLL
            self.start(self._handover_reads())
        return self._handover_poll_at

    def _handover_reads(self) -> Flow[None]:
        try:
            for split in self._handing_over:
                yield from self.reread(Keyspace.DURABLE, self.keys.split(split))
            for keyspace, prefix in (
                (Keyspace.EPHEMERAL, self.keys.worker("")),
                (Keyspace.DURABLE, self.keys.assign("")),
            ):
                since = self.view.seq
                try:
                    entries = yield Op("list", keyspace, prefix)
                except StoreUnavailable:
                    return
                self.fold(
                    self.view.apply_listing(
                        keyspace, entries, since=since, covers=prefix_of(prefix)
                    )
                )
            self._handover_seen = True
        finally:
            self._handover_polling = False

    def release_all_flow(self, splits: list[str]) -> Flow[None]:
        """Hand ``splits`` back, all at once (different keys: their writes overlap)."""
        outcomes = yield Fork(tuple(self._claims.release_flow(split) for split in splits))
        # An exception out of a hand-back is fatal, as it was when they ran one after another.
        self.metrics.released(sum(o.unwrap() == "released" for o in outcomes))

    def depart_flow(self) -> Flow[BaseException | None]:
        """Leave the job: resign, hand every split back at once, delete the presence key."""
        self._parting = True
        self.request_step()
        self._leader.demote(resign=True)
        claims = self._claims
        self._handing_over = sorted(claims.owned)
        # Every split is handed back at once (their writes go to different keys); once every
        # owner is cleared, the leases are dropped at once and the presence key with them. So
        # leaving takes two writes' time however many splits are held, and the leader sees
        # the departure with the leases already freed: the new owners claim them all together.
        results = yield from claims.hand_back_all_flow(sorted(claims.owned), self._presence_after)
        self.metrics.released(results.count("released"))
        if "failed" in results:
            # The store cannot be reached: the hand-backs were all in flight together, so they
            # timed out together (about one operation timeout). Stop holding whatever is left
            # without writing, and let the session's end (expiry, if it cannot be revoked)
            # free it.
            for rest in sorted(claims.owned):
                claims.abandon(rest)
            return StoreUnavailable(
                "the store could not be reached while leaving, so the hand-back was not "
                "written; this worker's splits move to others when its session's keys expire "
                "(within a lease)"
            )
        return None

    def _presence_after(self, results: list[ReleaseOutcome]) -> Flow[None] | None:
        """The presence delete that goes with a departure's lease drops (none if it failed)."""
        return None if "failed" in results else self.delete_presence()

    def delete_presence(self) -> Flow[None]:
        """Drop this worker's presence key (departure): peers rebalance now, not after a TTL."""
        key = self.keys.worker(self.instance)
        yield Hold(Keyspace.EPHEMERAL, key)
        try:
            result = yield Op(
                "delete",
                Keyspace.EPHEMERAL,
                key,
                expected=self.presence_rev or None,
                operation="presence-delete",
            )
        except StoreUnavailable as exc:
            logger.warning("could not delete the presence key (%s); it will expire", exc)
            return
        if isinstance(result, Won):
            self.fold(self.view.forget_own(Keyspace.EPHEMERAL, key, self.presence_rev))
        elif isinstance(result, Conflict):
            logger.debug("presence key already gone or rewritten")


def prefix_of(prefix: str) -> Callable[[str], bool]:
    """Whether a key starts with ``prefix`` (what a listing of ``prefix`` speaks for)."""
    return lambda key: key.startswith(prefix)


def _presence_or_none(entry: Entry) -> PresenceRecord | None:
    try:
        return decode(PresenceRecord, entry.key, entry.value)
    except UnreadableRecord:
        return None


def _unwrap(result: outcome.Outcome[Any]) -> None:
    result.unwrap()
