"""Claims, attempts, renewals, commits, quarantine and the verdict, machine by machine."""

from __future__ import annotations

import attrs
import pytest

from spate import (
    AllComplete,
    FatalCoordinationError,
    Fenced,
    Gained,
    Lost,
    Progress,
    Quarantined,
    Stalled,
    StoreUnavailable,
)
from spate._core.records import LeaseRecord, ProgressRecord, Residual, Status, encode
from spate._core.tenancy.tenancies import committed
from spate.store import Keyspace, Won

from .world import KEYS, LEASE, Worker, World, complete_on_gain, config, cooperative, planner_of

DURABLE, EPHEMERAL = Keyspace.DURABLE, Keyspace.EPHEMERAL


def test_claims_only_assigned_splits_under_max_in_flight() -> None:
    world = World()
    cfg = config(max_in_flight=3)
    a = world.start("a", planner=planner_of(10), cfg=cfg)
    b = world.start("b", planner=planner_of(10), cfg=cfg)
    world.run_for(3 * LEASE)
    assert len(a.owned) == len(b.owned) == 3
    assert not a.owned & b.owned


def test_grace_window_lets_a_restarted_worker_reclaim_its_own_splits() -> None:
    world = World()
    cfg = config(rebalance_delay=20.0)
    a = world.start("a", planner=planner_of(4), cfg=cfg, on_event=cooperative)
    world.run_until(lambda: len(a.owned) == 4)
    b = world.start("b", planner=planner_of(4), cfg=cfg)
    world.run_until(lambda: len(b.owned) == 2)
    theirs = a.owned
    assert len(theirs) == 2
    gained_before = len(b.of(Gained))
    a.kill()
    world.run_for(LEASE + 3)  # a's presence and leases have expired; its window is open
    restarted = world.start("a", planner=planner_of(4), cfg=cfg)
    world.run_until(lambda: restarted.owned == theirs, within=2 * LEASE)
    world.run_for(30)
    assert len(b.of(Gained)) == gained_before  # b took none of a's splits
    assert restarted.owned == theirs


def test_grace_window_expires_after_rebalance_delay() -> None:
    world = World()
    cfg = config(rebalance_delay=20.0)
    a = world.start("a", planner=planner_of(2), cfg=cfg, on_event=cooperative)
    world.run_until(lambda: len(a.owned) == 2)
    b = world.start("b", planner=planner_of(2), cfg=cfg)
    world.run_until(lambda: len(b.owned) == 1)
    (theirs,) = a.owned
    world.run_for(LEASE)
    killed_at = world.now
    a.kill()
    world.run_until(lambda: bool(b.of(Gained, theirs)), within=60)
    first = b.time_of(b.of(Gained, theirs)[0])
    # a's presence expired at most a lease after its last renewal (a third of a lease before
    # the kill, jittered), and its splits then waited out the whole delay.
    assert first - killed_at >= LEASE - 1.2 * LEASE / 3 + 20.0
    assert first - killed_at <= LEASE + 20.0 + 1.0


def test_hand_back_consumes_no_attempt() -> None:
    world = World()
    a = world.start("a", planner=planner_of(2), on_event=cooperative)
    world.run_until(lambda: len(a.owned) == 2)
    b = world.start("b", planner=planner_of(2))
    world.run_until(lambda: bool(b.of(Gained)))
    (gained,) = b.of(Gained)
    assert a.counts["released"] == 1
    assert gained.progress == Progress(7, b"st")  # resumes from the drained commit
    assert gained.epoch == 2
    record, _ = world.record(gained.split)
    assert record.attempts == 0
    assert b.counts["acquired:reassigned"] == 1


def test_expiry_takeover_consumes_one_attempt() -> None:
    # The owner dies without moving the watermark: its successor charges the split.
    world = World()
    a = world.start("a", planner=planner_of(1))
    world.run_until(lambda: a.owned == {"s00"})
    b = world.start("b", planner=planner_of(1))
    a.kill()
    world.run_until(lambda: bool(b.of(Gained, "s00")), within=3 * LEASE)
    assert b.of(Gained, "s00")[0].progress.watermark is None
    record, _ = world.record("s00")
    assert record.attempts == 1
    assert record.owner == "b"
    assert not record.advanced  # the claim opens a fresh tenancy
    assert b.counts["acquired:expired"] == 1


