"""The folded view: stale-echo guards, pending records, listings, and tallies (properties)."""

from __future__ import annotations

import logging

import pytest
from hypothesis import given
from hypothesis import strategies as st

from spate._core.membership.handover import handed_over
from spate._core.records import (
    AssignmentRecord,
    Keys,
    LeaseRecord,
    PlanRecord,
    PresenceRecord,
    ProgressRecord,
    SpecRecord,
    Status,
    encode,
)
from spate._core.view.view import AssignmentGone, LeaseChanged, LeaseGone, ProgressChanged, View
from spate.store import Entry, Keyspace

KEYS = Keys("job")
DURABLE, EPHEMERAL = Keyspace.DURABLE, Keyspace.EPHEMERAL


def progress(split: str, status: Status = Status.RUNNABLE, **kw: object) -> bytes:
    return encode(ProgressRecord(id=split, status=status, **kw))  # type: ignore[arg-type]


def lease(owner: str, epoch: int = 1, nonce: str = "n") -> bytes:
    return encode(LeaseRecord(owner=owner, nonce=nonce, epoch=epoch))


def new_view() -> View:
    return View(KEYS, max_attempts=4)


def test_lease_seen_before_its_progress_record_is_attached_when_the_record_arrives() -> None:
    view = new_view()
    view.apply_put(EPHEMERAL, Entry(KEYS.split("a"), lease("w1"), 5))
    assert "a" not in view.splits
    view.apply_put(DURABLE, Entry(KEYS.split("a"), progress("a", owner="w1", epoch=1), 3))
    assert view.splits["a"].lease is not None
    assert view.splits["a"].current_owner == "w1"


def test_spec_seen_before_its_progress_record_is_attached() -> None:
    view = new_view()
    spec = encode(SpecRecord(id="a", weight=3, descriptor=b"d"))
    view.apply_put(DURABLE, Entry(KEYS.spec("a"), spec, 2))
    view.apply_put(DURABLE, Entry(KEYS.split("a"), progress("a"), 3))
    assert view.splits["a"].spec is not None
    assert view.splits["a"].spec.weight == 3


def test_stale_echo_of_a_put_is_ignored() -> None:
    view = new_view()
    view.apply_put(DURABLE, Entry(KEYS.split("a"), progress("a", epoch=2), 9))
    assert view.apply_put(DURABLE, Entry(KEYS.split("a"), progress("a", epoch=1), 8)) == []
    assert view.splits["a"].progress.epoch == 2


def test_delete_older_than_the_held_revision_is_ignored() -> None:
    view = new_view()
    view.apply_put(EPHEMERAL, Entry(KEYS.split("a"), lease("w1"), 4))
    view.apply_put(DURABLE, Entry(KEYS.split("a"), progress("a"), 1))
    assert view.apply_delete(EPHEMERAL, KEYS.split("a"), 3) == []
    assert view.splits["a"].lease is not None
    assert view.apply_delete(EPHEMERAL, KEYS.split("a"), 6) == [LeaseGone("a", 6)]


def test_listing_cannot_resurrect_a_key_deleted_after_it_started() -> None:
    view = new_view()
    view.apply_put(DURABLE, Entry(KEYS.split("a"), progress("a"), 1))
    view.apply_put(EPHEMERAL, Entry(KEYS.split("a"), lease("w1"), 4))
    since = view.seq
    view.apply_delete(EPHEMERAL, KEYS.split("a"), 5)  # the watch saw the delete first
    view.apply_listing(EPHEMERAL, [Entry(KEYS.split("a"), lease("w1"), 4)], since=since)
    assert view.splits["a"].lease is None


def test_listing_absence_only_deletes_keys_learned_before_it_started() -> None:
    view = new_view()
    view.apply_put(DURABLE, Entry(KEYS.split("a"), progress("a"), 1))
    view.apply_put(DURABLE, Entry(KEYS.split("b"), progress("b"), 2))
    view.apply_put(EPHEMERAL, Entry(KEYS.split("a"), lease("w1"), 1))
    since = view.seq
    view.put_lease("b", LeaseRecord(owner="me", nonce="n", epoch=1), 2)  # own claim, in flight
    notices = view.apply_listing(EPHEMERAL, [], since=since)
    assert notices == [LeaseGone("a", None)]
    assert view.splits["b"].lease is not None


