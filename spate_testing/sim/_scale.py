"""The fleet-scale run: a thousand workers on one job of 100,000 splits, counted (who reads what).

``python -m spate_testing.sim --scale`` (``--workers``, ``--splits``, ``--max-in-flight`` to
resize it) runs one fleet on the machine engine, without faults, and prints what the store
was asked and what it told whom. The counts are exact and do not depend on the machine it runs
on; the wall time is reported beside them. The run:

- starts every worker at once on a bounded job whose splits take 1 to 6 steps (so they
  complete throughout the run, not all at one instant), and lets the fleet place and claim it;
- starts one more worker at ``join_at`` (a late joiner, not leading);
- has one running follower do its reconcile backstop on the side, and counts what that read;
- kills the leader at ``kill_at`` (no hand-back: its keys expire), and counts what the new
  leader reads to take over and afterwards;
- runs until every worker returned the verdict, or ``bound`` seconds of simulated time.

It reports: watch deliveries per write, by the kind of write (a plain commit is delivered to
nobody, a completing commit's lease delete to the leader alone); records read by the late
joiner; records read by one follower backstop; the leader's store calls and records read per
ownership change (a lease created or gone), its listings apart; and the new leader's reads.

A record read is an entry a point read found, an entry of a listing, an entry of a watch
snapshot, or a live watch event.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Callable

import attrs

from spate import Config
from spate._core.flows import Op
from spate._core.records import KeyKind, Keys, ProgressRecord, UnreadableRecord, decode
from spate.store import Delete, Keyspace, WatchEvent, Won, WriteResult
from spate_testing.faults import FaultRates
from spate_testing.sim._clockwork import Scheduler
from spate_testing.sim._history import History, HistoryEvent, Leading, Verdict
from spate_testing.sim._machines import _Fleet, _Life
from spate_testing.sim._model import ModelStore, _Table
from spate_testing.sim._process import SimWorker
from spate_testing.sim._scenario import Scenario
from spate_testing.sim._workload import Workload

__all__ = ["ScaleReport", "ScaleSpec", "run_scale"]


@attrs.frozen(kw_only=True)
class ScaleSpec:
    """The fleet-scale run's parameters (see the module docstring)."""

    workers: int = 1000
    splits: int = 100_000
    max_in_flight: int = 100
    step_seconds: float = 10.0
    lease: float = 10.0
    join_at: float = 25.0
    kill_at: float = 40.0
    bound: float = 600.0

    def scenario(self) -> Scenario:
        """The run as a scenario of the machine engine (no chaos: the phases are driven here)."""
        splits = tuple((f"s{i:06d}", i % 6 + 1, 1) for i in range(self.splits))
        config = Config(
            lease_duration=self.lease,
            planner_thread=False,
            max_in_flight=self.max_in_flight,
        )
        return Scenario(
            seed=0,
            job="scale",
            workload=Workload(batches=(splits,), step_seconds=self.step_seconds),
            initial_workers=self.workers,
            max_workers=self.workers + 1,
            lease=self.lease,
            config=config,
            rates=FaultRates(),
            chaos_seconds=0.0,
            bound=self.bound,
            script=(),
            sessions=True,  # etcd's semantics: a worker's leases live by its one session
        )


class _Slim(History):
    """A history that keeps only leadership, actions and verdicts (the run is not checked)."""

    def append(self, event: HistoryEvent) -> None:
        if isinstance(event, Leading | Verdict):
            self.events.append(event)