def test_expiry_takeover_after_an_advancing_commit_consumes_no_attempt() -> None:
    # Fair blame: the dead owner moved the watermark, so its death is not the split's fault.
    world = World()
    a = world.start("a", planner=planner_of(1))
    world.run_until(lambda: a.owned == {"s00"})
    b = world.start("b", planner=planner_of(1))
    world.wait(a.commit("s00", Progress(3)))
    record, _ = world.record("s00")
    assert record.advanced
    a.kill()
    world.run_until(lambda: bool(b.of(Gained, "s00")), within=3 * LEASE)
    assert b.of(Gained, "s00")[0].progress.watermark == 3
    record, _ = world.record("s00")
    assert record.attempts == 0
    assert record.owner == "b"
    assert not record.advanced
    assert b.counts["acquired:expired"] == 1


def test_release_racing_expiry_is_settled_by_one_read() -> None:
    # b sees the lease vanish before the owner-clear arrives on its (slow) durable watch;
    # one durable read shows the clean hand-back, so no attempt is consumed.
    world = World()
    a = world.start("a", planner=planner_of(2), on_event=cooperative)
    world.run_until(lambda: len(a.owned) == 2)
    b = world.start("b", planner=planner_of(2), wait=False)
    b.deafen(DURABLE, KEYS.split_prefix)
    world.run_until(lambda: bool(b.of(Gained)), within=LEASE)
    b.hear(DURABLE)
    record, _ = world.record(b.of(Gained)[0].split)
    assert record.attempts == 0
    assert b.counts["acquired:reassigned"] == 1
    assert b.counts["acquired:expired"] == 0


def test_zombie_commit_before_takeover_is_adopted() -> None:
    world = World()
    a = world.start("a", planner=planner_of(1))
    world.run_until(lambda: a.owned == {"s00"})
    b = world.start("b", planner=planner_of(1))
    last, last_rev = world.record("s00")
    a.kill()  # a is now a zombie: paused, its lease runs out

    def zombie_commits_first() -> None:
        late = attrs.evolve(last, watermark=42, state=b"zombie")
        assert isinstance(
            world.write("update", DURABLE, KEYS.split("s00"), encode(late), last_rev), Won
        )

    b.before_next("update", DURABLE, KEYS.split("s00"), zombie_commits_first)
    world.run_until(lambda: bool(b.of(Gained, "s00")), within=3 * LEASE)
    (gained,) = b.of(Gained, "s00")
    assert gained.progress == Progress(42, b"zombie")
    assert gained.epoch == 2
    record, _ = world.record("s00")
    assert record.attempts == 1  # the takeover counts once, though it took two tries


def test_zombie_commit_after_takeover_is_fenced() -> None:
    world = World()
    a = world.start("a", planner=planner_of(1))
    world.run_until(lambda: a.owned == {"s00"})
    a.freeze()  # a is paused: it hears nothing of what follows
    record, revision = world.record("s00")
    lease = world.get(*a.lease_key("s00"))
    assert lease is not None
    thief = LeaseRecord(owner="thief", nonce="n", epoch=record.epoch + 1)
    assert isinstance(
        world.write("update", a.lease_key("s00")[0], lease.key, encode(thief), lease.revision), Won
    )
    taken = attrs.evolve(record, epoch=record.epoch + 1, owner="thief")
    assert isinstance(
        world.write("update", DURABLE, KEYS.split("s00"), encode(taken), revision), Won
    )
    commit = a.commit("s00", Progress(99))
    world.settle()
    a.thaw()
    world.run_until(lambda: commit.done and bool(a.of(Lost)), within=LEASE)
    assert isinstance(commit.error, Fenced)
    after, _ = world.record("s00")
    assert after == taken  # nothing of the zombie's commit landed
    assert a.of(Lost) == [Lost("s00", "fenced")]