def test_durable_listing_prunes_only_assignment_records() -> None:
    view = new_view()
    view.apply_put(DURABLE, Entry(KEYS.split("a"), progress("a"), 1))
    view.apply_put(DURABLE, Entry(KEYS.assign("w1"), encode(AssignmentRecord(generation=1)), 2))
    notices = view.apply_listing(DURABLE, [], since=view.seq + 1)
    assert notices == [AssignmentGone("w1")]
    assert "a" in view.splits


def test_unreadable_assignment_is_skipped_and_presence_still_counts() -> None:
    view = new_view()
    assert view.apply_put(DURABLE, Entry(KEYS.assign("w1"), b"garbage", 2)) == []
    view.apply_put(EPHEMERAL, Entry(KEYS.worker("w2"), b"garbage", 3))
    assert "w2" in view.presence
    assert view.presence["w2"] is None


def test_probe_keys_and_foreign_keys_are_invisible() -> None:
    view = new_view()
    assert view.apply_put(DURABLE, Entry("job._probe.abc", b"probe", 1)) == []
    assert view.apply_put(DURABLE, Entry("other.split.a", b"x", 1)) == []
    assert view.splits == {}


def test_own_delete_of_an_unfolded_lease_blocks_its_resurrection() -> None:
    view = new_view()
    view.apply_put(DURABLE, Entry(KEYS.split("a"), progress("a"), 1))
    since = view.seq
    view.forget_own(EPHEMERAL, KEYS.split("a"), 7)
    view.apply_listing(EPHEMERAL, [Entry(KEYS.split("a"), lease("me"), 7)], since=since)
    assert view.splits["a"].lease is None


# -- property: tallies equal a recount, and a fresh listing makes the view exact -------------

SPLITS = ["a", "b", "c", "d"]
ops = st.lists(
    st.one_of(
        st.tuples(st.just("progress"), st.sampled_from(SPLITS), st.sampled_from(list(Status))),
        st.tuples(st.just("lease"), st.sampled_from(SPLITS), st.sampled_from(["w1", "w2"])),
        st.tuples(st.just("unlease"), st.sampled_from(SPLITS), st.just(None)),
        st.tuples(st.just("echo"), st.integers(0, 50), st.just(None)),
        st.tuples(st.just("list"), st.sampled_from([DURABLE, EPHEMERAL]), st.just(None)),
        st.tuples(st.just("drop"), st.integers(0, 50), st.just(None)),
    ),
    max_size=60,
)


@given(ops)
def test_tallies_always_equal_a_recount_and_listings_converge(steps: list[tuple]) -> None:  # type: ignore[type-arg]
    view = new_view()
    model: dict[Keyspace, dict[str, Entry]] = {DURABLE: {}, EPHEMERAL: {}}
    revision = {DURABLE: 0, EPHEMERAL: 0}
    history: list[tuple[Keyspace, Entry]] = []
    for op, arg, extra in steps:
        if op == "progress":
            revision[DURABLE] += 1
            entry = Entry(KEYS.split(arg), progress(arg, extra), revision[DURABLE])
            model[DURABLE][entry.key] = entry
            history.append((DURABLE, entry))
            view.apply_put(DURABLE, entry)
        elif op == "lease":
            revision[EPHEMERAL] += 1
            entry = Entry(KEYS.split(arg), lease(extra), revision[EPHEMERAL])
            model[EPHEMERAL][entry.key] = entry
            history.append((EPHEMERAL, entry))
            view.apply_put(EPHEMERAL, entry)
        elif op == "unlease":
            key = KEYS.split(arg)
            if key in model[EPHEMERAL]:
                revision[EPHEMERAL] += 1
                del model[EPHEMERAL][key]
                view.apply_delete(EPHEMERAL, key, revision[EPHEMERAL])
        elif op == "echo" and history:
            keyspace, entry = history[arg % len(history)]
            view.apply_put(keyspace, entry)
        elif op == "drop" and history:
            # A watch event that never arrived: model it by writing without telling the view.
            revision[EPHEMERAL] += 1
            key = KEYS.split(SPLITS[arg % len(SPLITS)])
            model[EPHEMERAL].pop(key, None)
        elif op == "list":
            view.apply_listing(
                arg, sorted(model[arg].values(), key=lambda e: e.key), since=view.seq
            )
        assert view.tallies == view.recount()
    for keyspace in (DURABLE, EPHEMERAL):
        view.apply_listing(keyspace, list(model[keyspace].values()), since=view.seq)
    assert view.tallies == view.recount()
    for split, state in view.splits.items():
        stored = model[DURABLE][KEYS.split(split)]
        assert state.progress_rev == stored.revision
        lease_entry = model[EPHEMERAL].get(KEYS.split(split))
        assert (state.lease is None) == (lease_entry is None)
        if lease_entry is not None:
            assert state.lease_rev == lease_entry.revision


