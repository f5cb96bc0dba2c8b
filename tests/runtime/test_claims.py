"""Claims, attempts, renewals, commits, quarantine and the verdict."""

from __future__ import annotations

import attrs
import pytest
import trio
import trio.lowlevel

from spate import (
    AllComplete,
    Event,
    FatalCoordinationError,
    Fenced,
    Gained,
    Lost,
    Progress,
    Quarantined,
    Stalled,
    StoreUnavailable,
)
from spate._core.machine import Machine
from spate._core.records import LeaseRecord, ProgressRecord, Status, decode, encode
from spate._core.tenancy import committed
from spate.store import Entry, Keyspace, Won, WriteResult
from spate_stores.memory import MemoryServer
from spate_testing.faults import FaultyStore

from .harness import (
    KEYS,
    TTL,
    HookStore,
    Worker,
    client,
    complete_on_gain,
    config,
    cooperative,
    planner_of,
    record_of,
    spawn,
)

D, E = Keyspace.DURABLE, Keyspace.EPHEMERAL


async def test_claims_only_assigned_splits_under_max_in_flight(
    autojump_clock: trio.abc.Clock,
) -> None:
    server = MemoryServer()
    cfg = config(max_in_flight=3)
    async with trio.open_nursery() as nursery:
        a = await spawn(nursery, client(server), "a", planner=planner_of(10), cfg=cfg)
        b = await spawn(nursery, client(server), "b", planner=planner_of(10), cfg=cfg)
        await trio.sleep(3 * TTL)
        assert len(a.c.owned) == len(b.c.owned) == 3
        assert not a.c.owned & b.c.owned
        nursery.cancel_scope.cancel()


async def test_grace_window_lets_a_restarted_worker_reclaim_its_own_splits(
    autojump_clock: trio.abc.Clock,
) -> None:
    server = MemoryServer()
    cfg = config(rebalance_delay=20.0)
    async with trio.open_nursery() as nursery:
        a = await spawn(
            nursery, client(server), "a", planner=planner_of(4), cfg=cfg, on_event=cooperative
        )
        await a.until(lambda: len(a.c.owned) == 4)
        b = await spawn(nursery, client(server), "b", planner=planner_of(4), cfg=cfg)
        # Ownership is the coordinator's at once; its Gained events reach b's consumer a
        # moment later: count them only once both are in.
        await b.until(lambda: len(b.c.owned) == 2 and len(b.of(Gained)) == 2)
        theirs = set(a.c.owned)
        assert len(theirs) == 2
        gained_before = len(b.of(Gained))
        a.kill()
        await trio.sleep(TTL + 3)  # a's presence and leases have expired; its window is open
        restarted = await spawn(nursery, client(server), "a", planner=planner_of(4), cfg=cfg)
        await restarted.until(lambda: restarted.c.owned == theirs, within=2 * TTL)
        await trio.sleep(30)
        assert len(b.of(Gained)) == gained_before  # b took none of a's splits
        assert restarted.c.owned == theirs
        nursery.cancel_scope.cancel()


async def test_grace_window_expires_after_rebalance_delay(autojump_clock: trio.abc.Clock) -> None:
    server = MemoryServer()
    cfg = config(rebalance_delay=20.0)
    async with trio.open_nursery() as nursery:
        a = await spawn(
            nursery, client(server), "a", planner=planner_of(2), cfg=cfg, on_event=cooperative
        )
        await a.until(lambda: len(a.c.owned) == 2)
        b = await spawn(nursery, client(server), "b", planner=planner_of(2), cfg=cfg)
        await b.until(lambda: len(b.c.owned) == 1)
        (theirs,) = a.c.owned
        await trio.sleep(TTL)
        killed_at = trio.current_time()
        a.kill()
        gained = await b.wait_for(Gained, theirs, within=60)
        first = b.time_of(gained)
        # a's presence expired at most a lease after its last renewal (a third of a lease
        # before the kill, jittered), and its splits then waited out the whole delay.
        assert first - killed_at >= TTL - 1.2 * TTL / 3 + 20.0
        assert first - killed_at <= TTL + 20.0 + 1.0
        nursery.cancel_scope.cancel()