def test_maybe_landed_commit_is_adopted() -> None:
    world = World()
    a = world.start("a", planner=planner_of(1))
    world.run_until(lambda: a.owned == {"s00"})
    a.deafen(DURABLE, "")  # a hears nothing of its own commit landing
    a.lose_reply("update", DURABLE, KEYS.split("s00"))
    with pytest.raises(StoreUnavailable, match="may or may not have landed"):
        world.wait(a.commit("s00", Progress(5, b"x")))
    world.wait(a.commit("s00", Progress(5, b"x")))  # the retry finds its own write
    a.hear(DURABLE)
    world.settle()
    record, _ = world.record("s00")
    assert record.watermark == 5
    assert a.owned == {"s00"}
    assert not a.of(Lost)
    assert ("commit", "lost") in [(op, how) for _, op, how in a.writes]


def test_a_maybe_landed_commit_whose_read_back_fails_is_unknown_not_fenced() -> None:
    # The reply to a landed commit is lost and the next read of the record fails: the retry's
    # CAS loses to the first write, and its read-back cannot say whose write that was. The
    # outcome is unknown (StoreUnavailable, the split still held), never Fenced; the next
    # retry reads the record back and adopts its own write.
    world = World()
    a = world.start("a", planner=planner_of(1))
    world.run_until(lambda: a.owned == {"s00"})
    a.deafen(DURABLE, "")
    a.lose_reply("update", DURABLE, KEYS.split("s00"))
    with pytest.raises(StoreUnavailable, match="may or may not have landed"):
        world.wait(a.commit("s00", Progress(5, b"x")))
    a.fail_next_read("get", DURABLE, KEYS.split("s00"))
    with pytest.raises(StoreUnavailable, match="may have landed"):
        world.wait(a.commit("s00", Progress(5, b"x")))
    assert a.owned == {"s00"}
    assert not a.of(Lost)
    world.wait(a.commit("s00", Progress(5, b"x")))  # the store answers: its own write
    a.hear(DURABLE)
    world.settle()
    record, _ = world.record("s00")
    assert (record.watermark, record.state) == (5, b"x")
    assert a.owned == {"s00"}
    assert not a.of(Lost)


def test_a_new_commit_after_an_unknown_outcome_builds_on_the_write_that_landed() -> None:
    # The reply to a landed commit is lost; the handler does not retry it but commits new
    # progress. Its CAS loses to its own earlier write, which the view has not seen: that is
    # not another's write (same tenancy, at or past what the view knew), so the commit builds
    # on it and lands. It used to raise Fenced ("another worker took it over") and drop the
    # split, though no one else ever held it.
    world = World()
    a = world.start("a", planner=planner_of(1))
    world.run_until(lambda: a.owned == {"s00"})
    a.deafen(DURABLE, "")
    a.lose_reply("update", DURABLE, KEYS.split("s00"))
    with pytest.raises(StoreUnavailable, match="may or may not have landed"):
        world.wait(a.commit("s00", Progress(5, b"x")))
    world.wait(a.commit("s00", Progress(7, b"y")))
    a.hear(DURABLE)
    world.settle()
    record, _ = world.record("s00")
    assert (record.watermark, record.state, record.owner) == (7, b"y", "a")
    assert a.owned == {"s00"}
    assert not a.of(Lost)
    # And a split's write whose reply was lost is kept by the commit built on it.
    a.deafen(DURABLE, "")
    a.lose_reply("update", DURABLE, KEYS.split("s00"))
    with pytest.raises(StoreUnavailable, match="may or may not have landed"):
        world.wait(a.split("s00", b"0:5", b"5:9"))
    world.wait(a.commit("s00", Progress(8, b"z")))
    a.hear(DURABLE)
    world.settle()
    record, _ = world.record("s00")
    assert (record.watermark, record.descriptor, record.splits) == (8, b"0:5", 1)
    assert len(record.residuals) == 1
    assert not a.of(Lost)


