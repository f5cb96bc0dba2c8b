"""A new leader's listing, folded by its direct path, leaves what apply_put would have left.

The listing fold reads the canonical spec and progress records of splits never folded by
their prefix, builds them slot by slot, and folds each run of progress records of splits never
folded in one call, each as its split's first
(:meth:`~spate._core.view.split_table.SplitTable.fold_first_run`). These pin that to the
general path: the same records, the same notices, the same view (revisions and their order
included), for canonical records, records of other writers, unreadable ones (held aside with
the same reason) and splits already known.
"""

from __future__ import annotations

import pickle

import attrs
import pytest

from spate._core.records import (
    Keys,
    LeaseRecord,
    ProgressRecord,
    SpecRecord,
    Status,
    canonical_progress,
    canonical_spec,
    decode,
    encode,
)
from spate._core.view.changes import PlacementChanges
from spate._core.view.view import View
from spate._store import Entry, Keyspace

KEYS = Keys("job")
DURABLE, EPHEMERAL = Keyspace.DURABLE, Keyspace.EPHEMERAL

PROGRESS = [
    ProgressRecord(id="a"),
    ProgressRecord(id="b", epoch=3, owner="w1", owner_nonce="n1", attempts=2, advanced=True),
    ProgressRecord(id="c", status=Status.COMPLETED, completed=True, watermark=7, state=b"\n\x00"),
    ProgressRecord(id="d", status=Status.QUARANTINED, attempts=9, written_at_ms=1764530000000),
    ProgressRecord(id="e", owner="w\u00e9", state=b"s"),  # escaped on the wire: not canonical
    ProgressRecord(id="f", reason="failed", retry_at_ms=5),  # a rare field: the general path
]
SPECS = [
    SpecRecord(id="a"),
    SpecRecord(id="b", generation=2, weight=5, descriptor=b"\x00\xff", locality="zone-a"),
    SpecRecord(id="c", descriptor=b"abc"),
    SpecRecord(id="d", locality="z\u00e9"),  # escaped: not canonical
    SpecRecord(id="e", parent="a"),  # a residual's: the general path
]
OLD_PROGRESS = (
    b'{"schema":1,"id":"g","epoch":2,"status":"runnable","owner":"w","attempts":1,'
    b'"watermark":5,"state":"","completed":false,"written_at_ms":0}'
)


@pytest.mark.parametrize("record", PROGRESS)
def test_a_canonical_progress_record_is_the_record_init_builds(record: ProgressRecord) -> None:
    read = canonical_progress(encode(record), record.id)
    if read is None:
        return  # not canonical (the general path reads it: test_record_fast_path)
    assert read == record
    assert repr(read) == repr(record)
    assert hash(read) == hash(record)
    assert attrs.asdict(read) == attrs.asdict(record)
    assert pickle.loads(pickle.dumps(read)) == record
    assert attrs.evolve(read, epoch=read.epoch + 1) == attrs.evolve(record, epoch=record.epoch + 1)


@pytest.mark.parametrize("spec", SPECS)
def test_a_canonical_spec_is_the_record_init_builds(spec: SpecRecord) -> None:
    read = canonical_spec(encode(spec), spec.id)
    if read is None:
        return
    assert read == spec
    assert repr(read) == repr(spec)
    assert hash(read) == hash(spec)
    assert attrs.asdict(read) == attrs.asdict(spec)
    assert pickle.loads(pickle.dumps(read)) == spec


def test_the_canonical_paths_read_the_common_records() -> None:
    """(So the comparisons above are not vacuous.)"""
    assert all(canonical_progress(encode(r), r.id) is not None for r in PROGRESS[:4])
    assert all(canonical_spec(encode(s), s.id) is not None for s in SPECS[:3])


def _listing() -> list[Entry]:
    entries = [Entry(KEYS.spec(s.id), encode(s), 10 + n) for n, s in enumerate(SPECS)]
    entries += [Entry(KEYS.split(r.id), encode(r), 20 + n) for n, r in enumerate(PROGRESS)]
    entries += [
        Entry(KEYS.split("g"), OLD_PROGRESS, 30),
        Entry(KEYS.split("h"), b"garbage", 31),  # unreadable: held aside
        Entry(KEYS.spec("i"), b'{"schema":1,"id":"i","weight":"x"}', 32),  # unreadable spec
        Entry(KEYS.split("i"), encode(ProgressRecord(id="i")), 33),
        Entry(KEYS.split("j"), encode(ProgressRecord(id="k")), 34),  # names another split
        Entry(KEYS.split("k"), encode(ProgressRecord(id="k", epoch=1, owner="w2")), 35),
        Entry(KEYS.split("known"), encode(ProgressRecord(id="known", epoch=4)), 36),
    ]
    return sorted(entries, key=lambda e: e.key)