async def test_hand_back_consumes_no_attempt(autojump_clock: trio.abc.Clock) -> None:
    server = MemoryServer()
    async with trio.open_nursery() as nursery:
        a = await spawn(nursery, client(server), "a", planner=planner_of(2), on_event=cooperative)
        await a.until(lambda: len(a.c.owned) == 2)
        b = await spawn(nursery, client(server), "b", planner=planner_of(2))
        gained = await b.wait_for(Gained)
        assert a.metrics.counts["released"] == 1
        assert gained.progress == Progress(7, b"st")  # resumes from the drained commit
        assert gained.epoch == 2
        record, _ = await record_of(client(server), gained.split)
        assert record.attempts == 0
        assert b.metrics.counts["acquired:reassigned"] == 1
        nursery.cancel_scope.cancel()


async def test_expiry_takeover_consumes_one_attempt(autojump_clock: trio.abc.Clock) -> None:
    # The owner dies without moving the watermark: its successor charges the split.
    server = MemoryServer()
    async with trio.open_nursery() as nursery:
        a = await spawn(nursery, client(server), "a", planner=planner_of(1))
        await a.until(lambda: a.c.owned == {"s00"})
        b = await spawn(nursery, client(server), "b", planner=planner_of(1))
        a.kill()
        gained = await b.wait_for(Gained, "s00", within=3 * TTL)
        assert gained.progress.watermark is None
        record, _ = await record_of(client(server), "s00")
        assert record.attempts == 1
        assert record.owner == "b"
        assert not record.advanced  # the claim opens a fresh tenancy
        assert b.metrics.counts["acquired:expired"] == 1
        nursery.cancel_scope.cancel()


async def test_expiry_takeover_after_an_advancing_commit_consumes_no_attempt(
    autojump_clock: trio.abc.Clock,
) -> None:
    # Fair blame: the dead owner moved the watermark, so its death is not the split's fault.
    server = MemoryServer()
    async with trio.open_nursery() as nursery:
        a = await spawn(nursery, client(server), "a", planner=planner_of(1))
        await a.until(lambda: a.c.owned == {"s00"})
        b = await spawn(nursery, client(server), "b", planner=planner_of(1))
        await a.c.commit("s00", Progress(3))
        record, _ = await record_of(client(server), "s00")
        assert record.advanced
        a.kill()
        gained = await b.wait_for(Gained, "s00", within=3 * TTL)
        assert gained.progress.watermark == 3
        record, _ = await record_of(client(server), "s00")
        assert record.attempts == 0
        assert record.owner == "b"
        assert not record.advanced
        assert b.metrics.counts["acquired:expired"] == 1
        nursery.cancel_scope.cancel()


async def test_release_racing_expiry_is_settled_by_one_read(autojump_clock: trio.abc.Clock) -> None:
    # b sees the lease vanish before the owner-clear arrives on its (slow) durable watch;
    # one durable read shows the clean hand-back, so no attempt is consumed.
    server = MemoryServer()
    b_store = HookStore(client(server))
    b_store.durable_gate = trio.Event()
    b_store.gate_prefix = KEYS.split_prefix
    async with trio.open_nursery() as nursery:
        a = await spawn(nursery, client(server), "a", planner=planner_of(2), on_event=cooperative)
        await a.until(lambda: len(a.c.owned) == 2)
        b = await spawn(nursery, b_store, "b", planner=planner_of(2))
        gained = await b.wait_for(Gained, within=TTL)
        b_store.durable_gate.set()
        record, _ = await record_of(client(server), gained.split)
        assert record.attempts == 0
        assert b.metrics.counts["acquired:reassigned"] == 1
        assert b.metrics.counts["acquired:expired"] == 0
        nursery.cancel_scope.cancel()


async def test_zombie_commit_before_takeover_is_adopted(autojump_clock: trio.abc.Clock) -> None:
    server = MemoryServer()
    raw = client(server)
    b_store = HookStore(client(server))
    async with trio.open_nursery() as nursery:
        a = await spawn(nursery, client(server), "a", planner=planner_of(1))
        await a.until(lambda: a.c.owned == {"s00"})
        b = await spawn(nursery, b_store, "b", planner=planner_of(1))
        last, last_rev = await record_of(raw, "s00")
        a.kill()  # a is now a zombie: paused, its lease runs out

        async def zombie_commits_first(kind: str, keyspace: Keyspace, key: str) -> None:
            if kind == "update" and keyspace is D and key == KEYS.split("s00"):
                b_store.before = None
                late = attrs.evolve(last, watermark=42, state=b"zombie")
                assert isinstance(await raw.update(D, key, encode(late), last_rev), Won)

        b_store.before = zombie_commits_first
        gained = await b.wait_for(Gained, "s00", within=3 * TTL)
        assert gained.progress == Progress(42, b"zombie")
        assert gained.epoch == 2
        record, _ = await record_of(raw, "s00")
        assert record.attempts == 1  # the takeover counts once, though it took two tries
        nursery.cancel_scope.cancel()


