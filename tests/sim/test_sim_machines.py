"""The machine engine's parts: its scheduler, its store model, the faults of a link, a worker."""

from __future__ import annotations

import random
from typing import Any

import attrs
import outcome
import pytest

from spate import Config, StoreUnavailable
from spate._core.flows import Op
from spate._core.records import Keys, PresenceRecord, decode
from spate.store import Conflict, Delete, Entry, Keyspace, Put, WatchEvent, Won
from spate_testing.faults import FaultRates
from spate_testing.sim._checker import check
from spate_testing.sim._clockwork import Scheduler
from spate_testing.sim._fleet import worker_nonce
from spate_testing.sim._history import History, StoreWrite, Verdict
from spate_testing.sim._machines import simulate_machines
from spate_testing.sim._model import Link, ModelStore
from spate_testing.sim._scenario import Scenario, Scripted
from spate_testing.sim._workload import Workload

DURABLE, EPHEMERAL = Keyspace.DURABLE, Keyspace.EPHEMERAL

# -- the scheduler -----------------------------------------------------------------------------


def test_callbacks_run_by_due_time_and_ties_in_scheduling_order() -> None:
    scheduler = Scheduler()
    seen: list[str] = []
    scheduler.at(2.0, lambda: seen.append("b"))
    scheduler.at(1.0, lambda: seen.append("a1"))
    scheduler.at(1.0, lambda: seen.append("a2"))
    dropped = scheduler.at(1.5, lambda: seen.append("never"))
    dropped.cancel()
    scheduler.run_until(10.0)
    assert seen == ["a1", "a2", "b"]
    assert scheduler.now() == 10.0


def test_a_callback_due_in_the_past_runs_now_after_what_is_due() -> None:
    scheduler = Scheduler()
    seen: list[tuple[str, float]] = []

    def first() -> None:
        seen.append(("first", scheduler.now()))
        scheduler.at(0.0, lambda: seen.append(("late", scheduler.now())))

    scheduler.at(3.0, first)
    scheduler.at(3.0, lambda: seen.append(("second", scheduler.now())))
    scheduler.run_until(5.0)
    assert seen == [("first", 3.0), ("second", 3.0), ("late", 3.0)]


def test_run_until_stops_as_soon_as_done_says_so() -> None:
    scheduler = Scheduler()
    ticks: list[float] = []

    def tick() -> None:
        ticks.append(scheduler.now())
        scheduler.later(1.0, tick)

    scheduler.soon(tick)
    assert scheduler.run_until(100.0, lambda: len(ticks) == 4) is True
    assert ticks == [0.0, 1.0, 2.0, 3.0]
    assert scheduler.run_until(5.5) is False
    assert scheduler.now() == 5.5


# -- the store model ---------------------------------------------------------------------------


def model(ttl: float = 3.0) -> tuple[Scheduler, ModelStore, History]:
    scheduler = Scheduler()
    history = History(job="j", seed=0)
    return scheduler, ModelStore(scheduler, ttl=ttl, history=history), history


def write(store: ModelStore, kind: Any, ks: Keyspace, key: str, **kw: Any) -> Any:
    return store.write("t", Op(kind, ks, key, **kw))


def test_writes_are_compare_and_swap_on_the_revision_and_recorded() -> None:
    _, store, history = model()
    created = write(store, "create", DURABLE, "k", value=b"1")
    assert isinstance(created, Won)
    assert isinstance(write(store, "create", DURABLE, "k", value=b"2"), Conflict)
    stale = created.revision + 5
    assert isinstance(write(store, "update", DURABLE, "k", value=b"2", expected=stale), Conflict)
    updated = write(store, "update", DURABLE, "k", value=b"2", expected=created.revision)
    assert isinstance(updated, Won)
    assert store.get(DURABLE, "k") == Entry("k", b"2", updated.revision)
    assert isinstance(write(store, "delete", DURABLE, "k", expected=created.revision), Conflict)
    assert isinstance(write(store, "delete", DURABLE, "k", expected=updated.revision), Won)
    assert store.get(DURABLE, "k") is None
    outcomes = [(w.op, w.outcome) for w in history.of(StoreWrite)]
    assert outcomes == [
        ("create", "won"),
        ("create", "lost"),
        ("update", "lost"),
        ("update", "won"),
        ("delete", "lost"),
        ("delete", "won"),
    ]


def test_an_ephemeral_key_expires_a_ttl_after_its_last_write() -> None:
    scheduler, store, _ = model(ttl=3.0)
    first = write(store, "create", EPHEMERAL, "lease", value=b"a")
    scheduler.run_until(2.0)
    write(store, "update", EPHEMERAL, "lease", value=b"b", expected=first.revision)
    scheduler.run_until(4.5)
    assert store.get(EPHEMERAL, "lease") is not None  # renewed at 2.0: lives until 5.0
    scheduler.run_until(5.0)
    assert store.get(EPHEMERAL, "lease") is None
    write(store, "create", DURABLE, "durable", value=b"x")
    scheduler.run_until(100.0)
    assert store.get(DURABLE, "durable") is not None