def test_notices_report_progress_and_lease_changes() -> None:
    view = new_view()
    notices = view.apply_put(DURABLE, Entry(KEYS.split("a"), progress("a"), 1))
    assert isinstance(notices[0], ProgressChanged)
    assert notices[0].previous is None
    notices = view.apply_put(EPHEMERAL, Entry(KEYS.split("a"), lease("w1"), 1))
    assert isinstance(notices[0], LeaseChanged)


def test_a_departed_worker_is_handed_over_once_every_split_moved_on_or_nobody_is_left() -> None:
    view = new_view()
    for worker in ("me", "peer"):
        record = encode(PresenceRecord(nonce=worker, max_in_flight=4))
        view.apply_put(EPHEMERAL, Entry(KEYS.worker(worker), record, 1))
    view.apply_put(DURABLE, Entry(KEYS.split("a"), progress("a", owner="me", epoch=1), 2))
    view.apply_put(DURABLE, Entry(KEYS.split("b"), progress("b"), 3))
    # still its own, and handed back but not yet claimed: both are waited for
    assert not handed_over(view, "me", ["a"])
    assert not handed_over(view, "me", ["b"])
    view.apply_put(DURABLE, Entry(KEYS.split("a"), progress("a", owner="peer", epoch=2), 4))
    assert handed_over(view, "me", ["a"])
    assert not handed_over(view, "me", ["a", "b"])
    # a split finished, or quarantined, is not waited for; nor one the view never heard of
    view.apply_put(
        DURABLE, Entry(KEYS.split("b"), progress("b", Status.COMPLETED, completed=True), 5)
    )
    assert handed_over(view, "me", ["a", "b", "unknown"])
    view.apply_put(
        DURABLE, Entry(KEYS.split("c"), progress("c", Status.QUARANTINED, attempts=4), 6)
    )
    assert handed_over(view, "me", ["c"])
    # nobody else is present: nobody would take them, so there is nothing to wait for
    view.apply_put(DURABLE, Entry(KEYS.split("d"), progress("d", owner="me", epoch=1), 7))
    assert not handed_over(view, "me", ["d"])
    view.apply_delete(EPHEMERAL, KEYS.worker("peer"), 8)
    assert handed_over(view, "me", ["d"])