async def test_zombie_commit_after_takeover_is_fenced(autojump_clock: trio.abc.Clock) -> None:
    server = MemoryServer()
    raw = client(server)
    a_store = FaultyStore(client(server), name="a")
    async with trio.open_nursery() as nursery:
        a = await spawn(nursery, a_store, "a", planner=planner_of(1))
        await a.until(lambda: a.c.owned == {"s00"})
        a_store.freeze()  # a is paused: it hears nothing of what follows
        record, rev = await record_of(raw, "s00")
        lease = await raw.get(E, KEYS.split("s00"))
        assert lease is not None
        thief = LeaseRecord(owner="thief", nonce="n", epoch=record.epoch + 1)
        assert isinstance(await raw.update(E, lease.key, encode(thief), lease.revision), Won)
        taken = attrs.evolve(record, epoch=record.epoch + 1, owner="thief")
        assert isinstance(await raw.update(D, KEYS.split("s00"), encode(taken), rev), Won)
        failure: list[BaseException] = []

        async def zombie_commit() -> None:
            try:
                await a.c.commit("s00", Progress(99))
            except Fenced as exc:
                failure.append(exc)

        nursery.start_soon(zombie_commit)
        for _ in range(5):
            await trio.lowlevel.checkpoint()
        a_store.thaw()
        await a.until(lambda: bool(failure) and bool(a.of(Lost)), within=TTL)
        after, _ = await record_of(raw, "s00")
        assert after == taken  # nothing of the zombie's commit landed
        assert a.of(Lost) == [Lost("s00", "fenced")]
        nursery.cancel_scope.cancel()


async def test_maybe_landed_commit_is_adopted(autojump_clock: trio.abc.Clock) -> None:
    store = HookStore(client(MemoryServer()))
    async with trio.open_nursery() as nursery:
        a = await spawn(nursery, store, "a", planner=planner_of(1))
        await a.until(lambda: a.c.owned == {"s00"})
        store.durable_gate = trio.Event()  # a hears nothing of its own commit landing

        async def lose_the_reply(kind: str, ks: Keyspace, key: str, result: WriteResult) -> None:
            if kind == "update" and key == KEYS.split("s00"):
                store.after = None
                raise StoreUnavailable("reply lost")

        store.after = lose_the_reply
        with pytest.raises(StoreUnavailable, match="may or may not have landed"):
            await a.c.commit("s00", Progress(5, b"x"))
        await a.c.commit("s00", Progress(5, b"x"))  # the retry finds its own write
        store.durable_gate.set()
        record, _ = await record_of(store, "s00")
        assert record.watermark == 5
        assert a.c.owned == {"s00"}
        assert not a.of(Lost)
        assert ("commit", "lost") in [(op, outcome) for _, op, outcome in a.metrics.writes]
        nursery.cancel_scope.cancel()


async def test_maybe_landed_renewal_is_adopted(autojump_clock: trio.abc.Clock) -> None:
    store = HookStore(client(MemoryServer()))
    async with trio.open_nursery() as nursery:
        a = await spawn(nursery, store, "a", planner=planner_of(1))
        await a.until(lambda: a.c.owned == {"s00"})
        store.ephemeral_gate = trio.Event()

        async def lose_the_reply(kind: str, ks: Keyspace, key: str, result: WriteResult) -> None:
            if kind == "update" and ks is E and key == KEYS.split("s00"):
                store.after = None
                raise StoreUnavailable("reply lost")

        store.after = lose_the_reply
        await trio.sleep(3 * TTL)
        store.ephemeral_gate.set()
        assert a.c.owned == {"s00"}
        assert not a.of(Lost)
        outcomes = [outcome for _, op, outcome in a.metrics.writes if op == "renew"]
        assert "error" in outcomes
        assert "lost" in outcomes  # the next renewal lost, read back, and adopted its own write
        nursery.cancel_scope.cancel()


async def test_thief_on_a_held_lease_means_lost_fenced(autojump_clock: trio.abc.Clock) -> None:
    raw = client(server := MemoryServer())
    async with trio.open_nursery() as nursery:
        a = await spawn(nursery, client(server), "a", planner=planner_of(1))
        await a.until(lambda: a.c.owned == {"s00"})
        lease = await raw.get(E, KEYS.split("s00"))
        assert lease is not None
        thief = LeaseRecord(owner="thief", nonce="n", epoch=9)
        await raw.update(E, lease.key, encode(thief), lease.revision)
        await a.wait_for(Lost, "s00", within=1)
        assert a.of(Lost) == [Lost("s00", "fenced")]
        nursery.cancel_scope.cancel()