def test_a_watch_sees_its_snapshot_then_every_change_in_order() -> None:
    _, store, _ = model()
    write(store, "create", DURABLE, "p.a", value=b"1")
    write(store, "create", DURABLE, "q.z", value=b"1")
    seen: list[WatchEvent] = []
    snapshot, stop = store.watch(DURABLE, "p.", seen.append)
    assert [e.key for e in snapshot] == ["p.a"]
    b = write(store, "create", DURABLE, "p.b", value=b"2")
    write(store, "create", DURABLE, "q.y", value=b"2")
    gone = write(store, "delete", DURABLE, "p.a")
    stop()
    write(store, "create", DURABLE, "p.c", value=b"3")
    assert seen == [Put(Entry("p.b", b"2", b.revision)), Delete("p.a", gone.revision)]


# -- a link's faults ---------------------------------------------------------------------------


def link(rates: FaultRates | None = None) -> tuple[Scheduler, ModelStore, Link]:
    scheduler, store, _ = model()
    return (
        scheduler,
        store,
        Link(
            store,
            scheduler,
            actor="w0#1",
            rng=random.Random(0),
            rates=rates or FaultRates(),
            op_timeout=1.0,
        ),
    )


def call(scheduler: Scheduler, target: Link, op: Op) -> list[outcome.Outcome[Any]]:
    answers: list[outcome.Outcome[Any]] = []
    target.call(op, answers.append)
    return answers


def test_a_frozen_links_write_lands_after_the_thaw_though_its_caller_gave_up() -> None:
    scheduler, store, target = link()
    target.freeze()
    answers = call(scheduler, target, Op("create", DURABLE, "k", b"zombie"))
    scheduler.run_until(5.0)
    assert len(answers) == 1
    with pytest.raises(StoreUnavailable, match="op_timeout"):
        answers[0].unwrap()
    assert store.get(DURABLE, "k") is None
    target.thaw()
    assert store.get(DURABLE, "k") is not None  # the late write reached the store


def test_a_partitioned_link_fails_calls_and_breaks_its_watches() -> None:
    scheduler, store, target = link()
    broken: list[str] = []

    class Sink:
        def snapshot(self, entries: list[Entry]) -> None:
            pass

        def event(self, event: WatchEvent) -> None:
            pass

        def broken(self, reason: str) -> None:
            broken.append(reason)

    target.watch(DURABLE, "", Sink())
    scheduler.run_until(0.0)
    target.partition()
    answers = call(scheduler, target, Op("create", DURABLE, "k", b"v"))
    write(store, "create", DURABLE, "other", value=b"v")
    scheduler.run_until(1.0)
    with pytest.raises(StoreUnavailable, match="partitioned"):
        answers[0].unwrap()
    assert store.get(DURABLE, "k") is None
    assert len(broken) == 1
    assert "partition" in broken[0]


def test_a_call_slower_than_the_timeout_is_answered_at_the_timeout_and_never_lands() -> None:
    scheduler, store, target = link(FaultRates(spike_rate=1.0, spike_latency=5.0))
    answers = call(scheduler, target, Op("create", DURABLE, "k", b"v"))
    scheduler.run_until(1.0)
    assert len(answers) == 1
    assert isinstance(answers[0], outcome.Error)
    scheduler.run_until(10.0)
    assert store.get(DURABLE, "k") is None
    assert target.injected["latency_spike"] == 1


def test_a_lost_reply_hides_a_write_that_landed() -> None:
    scheduler, store, target = link(FaultRates(maybe_landed_rate=1.0))
    answers = call(scheduler, target, Op("create", DURABLE, "k", b"v"))
    scheduler.run_until(1.0)
    with pytest.raises(StoreUnavailable, match="lost reply"):
        answers[0].unwrap()
    assert store.get(DURABLE, "k") is not None


def test_a_late_write_fails_for_its_caller_and_lands_later() -> None:
    scheduler, store, target = link(FaultRates(late_rate=1.0, late_delay=2.0))
    answers = call(scheduler, target, Op("create", DURABLE, "k", b"v"))
    scheduler.run_until(1.0)
    assert isinstance(answers[0], outcome.Error)
    assert store.get(DURABLE, "k") is None
    scheduler.run_until(3.0)
    assert store.get(DURABLE, "k") is not None


def test_silent_expiry_hides_expiries_from_a_watch_but_not_own_deletes() -> None:
    scheduler, store, target = link(FaultRates(silent_expiry=True))
    events: list[WatchEvent] = []

    class Sink:
        def snapshot(self, entries: list[Entry]) -> None:
            pass

        def event(self, event: WatchEvent) -> None:
            events.append(event)

        def broken(self, reason: str) -> None:
            raise AssertionError(reason)

    target.watch(EPHEMERAL, "", Sink())
    scheduler.run_until(0.0)
    write(store, "create", EPHEMERAL, "expires", value=b"v")
    mine = call(scheduler, target, Op("create", EPHEMERAL, "mine", b"v"))
    scheduler.run_until(1.0)
    deleted = call(
        scheduler, target, Op("delete", EPHEMERAL, "mine", expected=mine[0].unwrap().revision)
    )
    scheduler.run_until(10.0)
    deletes = [e for e in events if isinstance(e, Delete)]
    assert [d.key for d in deletes] == ["mine"]
    assert deletes[0].revision == deleted[0].unwrap().revision
    assert target.injected["silent_expiry"] == 1