class _CountingModel(ModelStore):
    """The store model, counting won writes and the watch deliveries each kind of write caused."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.keys = Keys(self.job)
        self.writes: collections.Counter[str] = collections.Counter()
        self.pushed: collections.Counter[str] = collections.Counter()
        self._kind = "other"

    @property
    def ownership_changes(self) -> int:
        """Leases created or gone (released, expired): each begins or ends a tenancy."""
        w = self.writes
        return w["lease create"] + w["lease delete"] + w["lease expiry"]

    def write(self, actor: str, op: Op, *, lease: int | None = None) -> WriteResult:
        kind = self._classify(op)
        self._kind = kind
        try:
            result = super().write(actor, op, lease=lease)
        finally:
            self._kind = "other"
        if isinstance(result, Won):
            self.writes[kind] += 1
        return result

    def _expire(self, table: _Table, key: str, revision: int) -> None:
        self._kind = "lease expiry"
        try:
            super()._expire(table, key, revision)
        finally:
            self._kind = "other"

    def revoke(self, lease: int) -> None:
        self._kind = "lease expiry"
        try:
            super().revoke(lease)
        finally:
            self._kind = "other"

    def _remove(self, table: _Table, key: str) -> int:
        if self._kind == "lease expiry" and self._is_lease(table, key):
            self.writes["lease expiry"] += 1
        return super()._remove(table, key)

    def _is_lease(self, table: _Table, key: str) -> bool:
        kind = self.keys.classify(key)
        return (
            kind is not None
            and kind[0] is KeyKind.SPLIT
            and table is self._tables[Keyspace.EPHEMERAL]
        )

    def _publish(self, table: _Table, key: str, event: WatchEvent) -> None:
        watchers = self._watchers_of(table, key)
        if watchers:
            kind = self._kind
            lease = self._is_lease(table, key)
            if kind == "other" and isinstance(event, Delete) and lease:
                kind = "lease expiry"
            elif kind == "lease expiry" and not lease:
                kind = "expiry of a presence or leader key"
            self.pushed[kind] += len(watchers)
        super()._publish(table, key, event)

    def _classify(self, op: Op) -> str:
        kind = self.keys.classify(op.key)
        if kind is None:
            return "other"
        what, name = kind
        if what is not KeyKind.SPLIT:
            return str(what.value)
        if op.keyspace is Keyspace.EPHEMERAL:
            return f"lease {op.method}"
        if op.method != "update":
            return f"progress {op.method}"
        current = self.get(op.keyspace, op.key)
        if current is None:
            return "progress update"
        try:
            before = decode(ProgressRecord, op.key, current.value, split=name)
            after = decode(ProgressRecord, op.key, op.value, split=name)
        except UnreadableRecord:
            return "progress update"
        if after.epoch != before.epoch:
            return "claim"
        if after.completed and not before.completed:
            return "completing commit"
        if after.owner is None and before.owner is not None:
            return "hand-back"
        if after.watermark != before.watermark:
            return "plain commit"
        return "progress update"


@attrs.define
class ScaleReport:
    """What the run counted (see the module docstring)."""

    spec: ScaleSpec
    lines: list[str] = attrs.field(factory=list)
    done: bool = False
    sim_seconds: float = 0.0
    wall_seconds: float = 0.0

    writes: dict[str, int] = attrs.field(factory=dict)
    """Won writes by kind (``plain commit``, ``completing commit``, ``lease delete``...)."""
    deliveries: dict[str, int] = attrs.field(factory=dict)
    """Watch deliveries by the kind of write that caused them."""
    backstop_records: int = -1
    """Records one follower's reconcile backstop read."""

    def say(self, line: str) -> None:
        """Add one line of the report."""
        self.lines.append(line)


def _records(reads: collections.Counter[str]) -> int:
    return (
        reads["get_records"] + reads["list_records"] + reads["snapshot_records"] + reads["events"]
    )


def _describe(reads: collections.Counter[str]) -> str:
    return (
        f"{_records(reads):,} records ({reads['get']:,} point reads finding "
        f"{reads['get_records']:,}, {reads['list']:,} listings of {reads['list_records']:,}, "
        f"{reads['snapshot_records']:,} snapshot entries, {reads['events']:,} watch events), "
        f"{reads['writes']:,} writes"
    )