async def test_no_renewal_for_a_whole_lease_self_fences(autojump_clock: trio.abc.Clock) -> None:
    a_store = FaultyStore(client(MemoryServer()), name="a")
    async with trio.open_nursery() as nursery:
        a = await spawn(nursery, a_store, "a", planner=planner_of(1))
        await a.until(lambda: a.c.owned == {"s00"})
        cut_at = trio.current_time()
        a_store.partition()
        lost = await a.wait_for(Lost, "s00", within=2 * TTL)
        assert lost.reason == "starved"
        assert a.time_of(lost) - cut_at <= TTL + 1.2 * TTL / 3
        nursery.cancel_scope.cancel()


async def test_watermark_regression_is_fatal(autojump_clock: trio.abc.Clock) -> None:
    store = client(MemoryServer())
    async with trio.open_nursery() as nursery:
        a = await spawn(nursery, store, "a", planner=planner_of(1), expect_error=True)
        await a.until(lambda: a.c.owned == {"s00"})
        await a.c.commit("s00", Progress(10))
        with pytest.raises(FatalCoordinationError, match="from 10 to 5"):
            await a.c.commit("s00", Progress(5))
        await a.until(lambda: a.done.is_set(), within=1)
        assert isinstance(a.error, FatalCoordinationError)
        record, _ = await record_of(store, "s00")
        assert record.watermark == 10


async def fail_first_split(worker: Worker, event: Event) -> None:
    if isinstance(event, Gained):
        if event.split == "s00":
            await worker.c.fail(event.split, "poison")
        else:
            await worker.c.commit(event.split, Progress(1, completed=True))


async def test_quarantine_at_max_attempts_and_stalled_verdict(
    autojump_clock: trio.abc.Clock,
) -> None:
    store = client(MemoryServer())
    async with trio.open_nursery() as nursery:
        a = await spawn(
            nursery,
            store,
            "a",
            planner=planner_of(3),
            cfg=config(max_attempts=2),
            on_event=fail_first_split,
        )
        verdict = await a.wait_for(Stalled, within=3 * TTL)
        assert verdict == Stalled(completed=2, quarantined=1)
        assert a.of(Quarantined) == [Quarantined("s00", 2)]
        assert len(a.of(Gained, "s00")) == 2  # a failure hands back: re-claimed, no attempt
        assert not a.of(AllComplete)
        record, _ = await record_of(store, "s00")
        assert record.attempts == 2
        nursery.cancel_scope.cancel()


async def test_expiry_takeover_at_the_cap_quarantines_instead(
    autojump_clock: trio.abc.Clock,
) -> None:
    server = MemoryServer()
    cfg = config(max_attempts=1)
    async with trio.open_nursery() as nursery:
        a = await spawn(nursery, client(server), "a", planner=planner_of(1), cfg=cfg)
        await a.until(lambda: a.c.owned == {"s00"})
        b = await spawn(nursery, client(server), "b", planner=planner_of(1), cfg=cfg)
        a.kill()
        assert await b.wait_for(Stalled, within=3 * TTL) == Stalled(completed=0, quarantined=1)
        assert b.of(Quarantined) == [Quarantined("s00", 1)]
        assert not b.of(Gained)
        nursery.cancel_scope.cancel()


async def test_all_complete_only_when_every_split_completed(
    autojump_clock: trio.abc.Clock,
) -> None:
    store = client(MemoryServer())
    async with trio.open_nursery() as nursery:
        a = await spawn(nursery, store, "a", planner=planner_of(3))
        await a.until(lambda: len(a.c.owned) == 3)
        await a.c.commit("s00", Progress(1, completed=True))
        await a.c.commit("s01", Progress(1, completed=True))
        await a.c.commit("s02", Progress(1))
        await trio.sleep(3 * TTL)
        assert not a.of(AllComplete)
        assert not a.of(Stalled)
        await a.c.commit("s02", Progress(2, completed=True))
        await a.wait_for(AllComplete, within=1)
        await trio.sleep(TTL)
        assert len(a.of(AllComplete)) == 1  # latched
        # A completed commit hands its lease back.
        assert await store.list(E, KEYS.split_prefix) == []
        nursery.cancel_scope.cancel()