# -- whole runs ---------------------------------------------------------------------------------


def one_worker(seed: int = 5) -> Scenario:
    return Scenario(
        seed=seed,
        workload=Workload(batches=((("s0", 3, 1), ("s1", 2, 1)),), step_seconds=0.5),
        initial_workers=1,
        max_workers=1,
        lease=2.0,
        config=Config(lease_duration=2.0, planner_thread=False),
        rates=FaultRates(),
        chaos_seconds=1.0,
        script=(),
    )


def test_a_lone_worker_finishes_its_job_with_the_injected_nonce() -> None:
    scenario = one_worker()
    run = simulate_machines(scenario)
    assert check(run.history) == []
    assert [v.all_complete for v in run.history.of(Verdict)] == [True]
    presence = [
        w
        for w in run.history.of(StoreWrite)
        if w.key == Keys("sim").worker("w0") and w.outcome == "won" and w.value
    ]
    assert presence
    record = decode(PresenceRecord, presence[0].key, presence[0].value)
    assert record.nonce == worker_nonce(scenario.seed, "w0#1")


def test_a_watch_that_fails_to_open_is_opened_again_once() -> None:
    """Found by seed 14128: a watch broken while it opened was re-opened twice (by the break
    and again by its opening deadline), so every outage doubled each worker's watches until
    a run ground to a halt delivering thousands of copies of every event."""
    opened: list[float] = []

    class Counting(ModelStore):
        def watch(
            self, keyspace: Keyspace, prefix: str, deliver: Any, *, exact: bool = False
        ) -> Any:
            opened.append(self._scheduler.now())
            return super().watch(keyspace, prefix, deliver, exact=exact)

    scenario = attrs.evolve(
        one_worker(),
        rates=FaultRates(latency=0.5),
        chaos_seconds=40.0,
        script=(Scripted(at=3.0, what="outage", duration=30.0),),
    )
    run = simulate_machines(scenario, model=Counting)
    assert check(run.history) == []
    # A follower's three watches, then a leader's two (and a follower's again when the outage
    # costs it the leader key), each re-opened with a backoff capped at 5 s through 30 s.
    assert len(opened) <= 3 + 2 + 3 * (1 + 30 / 5 + 6), len(opened)


def test_the_same_scenario_replays_the_same_history() -> None:
    scenario = Scenario.from_seed(123)
    first, second = simulate_machines(scenario), simulate_machines(scenario)
    assert first.history.to_jsonl() == second.history.to_jsonl()
    assert first.faults == second.faults


@pytest.mark.parametrize("engine", ["machines", "trio"])
def test_a_stubborn_handler_declines_its_revocation_and_the_split_moves_anyway(
    engine: str,
) -> None:
    from spate_testing.sim._history import Revocations
    from spate_testing.sim._runner import run_checked

    splits = tuple((f"s{i}", 12, 1) for i in range(4))
    scenario = Scenario(
        seed=9,
        workload=Workload(batches=(splits,), stubborn=frozenset(s for s, _, _ in splits)),
        initial_workers=1,
        max_workers=2,
        lease=2.0,
        config=Config(
            lease_duration=2.0, planner_thread=False, rebalance_delay=0.0, drain_deadline=20.0
        ),
        rates=FaultRates(),
        chaos_seconds=6.0,
        script=(Scripted(at=2.0, what="join", target="w1"),),
    )
    result = run_checked(scenario, engine=engine)  # type: ignore[arg-type]
    assert result.ok, result.violations
    # The drain deadline is far off: only the declines can have forced these revocations.
    forced = sum(r.forced for r in result.history.of(Revocations) if r.actor == "w0#1")
    assert forced >= 1


def test_a_session_store_keeps_keys_by_lease_and_refuses_a_lease_that_is_gone() -> None:
    from spate._errors import SessionLost
    from spate.store import EphemeralSemantics

    scheduler = Scheduler()
    store = ModelStore(
        scheduler,
        ttl=3.0,
        history=History(job="j", seed=0),
        semantics=EphemeralSemantics.SESSION,
    )
    lease = store.grant()
    assert isinstance(store.write("t", Op("create", EPHEMERAL, "k", b"v"), lease=lease), Won)
    scheduler.run_until(2.0)
    assert store.keepalive(lease)
    scheduler.run_until(4.9)
    assert store.get(EPHEMERAL, "k") is not None  # kept alive past its own write's TTL
    scheduler.run_until(5.0)
    assert store.get(EPHEMERAL, "k") is None  # no keepalive for a TTL: the lease and its keys go
    assert store.keepalive(lease) is False
    with pytest.raises(SessionLost):
        store.write("t", Op("create", EPHEMERAL, "k", b"v"), lease=lease)
    other = store.grant()
    store.write("t", Op("create", EPHEMERAL, "k2", b"v"), lease=other)
    store.revoke(other)
    assert store.get(EPHEMERAL, "k2") is None  # a revoked lease's keys go at once