def test_a_record_gone_back_below_what_the_owner_knew_is_still_fenced() -> None:
    # Building on an unseen write of one's own tenancy is for a write the view has not seen;
    # a record back at an older write of the same tenancy (a store that lost an acknowledged
    # commit) is not one: the commit does not build on it, and reports Fenced as before.
    world = World()
    a = world.start("a", planner=planner_of(1))
    world.run_until(lambda: a.owned == {"s00"})
    world.wait(a.commit("s00", Progress(5, b"x")))
    older, _ = world.record("s00")
    world.wait(a.commit("s00", Progress(6, b"y")))
    a.deafen(DURABLE, "")
    _, revision = world.record("s00")
    # The acknowledged 6 is lost: the older value comes back under a new revision.
    world.write("update", DURABLE, KEYS.split("s00"), encode(older), revision)
    with pytest.raises(Fenced):
        world.wait(a.commit("s00", Progress(7, b"z")))
    record, _ = world.record("s00")
    assert record.watermark == 5


def test_a_maybe_landed_session_renewal_is_adopted() -> None:
    # On a per-key store the presence record is the session every lease names: a renewal
    # whose reply was lost (it landed) is read back at the next beat and adopted, and no
    # tenancy is lost for it.
    world = World()
    a = world.start("a", planner=planner_of(1))
    world.run_until(lambda: a.owned == {"s00"})
    a.lose_reply("update", EPHEMERAL, KEYS.worker("a"))
    world.run_for(3 * LEASE)
    world.settle()
    assert a.owned == {"s00"}
    assert not a.of(Lost)
    outcomes = [how for _, op, how in a.writes if op == "presence-renew"]
    assert "error" in outcomes
    assert "lost" in outcomes  # the next renewal lost, read back, and adopted its own write
    assert outcomes[-1] == "won"


def test_a_session_that_lapsed_ends_every_tenancy_before_the_worker_announces_again() -> None:
    # The presence record expired (no renewal landed for a whole lease): every lease naming
    # it expired too, and a peer may be taking them over. The worker ends those tenancies
    # (Lost, starved) before it writes a presence record that would make them look alive.
    world = World()
    a = world.start("a", planner=planner_of(2))
    world.run_until(lambda: a.owned == {"s00", "s01"})
    assert world.get(EPHEMERAL, KEYS.worker("a")) is not None
    a.partition()
    world.run_for(LEASE + 0.1)
    assert world.get(EPHEMERAL, KEYS.worker("a")) is None  # the session is gone
    world.run_until(lambda: len(a.of(Lost)) == 2, within=LEASE)
    assert {lost.split for lost in a.of(Lost)} == {"s00", "s01"}
    assert {lost.reason for lost in a.of(Lost)} == {"starved"}
    ended = max(a.time_of(lost) for lost in a.of(Lost))
    a.heal()
    world.run_until(lambda: world.get(EPHEMERAL, KEYS.worker("a")) is not None, within=LEASE)
    assert world.now >= ended


def test_thief_on_a_held_lease_means_lost_fenced() -> None:
    world = World()
    a = world.start("a", planner=planner_of(1))
    world.run_until(lambda: a.owned == {"s00"})
    lease = world.get(*a.lease_key("s00"))
    assert lease is not None
    thief = LeaseRecord(owner="thief", nonce="n", epoch=9)
    world.write("update", a.lease_key("s00")[0], lease.key, encode(thief), lease.revision)
    world.run_until(lambda: bool(a.of(Lost, "s00")), within=1)
    assert a.of(Lost) == [Lost("s00", "fenced")]


def test_no_renewal_for_a_whole_lease_self_fences() -> None:
    world = World()
    a = world.start("a", planner=planner_of(1))
    world.run_until(lambda: a.owned == {"s00"})
    cut_at = world.now
    a.partition()
    world.run_until(lambda: bool(a.of(Lost, "s00")), within=2 * LEASE)
    (lost,) = a.of(Lost, "s00")
    assert lost.reason == "starved"
    assert a.time_of(lost) - cut_at <= LEASE + 1.2 * LEASE / 3


def test_watermark_regression_is_fatal() -> None:
    world = World()
    a = world.start("a", planner=planner_of(1), expect_error=True)
    world.run_until(lambda: a.owned == {"s00"})
    world.wait(a.commit("s00", Progress(10)))
    with pytest.raises(FatalCoordinationError, match="from 10 to 5"):
        world.wait(a.commit("s00", Progress(5)))
    assert a.stopped
    assert isinstance(a.error, FatalCoordinationError)
    record, _ = world.record("s00")
    assert record.watermark == 10


