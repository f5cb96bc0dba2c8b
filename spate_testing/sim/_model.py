"""The store of a machine-level simulation: a key-value model, and each worker's faulty link to it.

:class:`ModelStore` keeps the two keyspaces the contract describes (:mod:`spate.store`):
entries with revisions, compare-and-swap on the revision, per-key expiry of ephemeral keys
(a lease lives ``ttl`` seconds past its last write), and watches that see every change in
revision order. It is synchronous: a write applies at the instant the
:class:`~spate_testing.sim._clockwork.Scheduler` runs it, and every write is recorded with its
true outcome (:class:`~spate_testing.sim._history.StoreWrite`) as it applies.

:class:`Link` is one worker incarnation's connection to the model, and carries the faults
:class:`~spate_testing.faults.FaultyStore` injects into a real store, with the same meaning and
the same per-call draws from a seeded generator: latency and its spikes, unavailability, lost
replies, writes that land after their caller gave up, watch breaks, duplicated and replayed
watch events, silent expiry, and the two switches a chaos driver throws (``freeze``: calls
wait, then land late; ``partition``: calls fail and watches break). A call that outlives the
operation timeout is answered with ``StoreUnavailable`` at the timeout, as the runtime's own
deadline would.
"""

from __future__ import annotations

import bisect
import builtins
import collections
import contextlib
import itertools
import random
from collections.abc import Callable
from typing import Any, Protocol

import attrs
import outcome

from spate import StoreUnavailable
from spate._core.flow_engine import LIST_TIMEOUT_FACTOR
from spate._core.flows import Op, Page
from spate._core.records import KeyKind, Keys
from spate.store import (
    Conflict,
    Delete,
    Entry,
    EphemeralSemantics,
    Keyspace,
    Put,
    SessionLost,
    WatchEvent,
    Won,
    WriteResult,
)
from spate_testing.faults import FaultRates
from spate_testing.sim._clockwork import Scheduler, Timer
from spate_testing.sim._history import Delivered, History, StoreWrite, instance_of

__all__ = ["Link", "ModelStore", "WatchSink"]


@attrs.define(eq=False)
class _Watcher:
    prefix: str
    deliver: Callable[[WatchEvent], None]
    exact: bool = False
    seq: int = 0
    """Its place in the order watchers registered (the order they are told of a change)."""

    def covers(self, key: str) -> bool:
        return key == self.prefix if self.exact else key.startswith(self.prefix)


@attrs.define(eq=False)
class _Lease:
    deadline: float = 0.0
    keys: set[str] = attrs.field(factory=set)


@attrs.define(eq=False)
class _Table:
    ttl: float | None
    entries: dict[str, Entry] = attrs.field(factory=dict)
    revision: int = 0
    # Watchers by key (exact) and the prefix watchers, each by registration number: a change
    # is matched against its own key's watchers and the few prefixes, not against every
    # watcher of a large fleet.
    exact: dict[str, dict[int, _Watcher]] = attrs.field(factory=dict)
    prefixed: dict[int, _Watcher] = attrs.field(factory=dict)
    # The keys in order, for paged listings; dropped when a key comes or goes (a rewrite,
    # the common write, keeps it), so a page costs a bisection, not a sort of the table.
    ordered: list[str] | None = None

    def sorted_keys(self) -> list[str]:
        if self.ordered is None:
            self.ordered = sorted(self.entries)
        return self.ordered

    def add(self, watcher: _Watcher) -> None:
        if watcher.exact:
            self.exact.setdefault(watcher.prefix, {})[watcher.seq] = watcher
        else:
            self.prefixed[watcher.seq] = watcher

    def discard(self, watcher: _Watcher) -> None:
        if not watcher.exact:
            self.prefixed.pop(watcher.seq, None)
            return
        of_key = self.exact.get(watcher.prefix)
        if of_key is not None:
            of_key.pop(watcher.seq, None)
            if not of_key:
                del self.exact[watcher.prefix]

    def watchers_of(self, key: str) -> list[_Watcher]:
        """The watchers covering ``key``, in the order they registered."""
        of_key = self.exact.get(key)
        found = [] if of_key is None else list(of_key.values())
        prefixed = [w for w in self.prefixed.values() if key.startswith(w.prefix)]
        if not prefixed:
            return found
        if not found:
            return prefixed
        return sorted([*found, *prefixed], key=lambda w: w.seq)