async def test_an_open_plan_has_no_verdict(autojump_clock: trio.abc.Clock) -> None:
    async with trio.open_nursery() as nursery:
        a = await spawn(
            nursery,
            client(MemoryServer()),
            "a",
            planner=planner_of(2, final=False),
            on_event=complete_on_gain,
        )
        await trio.sleep(5 * TTL)
        assert len(a.of(Gained)) == 2
        assert not a.of(AllComplete)
        nursery.cancel_scope.cancel()


async def test_gained_carries_descriptor_weight_and_progress(
    autojump_clock: trio.abc.Clock,
) -> None:
    async with trio.open_nursery() as nursery:
        a = await spawn(
            nursery, client(MemoryServer()), "a", planner=planner_of(1, weight=lambda i: 5)
        )
        gained = await a.wait_for(Gained, "s00")
        assert gained == Gained("s00", 1, Progress(None, b"", False), b"d0", 5)
        nursery.cancel_scope.cancel()


async def test_progress_record_decodes_after_commit(autojump_clock: trio.abc.Clock) -> None:
    store = client(MemoryServer())
    async with trio.open_nursery() as nursery:
        a = await spawn(nursery, store, "a", planner=planner_of(1))
        await a.until(lambda: a.c.owned == {"s00"})
        await a.c.commit("s00", Progress(12, b"\x00\xff"))
        entry = await store.get(D, KEYS.split("s00"))
        assert entry is not None
        record = decode(ProgressRecord, entry.key, entry.value)
        assert (record.owner, record.epoch, record.watermark, record.state) == (
            "a",
            1,
            12,
            b"\x00\xff",
        )
        nursery.cancel_scope.cancel()


@pytest.mark.parametrize(
    "progress",
    [Progress(9, b"new"), Progress(5, b"same watermark"), Progress(12, completed=True)],
)
def test_a_commit_keeps_every_field_it_does_not_change(progress: Progress) -> None:
    """The commit's record is built field by field for speed: it must equal the evolve of
    the record it replaces, for a record with no field at its default."""
    record = ProgressRecord(
        id="s1", epoch=4, status=Status.RUNNABLE, owner="w1", attempts=2, watermark=5,
        state=b"old", completed=False, written_at_ms=17, advanced=False, owner_nonce="n1",
    )  # fmt: skip
    # A field added to the record must be added to committed() too: this list breaks first.
    assert [f.name for f in attrs.fields(ProgressRecord)] == [
        "schema", "id", "epoch", "status", "owner", "attempts", "watermark", "state",
        "completed", "written_at_ms", "advanced", "owner_nonce",
    ]  # fmt: skip
    expected = attrs.evolve(
        record,
        watermark=progress.watermark,
        state=progress.state,
        completed=progress.completed,
        status=Status.COMPLETED if progress.completed else record.status,
        written_at_ms=99,
        advanced=progress.watermark != record.watermark,
    )
    assert committed(record, progress, 99) == expected
    assert committed(attrs.evolve(record, advanced=True), progress, 99).advanced


async def test_the_echo_of_a_commit_heard_before_its_reply_is_never_folded_as_news(
    autojump_clock: trio.abc.Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The store tells its watchers of a commit before the committer hears its reply: the
    echo waits until the commit has landed and is then dropped by revision, undecoded."""
    posted: list[tuple[str, int]] = []
    watch_put = Machine.watch_put

    def spy(self: Machine, keyspace: Keyspace, entry: Entry) -> None:
        posted.append((entry.key, entry.revision))
        watch_put(self, keyspace, entry)

    monkeypatch.setattr(Machine, "watch_put", spy)
    store = HookStore(client(MemoryServer()))
    landed: list[int] = []

    async def slow_reply(kind: str, ks: Keyspace, key: str, result: WriteResult) -> None:
        if kind == "update" and key == KEYS.split("s00") and isinstance(result, Won):
            landed.append(result.revision)
            await trio.sleep(0.05)  # the watch hears of it first

    async with trio.open_nursery() as nursery:
        a = await spawn(nursery, store, "a", planner=planner_of(1))
        await a.until(lambda: a.c.owned == {"s00"})
        store.after = slow_reply
        for watermark in range(1, 6):
            await a.c.commit("s00", Progress(watermark, b"x"))
        await trio.testing.wait_all_tasks_blocked()
        assert len(landed) == 5
        assert not {(KEYS.split("s00"), revision) for revision in landed} & set(posted)
        record, revision = await record_of(store, "s00")
        assert record.watermark == 5
        assert revision == landed[-1]
        assert a.c.owned == {"s00"}
        assert not a.of(Lost)
        nursery.cancel_scope.cancel()