def run_scale(spec: ScaleSpec, progress: Callable[[str], None] | None = None) -> ScaleReport:
    """Run the fleet-scale scenario ``spec`` and count (see the module docstring)."""
    say = progress or (lambda line: None)
    started = time.perf_counter()
    report = ScaleReport(spec)
    scenario = spec.scenario()
    history = _Slim(job=scenario.job)
    scheduler = Scheduler()
    fleet = _Fleet(scenario, history, scheduler, _CountingModel)
    model = fleet.model
    assert isinstance(model, _CountingModel)
    fleet.calm = True  # no faults: links start calm

    def wall() -> str:
        return f"{time.perf_counter() - started:.1f} s wall"

    def live() -> list[_Life]:
        return [life for life in fleet.lives() if life.state == "running"]

    def leader() -> SimWorker | None:
        for life in live():
            if life.worker.machine.leading:
                return life.worker
        return None

    def finished() -> bool:
        return all(life.done for life in fleet.lives())

    def advance(until: float) -> bool:
        # Whether the fleet finished is asked once a simulated second, not after every
        # callback: it looks at every life, and a thousand lives make millions of callbacks.
        while scheduler.now() < until:
            if finished():
                return True
            scheduler.run_until(min(until, scheduler.now() + 1.0))
        return finished()

    for _ in range(spec.workers):
        fleet.start(fleet.new_instance())
    say(f"{spec.workers:,} workers started on {spec.splits:,} splits ({wall()})")

    # The leader's costs from when it sees the job, until it is killed.
    first: SimWorker | None = None
    while first is None or not first.machine.sees_job:
        if advance(scheduler.now() + 0.5) or scheduler.now() > spec.join_at:
            break
        first = leader()
    assert first is not None, "no leader by the late joiner's time"
    seen_at = scheduler.now()
    first_reads = first.link.read_counts.copy()
    changes_at = model.ownership_changes
    report.say(
        f"leader {first.actor} sees the job at t={seen_at:.1f} s, having read "
        f"{_describe(first_reads)}"
    )
    say(f"the leader sees the job at t={seen_at:.1f} s ({wall()})")

    advance(spec.join_at)
    held = sum(len(life.worker.machine.owned) for life in live())
    say(f"t={scheduler.now():.1f} s: {held:,} splits held; a late worker joins ({wall()})")
    fleet.start(fleet.new_instance(), "join")
    late = fleet.lives()[-1].worker

    # One running follower's backstop, on the side, while nothing else reads for it.
    follower = next(
        life.worker
        for life in live()
        if life.worker is not late and not life.worker.machine.leading
    )
    advance(scheduler.now() + 1.0)
    before = follower.link.read_counts.copy()
    follower.input(follower.machine.reconcile)
    advance(scheduler.now() + 1.0)
    backstop = follower.link.read_counts - before
    report.backstop_records = _records(backstop)
    report.say(
        f"one follower's backstop ({follower.actor}, holding {len(follower.machine.owned)}): "
        f"{_describe(backstop)}"
    )

    advance(spec.kill_at)
    successor: SimWorker | None = None
    after: collections.Counter[str] = collections.Counter()
    after_changes = 0
    if finished():
        report.say("the job ended before the leader could be killed")
    else:
        window = first.link.read_counts - first_reads
        changes = model.ownership_changes - changes_at

        def per(n: int) -> str:
            return f"{n / changes:.3f}" if changes else "n/a"

        calls = window["get"] + window["writes"] + window["list"]
        report.say(
            f"leader {first.actor} from t={seen_at:.1f} to t={scheduler.now():.1f} s: "
            f"{changes:,} ownership changes; {_describe(window)}; per change: "
            f"{per(calls)} store calls ({per(window['get'])} point reads, "
            f"{per(window['writes'])} writes, {per(window['list'])} listings), "
            f"{per(_records(window) - window['list_records'])} records read outside "
            "listings, "
            f"{per(window['list_records'])} records read by its backstop listings"
        )
        say(f"t={scheduler.now():.1f} s: killing the leader {first.actor} ({wall()})")
        fleet.action(first.actor, "kill")
        first.kill()
        # The successor, from the moment it leads until it sees the job.
        while successor is None and not finished():
            advance(scheduler.now() + 0.1)
            successor = leader()
        if successor is not None:
            led_at = scheduler.now()
            took = successor.link.read_counts.copy()
            while not successor.machine.sees_job and not finished():
                advance(scheduler.now() + 0.1)
            takeover = successor.link.read_counts - took
            report.say(
                f"new leader {successor.actor} leads at t={led_at:.1f} s (killed at "
                f"t={spec.kill_at:.1f}), sees the job at t={scheduler.now():.1f} s, having "
                f"read {_describe(takeover)} to take over"
            )
            after = successor.link.read_counts.copy()
            after_changes = model.ownership_changes
    say(f"t={scheduler.now():.1f} s: running to the end ({wall()})")
    report.done = advance(spec.bound)
    if successor is not None:
        window = successor.link.read_counts - after
        changes = model.ownership_changes - after_changes
        if changes:
            report.say(
                f"new leader {successor.actor} afterwards: {changes:,} ownership changes; "
                f"{_describe(window)}; per change "
                f"{(window['get'] + window['writes']) / changes:.3f} point reads and writes, "
                f"{window['list']} backstop listings of {window['list_records']:,} records"
            )
    report.say(
        f"late joiner {late.actor} (leading: {late.machine.leading}): "
        f"{_describe(late.link.read_counts)}, {len(late.machine.owned)} splits held at the end"
    )
    for kind in sorted(set(model.writes) | set(model.pushed)):
        count = model.writes[kind]
        pushed = model.pushed[kind]
        each = f" ({pushed / count:.3f} per write)" if count else ""
        report.say(f"writes of kind {kind!r}: {count:,}, watch deliveries {pushed:,}{each}")
    report.writes = dict(model.writes)
    report.deliveries = dict(model.pushed)
    verdicts = [e for e in history.events if isinstance(e, Verdict)]
    report.say(
        f"{'done' if report.done else 'NOT done'} at t={scheduler.now():.1f} s: "
        f"{len(verdicts)} verdicts"
    )
    report.sim_seconds = scheduler.now()
    report.wall_seconds = time.perf_counter() - started
    return report