class ModelStore:
    """Two keyspaces, compare-and-swap by revision, and ephemeral keys that expire.

    Ephemeral keys follow one of the contract's two semantics (:class:`EphemeralSemantics`):
    ``PER_KEY`` (memory, NATS: a key lives ``ttl`` past its last write) or ``SESSION`` (etcd:
    a key lives as long as the session lease its last write named, which lives ``ttl`` past
    its last keepalive and dies at once when revoked; a write naming a lease that is gone is
    refused and applies nothing).
    """

    def __init__(
        self,
        scheduler: Scheduler,
        *,
        ttl: float,
        history: History,
        semantics: EphemeralSemantics = EphemeralSemantics.PER_KEY,
    ) -> None:
        self._scheduler = scheduler
        self._history = history
        self.ttl = ttl
        self.semantics = semantics
        sessions = semantics is EphemeralSemantics.SESSION
        self._tables = {
            Keyspace.DURABLE: _Table(ttl=None),
            Keyspace.EPHEMERAL: _Table(ttl=None if sessions else ttl),
        }
        self._leases: dict[int, _Lease] = {}
        self._lease_of: dict[str, int] = {}  # ephemeral key -> the lease it lives under
        self._lease_ids = itertools.count(1)
        self._watcher_seq = itertools.count()

    @property
    def job(self) -> str:
        """The job whose history this store records."""
        return self._history.job

    def delivered(
        self, actor: str, keyspace: Keyspace, keys: tuple[str, ...], snapshot: bool
    ) -> None:
        """Record that a watch delivered ``keys`` to ``actor`` (see :class:`Delivered`)."""
        self._history.append(
            Delivered(
                at=self._scheduler.now(),
                actor=actor,
                keyspace=keyspace.value,
                keys=keys,
                snapshot=snapshot,
            )
        )

    # -- session leases (SESSION semantics) ---------------------------------------------------

    def grant(self) -> int:
        """A new lease, alive for ``ttl`` unless kept alive."""
        lease = next(self._lease_ids)
        self._leases[lease] = _Lease()
        self.keepalive(lease)
        return lease

    def keepalive(self, lease: int) -> bool:
        """Restart ``lease``'s TTL; False when it is gone (expired or revoked)."""
        held = self._leases.get(lease)
        if held is None:
            return False
        held.deadline = self._scheduler.now() + self.ttl
        deadline = held.deadline
        self._scheduler.at(deadline, lambda: self._lapse(lease, deadline))
        return True

    def revoke(self, lease: int) -> None:
        """End ``lease`` now: every key living under it goes."""
        held = self._leases.pop(lease, None)
        if held is None:
            return
        table = self._tables[Keyspace.EPHEMERAL]
        for key in sorted(held.keys):
            if self._lease_of.get(key) == lease and key in table.entries:
                self._remove(table, key)

    def _lapse(self, lease: int, deadline: float) -> None:
        held = self._leases.get(lease)
        if held is not None and held.deadline == deadline:  # no keepalive since
            self.revoke(lease)

    # -- reads ---------------------------------------------------------------------------------

    def get(self, keyspace: Keyspace, key: str) -> Entry | None:
        """The live entry under ``key``, or None."""
        return self._tables[keyspace].entries.get(key)

    def list(self, keyspace: Keyspace, prefix: str) -> list[Entry]:
        """Every live entry under ``prefix``, sorted by key."""
        entries = self._tables[keyspace].entries
        return [entries[k] for k in sorted(entries) if k.startswith(prefix)]

    def list_page(
        self, keyspace: Keyspace, prefix: str, after: str | None, size: int
    ) -> builtins.list[Entry]:
        """Up to ``size`` live entries under ``prefix`` after the key ``after``, sorted by key.

        Read at this instant: a paged listing made of these is the weakest the store contract
        allows of pages taken at different moments (each key that lives throughout appears
        once, at its revision when its page was read), never one snapshot.
        """
        table = self._tables[keyspace]
        keys = table.sorted_keys()
        at = bisect.bisect_right(keys, after) if after is not None else 0
        at = max(at, bisect.bisect_left(keys, prefix))
        entries = table.entries
        page: list[Entry] = []
        while at < len(keys) and len(page) < size and keys[at].startswith(prefix):
            page.append(entries[keys[at]])
            at += 1
        return page

    # -- writes --------------------------------------------------------------------------------

    def write(self, actor: str, op: Op, *, lease: int | None = None) -> WriteResult:
        """Apply one create, update or delete for ``actor``; record its true outcome.

        Under SESSION semantics an ephemeral create or update names the ``lease`` its key
        will live under; naming one that is gone raises :class:`SessionLost` (nothing applied,
        nothing recorded).
        """
        session_put = (
            self.semantics is EphemeralSemantics.SESSION
            and op.keyspace is Keyspace.EPHEMERAL
            and op.method != "delete"
        )
        if session_put and (lease is None or lease not in self._leases):
            raise SessionLost(f"{actor}: the session lease {lease} is gone; nothing was written")
        table = self._tables[op.keyspace]
        current = table.entries.get(op.key)
        result: WriteResult
        if op.method == "create":
            ok = current is None
        elif op.method == "update":
            ok = current is not None and current.revision == op.expected
        else:
            ok = current is not None and (op.expected is None or current.revision == op.expected)
        if not ok:
            result = Conflict()
        elif op.method == "delete":
            result = Won(self._remove(table, op.key))
        else:
            result = Won(self._put(op.keyspace, table, op.key, op.value))
            if session_put:
                assert lease is not None
                self._bind(op.key, lease)
        self._history.append(
            StoreWrite(
                at=self._scheduler.now(),
                actor=actor,
                op=op.method,  # type: ignore[arg-type]  # a write's kind
                keyspace=op.keyspace.value,
                key=op.key,
                expected=op.expected,
                outcome="won" if isinstance(result, Won) else "lost",
                revision=result.revision if isinstance(result, Won) else None,
                value=op.value if isinstance(result, Won) and op.method != "delete" else None,
            )
        )
        return result

    def _put(self, keyspace: Keyspace, table: _Table, key: str, value: bytes) -> int:
        table.revision += 1
        entry = Entry(key, bytes(value), table.revision)
        if key not in table.entries:
            table.ordered = None
        table.entries[key] = entry
        if table.ttl is not None:
            revision = entry.revision
            self._scheduler.later(table.ttl, lambda: self._expire(table, key, revision))
        self._publish(table, key, Put(entry))
        return entry.revision

    def _expire(self, table: _Table, key: str, revision: int) -> None:
        entry = table.entries.get(key)
        if entry is not None and entry.revision == revision:  # not rewritten since
            self._remove(table, key)

    def _bind(self, key: str, lease: int) -> None:
        previous = self._lease_of.get(key)
        if previous is not None and previous in self._leases:
            self._leases[previous].keys.discard(key)
        self._lease_of[key] = lease
        self._leases[lease].keys.add(key)

    def _remove(self, table: _Table, key: str) -> int:
        ephemeral = table is self._tables[Keyspace.EPHEMERAL]
        lease = self._lease_of.pop(key, None) if ephemeral else None
        if lease is not None and lease in self._leases:
            self._leases[lease].keys.discard(key)
        del table.entries[key]
        table.ordered = None
        table.revision += 1
        self._publish(table, key, Delete(key, table.revision))
        return table.revision

    # -- watches -------------------------------------------------------------------------------

    def watch(
        self,
        keyspace: Keyspace,
        prefix: str,
        deliver: Callable[[WatchEvent], None],
        *,
        exact: bool = False,
    ) -> tuple[builtins.list[Entry], Callable[[], None]]:
        """The snapshot under ``prefix`` (of the key ``prefix`` if ``exact``) and a way to stop.

        Later changes go to ``deliver``. Snapshot and registration happen at one instant, so
        no change falls between them.
        """
        table = self._tables[keyspace]
        watcher = _Watcher(prefix, deliver, exact, next(self._watcher_seq))
        table.add(watcher)

        def stop() -> None:
            table.discard(watcher)

        if exact:
            entry = self.get(keyspace, prefix)
            return ([] if entry is None else [entry]), stop
        return self.list(keyspace, prefix), stop

    def _watchers_of(self, table: _Table, key: str) -> builtins.list[_Watcher]:
        """The watchers a change of ``key`` in ``table`` goes to, in registration order."""
        return table.watchers_of(key)

    def _publish(self, table: _Table, key: str, event: WatchEvent) -> None:
        for watcher in self._watchers_of(table, key):
            watcher.deliver(event)