def _view() -> View:
    """A follower's view before it leads: a split known, a lease seen before its record."""
    view = View(KEYS, max_attempts=3)
    view.apply_put(DURABLE, Entry(KEYS.split("known"), encode(ProgressRecord(id="known")), 2))
    lease = LeaseRecord(owner="w2", nonce="n2", epoch=1)
    view.apply_put(EPHEMERAL, Entry(KEYS.split("k"), encode(lease), 3))
    return view


def _state(view: View) -> object:
    return (
        view.splits,
        view.revisions.known,
        view.revisions.tombs,
        view.seq,
        view.tallies,
        view.near_quarantine,
        view._splits.unreadable,
        view.take_spec_arrivals(),
    )


def test_a_listing_folds_as_its_entries_put_one_by_one_would() -> None:
    listed, by_put = _view(), _view()
    since = listed.seq
    notices = listed.apply_listing(DURABLE, _listing(), since=since)
    expected = [n for e in _listing() for n in by_put.apply_put(DURABLE, e)]
    assert notices == expected
    assert _state(listed) == _state(by_put)
    # The unreadable records are held aside, saying why, as apply_put holds them.
    assert listed.splits["h"].progress.status is Status.QUARANTINED
    assert "unreadable record job.split.h" in listed.splits["h"].progress.reason
    assert listed.splits["i"].progress.status is Status.QUARANTINED
    assert listed.splits["j"].progress.status is Status.QUARANTINED  # the wrong split named
    assert listed.splits["k"].lease == decode(
        LeaseRecord, "k", encode(LeaseRecord(owner="w2", nonce="n2", epoch=1))
    )


def test_a_listing_while_a_record_is_held_aside_folds_as_puts_would() -> None:
    """With a split held aside, every first progress record takes the general fold."""
    listed, by_put = _view(), _view()
    for view in (listed, by_put):
        view.apply_put(DURABLE, Entry(KEYS.spec("z"), b"garbage", 4))
    entries = _listing()
    notices = listed.apply_listing(DURABLE, entries, since=listed.seq)
    assert notices == [n for e in entries for n in by_put.apply_put(DURABLE, e)]
    assert _state(listed) == _state(by_put)


def _new_leaders_view() -> tuple[View, PlacementChanges]:
    """A view with a split known and nothing waiting: runs of new splits fold in one call."""
    changes = PlacementChanges()
    changes.track()
    view = View(KEYS, max_attempts=3, changes=changes)
    view.apply_put(DURABLE, Entry(KEYS.split("known"), encode(ProgressRecord(id="known")), 2))
    return view, changes


def _runs() -> list[Entry]:
    """Specs first, then progress records in runs, broken by the entries that end a run."""
    near = ProgressRecord(id="n", attempts=2, epoch=2, owner="w1")  # one charged takeover left
    records = [*PROGRESS[:4], near, ProgressRecord(id="m", attempts=2, advanced=True)]
    entries = [Entry(KEYS.spec(s.id), encode(s), 10 + n) for n, s in enumerate(SPECS)]
    entries += [Entry(KEYS.split(r.id), encode(r), 20 + n) for n, r in enumerate(records)]
    entries += [
        Entry(KEYS.split("g"), OLD_PROGRESS, 30),  # not canonical: ends a run
        Entry(KEYS.split("p"), encode(ProgressRecord(id="p")), 31),
        Entry(KEYS.spec("p"), encode(SpecRecord(id="p", weight=2)), 32),  # after its record
        Entry(KEYS.split("q"), encode(ProgressRecord(id="q")), 33),
        Entry(KEYS.split("known"), encode(ProgressRecord(id="known", epoch=4)), 34),
        Entry(KEYS.split("r"), encode(ProgressRecord(id="r", status=Status.QUARANTINED)), 35),
    ]
    return entries  # in this order, not sorted: a spec after its record, a known split between


@pytest.mark.parametrize("order", ["listed", "sorted"])
def test_runs_of_new_splits_fold_as_their_puts_one_by_one_would(order: str) -> None:
    """The run fold (every part of it once a run) leaves the view a put each would leave."""
    (listed, listed_changes), (by_put, put_changes) = _new_leaders_view(), _new_leaders_view()
    entries = _runs() if order == "listed" else sorted(_runs(), key=lambda e: e.key)
    notices = listed.apply_listing(DURABLE, entries, since=listed.seq)
    assert notices == [n for e in entries for n in by_put.apply_put(DURABLE, e)]
    assert _state(listed) == _state(by_put)
    assert list(listed.revisions.known[DURABLE].items()) == list(
        by_put.revisions.known[DURABLE].items()
    )  # the fold order too (each key's sequence number)
    assert listed_changes.owed
    assert listed_changes.take_placement_changes() == put_changes.take_placement_changes()
    assert "n" in listed.near_quarantine
    assert "m" not in listed.near_quarantine
    assert listed.splits["p"].spec == SpecRecord(id="p", weight=2)