def test_a_departed_worker_does_not_wait_for_a_split_no_free_lane_will_take() -> None:
    # More splits than the fleet has lanes: a released split goes back to the pool, and
    # nobody takes it until a lane frees up. Waiting for it would only wait out the deadline.
    view = new_view()
    for worker in ("me", "peer"):
        record = encode(PresenceRecord(nonce=worker, max_in_flight=2))
        view.apply_put(EPHEMERAL, Entry(KEYS.worker(worker), record, 1))
    view.apply_put(DURABLE, Entry(KEYS.split("a"), progress("a"), 2))  # handed back by "me"
    assert not handed_over(view, "me", ["a"])  # the peer's share is not known yet

    def assign(*splits: str, revision: int) -> None:
        record = encode(AssignmentRecord(generation=1, splits=splits))
        view.apply_put(DURABLE, Entry(KEYS.assign("peer"), record, revision))

    assign("x", revision=3)
    assert not handed_over(view, "me", ["a"])  # a free lane: the leader may give it "a"
    assign("x", "a", revision=4)
    assert not handed_over(view, "me", ["a"])  # given to the peer: it claims "a" next
    assign("x", "y", revision=5)
    assert handed_over(view, "me", ["a"])  # the peer's lanes are full, and "a" is not its
    # a budget of 0 means the leader's default, which this view does not know: wait
    default = encode(PresenceRecord(nonce="peer", max_in_flight=0))
    view.apply_put(EPHEMERAL, Entry(KEYS.worker("peer"), default, 6))
    assert not handed_over(view, "me", ["a"])


# -- leases alive by session (stores with per-key TTLs) ----------------------------------------


def session_view() -> View:
    return View(KEYS, max_attempts=4, session_leases=True, own=("me", "my-nonce"))


def presence(nonce: str) -> bytes:
    return encode(PresenceRecord(nonce=nonce, max_in_flight=4))


def test_a_durable_lease_lives_exactly_as_long_as_its_owners_session() -> None:
    view = session_view()
    view.apply_put(DURABLE, Entry(KEYS.split("a"), progress("a", owner="w1", epoch=1), 3))
    view.apply_put(EPHEMERAL, Entry(KEYS.worker("w1"), presence("n"), 4))
    assert view.apply_put(DURABLE, Entry(KEYS.lease("a"), lease("w1"), 5))
    assert view.splits["a"].current_owner == "w1"
    # A renewal of the session changes nothing about the lease.
    assert not [
        n
        for n in view.apply_put(EPHEMERAL, Entry(KEYS.worker("w1"), presence("n"), 6))
        if isinstance(n, LeaseChanged | LeaseGone)
    ]
    # The session ends (its presence record deleted): the lease expires with it, and the key
    # stays behind only to be taken over by revision.
    notices = view.apply_delete(EPHEMERAL, KEYS.worker("w1"), 7)
    assert LeaseGone("a", None) in notices
    state = view.splits["a"]
    assert state.lease is None
    assert state.stale_lease is not None
    assert state.lease_key_rev == 5
    # A new session under another nonce (the pod restarted) does not bring it back.
    view.apply_put(EPHEMERAL, Entry(KEYS.worker("w1"), presence("n2"), 8))
    assert view.splits["a"].lease is None


def test_this_workers_own_lease_lives_with_it_and_an_unknown_session_is_not_assumed_alive() -> None:
    view = session_view()
    view.apply_put(DURABLE, Entry(KEYS.split("a"), progress("a"), 3))
    view.apply_put(DURABLE, Entry(KEYS.split("b"), progress("b"), 3))
    view.apply_put(DURABLE, Entry(KEYS.lease("a"), lease("me", nonce="my-nonce"), 5))
    view.apply_put(DURABLE, Entry(KEYS.lease("b"), lease("w9", nonce="x"), 6))
    assert view.splits["a"].lease is not None  # ours: alive while this worker runs
    assert view.splits["b"].lease is None  # its session was never seen: not assumed alive
    assert view.splits["b"].stale_lease is not None