class WatchSink(Protocol):
    """Where a link's watch delivers: its snapshot, its live events, or its end."""

    def snapshot(self, entries: list[Entry]) -> None:
        """The watch is open: every live entry under the prefix, in key order."""
        ...

    def event(self, event: WatchEvent) -> None:
        """A live change (perhaps a duplicate or a replay of an earlier one)."""
        ...

    def broken(self, reason: str) -> None:
        """The watch ended; nothing more is delivered."""
        ...


@attrs.define(eq=False)
class _Watch:
    keyspace: Keyspace
    sink: WatchSink
    generation: int
    stop: Callable[[], None] = lambda: None
    open: bool = True
    live: bool = False
    recent: collections.deque[WatchEvent] = attrs.field(factory=lambda: collections.deque(maxlen=4))


class Link:
    """One worker incarnation's connection to the model, with its faults.

    Replies go to the callbacks given with each call, at the simulated time they arrive. A
    link that was closed (:meth:`close`) answers nothing more; calls it had sent still land (a
    request already in the network), except those that had not yet reached the store.
    """

    def __init__(
        self,
        model: ModelStore,
        scheduler: Scheduler,
        *,
        actor: str,
        rng: random.Random,
        rates: FaultRates,
        op_timeout: float,
    ) -> None:
        self.model = model
        self.actor = actor
        self.rng = rng
        self.rates = rates
        self.op_timeout = op_timeout
        self._scheduler = scheduler
        self.frozen = False
        self._held: list[Callable[[], None]] = []
        self.partitioned = False
        self._generation = 0
        self.closed = False
        self._watches: list[_Watch] = []
        # (key, revision) of ephemeral deletes this link made: real deletes, not expiries.
        self._own_deletes: set[tuple[str, int]] = set()
        self.injected: collections.Counter[str] = collections.Counter()
        """How many faults of each kind were injected (the names FaultyStore uses)."""
        self.read_counts: collections.Counter[str] = collections.Counter()
        """What this link read and was told, by kind: ``get`` calls and ``get_records``
        (entries they found), ``list`` calls and ``list_records``, ``writes``, watch
        ``snapshot_records`` and live ``events`` (counted as the worker receives them)."""
        self._keys = Keys(model.job)
        self._instance = instance_of(actor)
        self.split_landed: Callable[[], bool] | None = None
        """Called the instant one of this link's split writes wins, before its reply leaves:
        True loses the reply (the chaos driver may kill the worker right there, too)."""

    # -- switches ------------------------------------------------------------------------------

    def freeze(self) -> None:
        """Hold every call and watch delivery until :meth:`thaw` (a stopped process)."""
        if not self.frozen:
            self.frozen = True
            self.injected["freeze"] += 1

    def thaw(self) -> None:
        """Let the held calls and deliveries go on, in the order they were made."""
        self.frozen = False
        held, self._held = self._held, []
        for resume in held:
            resume()

    def partition(self) -> None:
        """Cut the link off: calls fail and open watches break."""
        if not self.partitioned:
            self.partitioned = True
            self._generation += 1
            self.injected["partition"] += 1

    def heal(self) -> None:
        """End the partition."""
        self.partitioned = False

    def close(self) -> None:
        """The process is gone: no more replies, and its watches stop."""
        self.closed = True
        for watch in self._watches:
            watch.open = False
            watch.stop()
        self._watches.clear()

    def _roll(self, rate: float) -> bool:
        return rate > 0.0 and self.rng.random() < rate

    def _answer_once(
        self, reply: Callable[[outcome.Outcome[Any]], None]
    ) -> Callable[[outcome.Outcome[Any]], None]:
        """``reply``, called at most once and never once the process is gone.

        The first of a result and a timeout wins.
        """
        answered = False

        def answer(result: outcome.Outcome[Any]) -> None:
            nonlocal answered
            if not answered and not self.closed:
                answered = True
                reply(result)

        return answer

    # -- calls ---------------------------------------------------------------------------------

    def call(
        self,
        op: Op,
        reply: Callable[[outcome.Outcome[Any]], None],
        *,
        lease: int | None = None,
    ) -> None:
        """Perform ``op``; ``reply`` gets its result or its ``StoreUnavailable`` later.

        ``lease`` is the session lease an ephemeral write names (SESSION semantics).
        """
        delay = self.rates.latency
        if self._roll(self.rates.spike_rate):
            self.injected["latency_spike"] += 1
            delay += self.rates.spike_latency
        timeout = self.op_timeout * (LIST_TIMEOUT_FACTOR if op.method == "list" else 1)
        answer = self._answer_once(reply)

        def timed_out() -> None:
            answer(
                outcome.Error(
                    StoreUnavailable(
                        f"{op.method} of {op.key!r} took longer than {timeout} s (op_timeout); its "
                        "outcome is unknown"
                    )
                )
            )

        deadline = self._scheduler.later(timeout, timed_out)

        def arrive() -> None:
            if self.frozen:
                # A stopped process cannot time out its own requests: this one reaches the
                # store when the process wakes, whatever its caller decided meanwhile.
                self._held.append(lambda: self._reach(op, answer, deadline, lease))
            elif deadline.pending and not self.closed:
                self._reach(op, answer, deadline, lease)
            # else: the caller gave up (or died) before the request left: it never lands.

        self._scheduler.later(delay, arrive)

    def _reach(
        self,
        op: Op,
        answer: Callable[[outcome.Outcome[Any]], None],
        deadline: Timer,
        lease: int | None,
    ) -> None:
        def fail(why: str) -> None:
            deadline.cancel()
            answer(outcome.Error(StoreUnavailable(f"{self.actor}: {why} during {op.method}")))

        if self.partitioned:
            return fail("partitioned from the store")
        if self._roll(self.rates.unavailable_rate):
            self.injected["unavailable"] += 1
            return fail("injected unavailability")
        reads = self.read_counts
        if op.method == "get":
            deadline.cancel()
            entry = self.model.get(op.keyspace, op.key)
            reads["get"] += 1
            reads["get_records"] += entry is not None
            return answer(outcome.Value(entry))
        if op.method == "list":
            deadline.cancel()
            entries = self.model.list(op.keyspace, op.key)
            reads["list"] += 1
            reads["list_records"] += len(entries)
            return answer(outcome.Value(entries))
        if op.method == "list-page":
            # The cursor is the last key handed out: each page is read when it is asked for.
            deadline.cancel()
            after = op.cursor if isinstance(op.cursor, str) else None
            entries = self.model.list_page(op.keyspace, op.key, after, op.page_size)
            reads["list"] += after is None
            reads["list_pages"] += 1
            reads["list_records"] += len(entries)
            more = len(entries) >= op.page_size
            return answer(outcome.Value(Page(entries, entries[-1].key if more else None)))
        reads["writes"] += 1
        if self._roll(self.rates.late_rate):
            self.injected["late_landing"] += 1
            self._scheduler.later(self.rates.late_delay, lambda: self._land_late(op, lease))
            return fail("injected timeout (the write lands later)")
        try:
            result = self._land(op, lease)
        except SessionLost as exc:
            deadline.cancel()
            return answer(outcome.Error(exc))
        if (
            op.operation == "split"
            and isinstance(result, Won)
            and self.split_landed is not None
            and self.split_landed()
        ):
            return fail("injected lost reply of a split (it landed)")
        if self._roll(self.rates.maybe_landed_rate):
            self.injected["maybe_landed"] += 1
            return fail("injected lost reply (it landed)")
        deadline.cancel()
        answer(outcome.Value(result))

    def _land_late(self, op: Op, lease: int | None) -> None:
        with contextlib.suppress(SessionLost):  # its session ended meanwhile: refused
            self._land(op, lease)

    def _land(self, op: Op, lease: int | None) -> WriteResult:
        result = self.model.write(self.actor, op, lease=lease)
        if op.method == "delete" and op.keyspace is Keyspace.EPHEMERAL and isinstance(result, Won):
            self._own_deletes.add((op.key, result.revision))
        return result

    def session_call(
        self, what: str, fn: Callable[[], Any], reply: Callable[[outcome.Outcome[Any]], None]
    ) -> None:
        """A session request (grant, keepalive, revoke: ``fn`` on the model), with the faults.

        Its reply (``fn``'s result) comes after the link's latency, or ``StoreUnavailable``:
        cut off, injected, or no answer within the operation timeout.
        """
        answer = self._answer_once(reply)

        def timed_out() -> None:
            answer(outcome.Error(StoreUnavailable(f"{self.actor}: {what} took too long")))

        deadline = self._scheduler.later(self.op_timeout, timed_out)

        def arrive(held: bool = False) -> None:
            if self.frozen:
                # As a write: a stopped process's request reaches the store when it wakes.
                self._held.append(lambda: arrive(held=True))
                return
            if not held and (not deadline.pending or self.closed):
                return  # given up before it left
            deadline.cancel()
            if self.partitioned:
                return answer(outcome.Error(StoreUnavailable(f"{self.actor}: partitioned")))
            if self._roll(self.rates.unavailable_rate):
                self.injected["unavailable"] += 1
                return answer(outcome.Error(StoreUnavailable(f"{self.actor}: injected")))
            answer(outcome.Value(fn()))

        self._scheduler.later(self.rates.latency, arrive)

    # -- watches -------------------------------------------------------------------------------

    def watch(
        self, keyspace: Keyspace, prefix: str, sink: WatchSink, *, exact: bool = False
    ) -> Callable[[], None]:
        """Open a watch after the link's latency; returns a function that closes it."""
        watch = _Watch(keyspace, sink, self._generation)
        self._watches.append(watch)

        def close() -> None:
            watch.open = False
            watch.stop()
            if watch in self._watches:
                self._watches.remove(watch)

        def arrive() -> None:
            if self.frozen:
                self._held.append(arrive)
                return
            if not watch.open or self.closed:
                return
            if self.partitioned:
                return self._break(watch, "partitioned from the store")
            if self._roll(self.rates.unavailable_rate):
                self.injected["unavailable"] += 1
                return self._break(watch, "injected unavailability opening the watch")
            entries, watch.stop = self.model.watch(
                keyspace, prefix, lambda event: self._queue(watch, event), exact=exact
            )
            watch.live = True
            self.read_counts["snapshot_records"] += len(entries)
            noted = tuple(e.key for e in entries if self._noted(e.key))
            if noted:
                self.model.delivered(self.actor, keyspace, noted, snapshot=True)
            sink.snapshot(entries)

        self._scheduler.later(self.rates.latency, arrive)
        return close

    def _queue(self, watch: _Watch, event: WatchEvent) -> None:
        # Delivered at the next turn of the scheduler, in order (the store never waits for
        # a watcher); a frozen process sees them once it wakes.
        self._scheduler.soon(lambda: self._deliver(watch, event))

    def _deliver(self, watch: _Watch, event: WatchEvent) -> None:
        if self.frozen:
            self._held.append(lambda: self._deliver(watch, event))
            return
        if not watch.open or self.closed:
            return
        if self.partitioned or watch.generation != self._generation:
            return self._break(watch, "watch broken by a partition")
        if self._roll(self.rates.watch_drop_rate):
            self.injected["watch_drop"] += 1
            return self._break(watch, "injected watch break")
        if (
            isinstance(event, Delete)
            and watch.keyspace is Keyspace.EPHEMERAL
            and self.rates.silent_expiry
            and (event.key, event.revision) not in self._own_deletes
        ):
            self.injected["silent_expiry"] += 1
            return
        self.read_counts["events"] += 1
        if isinstance(event, Put | Delete):
            key = event.entry.key if isinstance(event, Put) else event.key
            if self._noted(key):
                self.model.delivered(self.actor, watch.keyspace, (key,), snapshot=False)
        watch.sink.event(event)
        if self._roll(self.rates.duplicate_rate):
            self.injected["duplicate"] += 1
            watch.sink.event(event)
        watch.recent.append(event)
        if self._roll(self.rates.replay_rate):
            self.injected["replay"] += 1
            for old in list(watch.recent)[-self.rng.randint(1, len(watch.recent)) :]:
                watch.sink.event(old)

    def _noted(self, key: str) -> bool:
        """Whether a delivery of ``key`` is recorded: a split's key, or another's assignment."""
        kind = self._keys.classify(key)
        if kind is None:
            return False
        what, name = kind
        return what in (KeyKind.SPLIT, KeyKind.LEASE, KeyKind.SPEC) or (
            what is KeyKind.ASSIGN and name != self._instance
        )

    def _break(self, watch: _Watch, reason: str) -> None:
        watch.open = False
        watch.stop()
        if watch in self._watches:
            self._watches.remove(watch)
        watch.sink.broken(f"{self.actor}: {reason}")