def fail_first_split(worker: Worker, event: object) -> None:
    if isinstance(event, Gained):
        if event.split == "s00":
            worker.fail(event.split, "poison")
        else:
            worker.commit(event.split, Progress(1, completed=True))


def test_quarantine_at_max_attempts_and_stalled_verdict() -> None:
    world = World()
    a = world.start(
        "a", planner=planner_of(3), cfg=config(max_attempts=2), on_event=fail_first_split
    )
    world.run_until(lambda: bool(a.of(Stalled)), within=3 * LEASE)
    assert a.of(Stalled) == [Stalled(completed=2, quarantined=1)]
    assert a.of(Quarantined) == [Quarantined("s00", 2)]
    assert len(a.of(Gained, "s00")) == 2  # a failure hands back: re-claimed, no attempt
    assert not a.of(AllComplete)
    record, _ = world.record("s00")
    assert record.attempts == 2


def test_expiry_takeover_at_the_cap_quarantines_instead() -> None:
    world = World()
    cfg = config(max_attempts=1)
    a = world.start("a", planner=planner_of(1), cfg=cfg)
    world.run_until(lambda: a.owned == {"s00"})
    b = world.start("b", planner=planner_of(1), cfg=cfg)
    a.kill()
    world.run_until(lambda: bool(b.of(Stalled)), within=3 * LEASE)
    assert b.of(Stalled) == [Stalled(completed=0, quarantined=1)]
    assert b.of(Quarantined) == [Quarantined("s00", 1)]
    assert not b.of(Gained)


def test_all_complete_only_when_every_split_completed() -> None:
    world = World()
    a = world.start("a", planner=planner_of(3))
    world.run_until(lambda: len(a.owned) == 3)
    world.wait(a.commit("s00", Progress(1, completed=True)))
    world.wait(a.commit("s01", Progress(1, completed=True)))
    world.wait(a.commit("s02", Progress(1)))
    world.run_for(3 * LEASE)
    assert not a.of(AllComplete)
    assert not a.of(Stalled)
    world.wait(a.commit("s02", Progress(2, completed=True)))
    world.run_until(lambda: bool(a.of(AllComplete)), within=1)
    world.run_for(LEASE)
    assert len(a.of(AllComplete)) == 1  # latched
    # A completed commit hands its lease back.
    assert world.listing(EPHEMERAL, KEYS.split_prefix) == []


def test_an_open_plan_has_no_verdict() -> None:
    world = World()
    a = world.start("a", planner=planner_of(2, final=False), on_event=complete_on_gain)
    world.run_for(5 * LEASE)
    assert len(a.of(Gained)) == 2
    assert not a.of(AllComplete)


def test_gained_carries_descriptor_weight_and_progress() -> None:
    world = World()
    a = world.start("a", planner=planner_of(1, weight=lambda i: 5))
    world.run_until(lambda: bool(a.of(Gained, "s00")))
    assert a.of(Gained, "s00") == [Gained("s00", 1, Progress(None, b"", False), b"d0", 5)]


def test_progress_record_decodes_after_commit() -> None:
    world = World()
    a = world.start("a", planner=planner_of(1))
    world.run_until(lambda: a.owned == {"s00"})
    world.wait(a.commit("s00", Progress(12, b"\x00\xff")))
    record, _ = world.record("s00")
    assert (record.owner, record.epoch, record.watermark, record.state) == ("a", 1, 12, b"\x00\xff")


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
        descriptor=b"primary", splits=1,
        residuals=(Residual(id="s1.rabcdefghijklm", descriptor=b"rest", weight=1),),
        reason="an earlier failure", retry_at_ms=1234,
    )  # fmt: skip
    # A field added to the record must be added to committed() too: this list breaks first.
    assert [f.name for f in attrs.fields(ProgressRecord)] == [
        "schema", "id", "epoch", "status", "owner", "attempts", "watermark", "state",
        "completed", "written_at_ms", "advanced", "owner_nonce", "descriptor", "splits",
        "residuals", "reason", "retry_at_ms",
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