def test_a_lease_of_the_earlier_layout_is_read_as_live_and_reported(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # An earlier release kept a per-key store's leases in the ephemeral keyspace, renewed per
    # split. Its worker holds the split: it is read as held, and the operator is told.
    view = session_view()
    view.apply_put(DURABLE, Entry(KEYS.split("a"), progress("a", owner="old", epoch=1), 3))
    view.apply_put(EPHEMERAL, Entry(KEYS.worker("old"), presence("n"), 4))
    with caplog.at_level(logging.ERROR, logger="spate.view"):
        view.apply_put(EPHEMERAL, Entry(KEYS.split("a"), lease("old"), 5))
        view.apply_put(EPHEMERAL, Entry(KEYS.split("a"), lease("old"), 6))
    assert view.splits["a"].current_owner == "old"
    assert view.splits["a"].lease is not None
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1  # once per split
    assert "Upgrade every worker of a job together" in errors[0].getMessage()


def test_an_unreadable_progress_record_holds_its_split_aside_until_a_readable_one_lands() -> None:
    view = new_view()
    view.apply_put(DURABLE, Entry(KEYS.split("a"), progress("a", epoch=3), 2))
    view.apply_put(DURABLE, Entry(KEYS.split("b"), progress("b"), 3))
    # Through the listing fold too (a new leader's listing reads progress records by prefix).
    view.apply_listing(DURABLE, [Entry(KEYS.split("a"), b"garbage", 4)], since=view.seq)
    held = view.splits["a"].progress
    assert held.status is Status.QUARANTINED
    assert held.reason.startswith("unreadable record job.split.a: ")
    assert held.epoch == 3  # the last epoch the view knew; nobody writes over a held split
    assert view.splits["a"].progress_rev == 4
    assert view.tallies == view.recount()
    assert (view.tallies.runnable, view.tallies.quarantined) == (1, 1)
    # A stale echo of the readable record does not bring it back; a rewrite over it does.
    view.apply_put(DURABLE, Entry(KEYS.split("a"), progress("a", epoch=3), 2))
    assert view.splits["a"].progress.status is Status.QUARANTINED
    view.apply_put(DURABLE, Entry(KEYS.split("a"), progress("a", epoch=4), 5))
    assert view.splits["a"].progress == ProgressRecord(id="a", epoch=4)
    assert view.tallies == view.recount()
    assert view.tallies.quarantined == 0


def test_an_unreadable_spec_holds_a_runnable_split_aside_but_not_a_finished_one() -> None:
    view = new_view()
    view.apply_put(DURABLE, Entry(KEYS.spec("a"), b"garbage", 1))
    view.apply_put(DURABLE, Entry(KEYS.split("a"), progress("a", epoch=2, attempts=1), 2))
    view.apply_put(DURABLE, Entry(KEYS.spec("b"), b"garbage", 3))
    view.apply_put(DURABLE, Entry(KEYS.split("b"), progress("b", Status.COMPLETED), 4))
    assert view.splits["a"].progress.status is Status.QUARANTINED
    assert view.splits["a"].progress.reason.startswith("unreadable record job.spec.a: ")
    assert view.splits["b"].progress.status is Status.COMPLETED
    # A commit of the holder lands on the record: still held aside while the spec is bad.
    view.apply_put(DURABLE, Entry(KEYS.split("a"), progress("a", epoch=2, watermark=5), 5))
    assert view.splits["a"].progress.status is Status.QUARANTINED
    # A readable spec written over the bad one: the split is itself again, record and all.
    notices = view.apply_put(DURABLE, Entry(KEYS.spec("a"), encode(SpecRecord(id="a")), 6))
    assert view.splits["a"].progress == ProgressRecord(id="a", epoch=2, watermark=5)
    assert [type(n) for n in notices] == [ProgressChanged]
    assert view.tallies == view.recount()


def test_an_unreadable_plan_record_keeps_the_last_readable_one_and_says_so() -> None:
    view = new_view()
    plan = PlanRecord(fingerprint="", generation=2)
    view.apply_put(DURABLE, Entry(KEYS.plan, encode(plan), 3))
    assert view.apply_put(DURABLE, Entry(KEYS.plan, b"garbage", 5)) == []
    assert view.plan == plan
    assert view.plan_rev == 3  # so no write built on it lands over the bytes it cannot read
    assert "job.plan" in (view.plan_unreadable or "")
    # An older readable write (a lagging listing) does not hide it; a repair does.
    view.apply_put(DURABLE, Entry(KEYS.plan, encode(plan), 4))
    assert "job.plan" in (view.plan_unreadable or "")
    view.apply_put(DURABLE, Entry(KEYS.plan, encode(plan), 6))
    assert view.plan_unreadable is None
    assert view.plan_rev == 6
