from __future__ import annotations

import json

import attrs
import pytest

from spate import ConfigError
from spate._core.records import (
    Finality,
    Keys,
    LeaderRecord,
    LeaseRecord,
    PlanRecord,
    PresenceRecord,
    ProgressRecord,
    SpecRecord,
    Status,
    VerdictRecord,
    decode,
    encode,
)
from spate.ops import (
    JobNotFound,
    RequeueRefused,
    list_jobs,
    read_status,
    requeue,
    requeue_all,
    require_job,
)
from spate.store import Keyspace, Revision, Session, Store, WriteResult
from spate_stores.memory import MemoryStore

JOB = "job-1"
KEYS = Keys(JOB)


async def seed_job(store: Store) -> None:
    await store.create(
        Keyspace.DURABLE,
        KEYS.plan,
        encode(PlanRecord(fingerprint="fp", generation=3, finality=Finality.FINAL, planned=3)),
    )
    for split, status, owner in [
        ("a", Status.COMPLETED, "w1"),
        ("b", Status.QUARANTINED, None),
        ("c", Status.RUNNABLE, "w2"),
    ]:
        await store.create(
            Keyspace.DURABLE, KEYS.spec(split), encode(SpecRecord(id=split, weight=2))
        )
        await store.create(
            Keyspace.DURABLE,
            KEYS.split(split),
            encode(
                ProgressRecord(
                    id=split, epoch=4, status=status, owner=owner, attempts=4, watermark=10
                )
            ),
        )
    await store.create(
        Keyspace.EPHEMERAL, KEYS.leader, encode(LeaderRecord(owner="w1", nonce="n", generation=3))
    )
    for worker in ("w1", "w2"):
        await store.create(
            Keyspace.EPHEMERAL,
            KEYS.worker(worker),
            encode(PresenceRecord(nonce="n", max_in_flight=4)),
        )
    await store.create(
        Keyspace.EPHEMERAL, KEYS.split("c"), encode(LeaseRecord(owner="w2", nonce="n", epoch=4))
    )


async def test_status_reports_plan_leader_workers_and_splits_quarantined_first() -> None:
    store = MemoryStore()
    await seed_job(store)
    await store.create(Keyspace.DURABLE, f"{JOB}.split.junk", b"not json")
    status = await read_status(store, JOB)
    assert status.exists
    assert (status.generation, status.finality, status.leader) == (3, "final", "w1")
    assert [w.instance for w in status.workers] == ["w1", "w2"]
    assert [w.holding for w in status.workers] == [0, 1]
    # The unreadable split is held aside: shown quarantined, the reason naming its key.
    assert [s.id for s in status.ordered_splits()] == ["b", "junk", "c", "a"]
    assert status.splits["junk"].reason.startswith(f"unreadable record {JOB}.split.junk: ")
    assert status.counts() == {"runnable": 1, "completed": 1, "quarantined": 2, "owned": 1}
    assert status.splits["c"].lease_owner == "w2"
    assert status.splits["a"].weight == 2
    assert status.unreadable == [f"{JOB}.split.junk"]
    document = json.loads(json.dumps(status.to_json()))
    assert document["splits"][0]["id"] == "b"


async def test_status_of_an_unknown_job_says_it_does_not_exist() -> None:
    status = await read_status(MemoryStore(), "nothing-here")
    assert not status.exists
    assert status.splits == {}


async def test_requeue_resets_attempts_bumps_the_epoch_and_clears_the_owner() -> None:
    store = MemoryStore()
    await seed_job(store)
    assert await requeue(store, JOB, ["b"]) == ["b"]
    entry = await store.get(Keyspace.DURABLE, KEYS.split("b"))
    assert entry is not None
    record = decode(ProgressRecord, entry.key, entry.value)
    assert (record.status, record.attempts, record.epoch, record.owner) == (
        Status.RUNNABLE,
        0,
        5,
        None,
    )
    assert record.watermark == 10  # progress is kept: the retry resumes


async def test_requeue_clears_the_published_verdict_so_a_worker_started_now_finishes_the_job() -> (
    None
):
    store = MemoryStore()
    await seed_job(store)
    entry = await store.get(Keyspace.DURABLE, KEYS.plan)
    assert entry is not None
    stalled = VerdictRecord(all_complete=False, completed=1, quarantined=1)
    plan = attrs.evolve(decode(PlanRecord, entry.key, entry.value), verdict=stalled)
    await store.update(Keyspace.DURABLE, KEYS.plan, encode(plan), entry.revision)
    assert await requeue(store, JOB, ["b"]) == ["b"]
    entry = await store.get(Keyspace.DURABLE, KEYS.plan)
    assert entry is not None
    assert decode(PlanRecord, entry.key, entry.value) == attrs.evolve(
        plan, verdict=None, updated_at_ms=decode(PlanRecord, entry.key, entry.value).updated_at_ms
    )


async def test_requeue_rewrites_a_final_plan_record_without_a_verdict_too() -> None:
    # A leader judging right now listed the job before the requeue: its verdict's CAS expects
    # the plan record's revision from before its listing, and this write makes it lose.
    store = MemoryStore()
    await seed_job(store)
    before = await store.get(Keyspace.DURABLE, KEYS.plan)
    assert before is not None
    await requeue(store, JOB, ["b"])
    after = await store.get(Keyspace.DURABLE, KEYS.plan)
    assert after is not None
    assert after.revision > before.revision
    assert decode(PlanRecord, after.key, after.value).verdict is None


async def test_requeue_refuses_splits_that_are_not_quarantined_and_changes_nothing_for_them() -> (
    None
):
    store = MemoryStore()
    await seed_job(store)
    before = await store.get(Keyspace.DURABLE, KEYS.split("a"))
    with pytest.raises(RequeueRefused, match=r"a \(it is completed, not quarantined\).*requeued b"):
        await requeue(store, JOB, ["a", "b"])
    assert await store.get(Keyspace.DURABLE, KEYS.split("a")) == before


async def test_requeue_refuses_an_unknown_split() -> None:
    store = MemoryStore()
    await seed_job(store)
    with pytest.raises(RequeueRefused, match="no such split"):
        await requeue(store, JOB, ["zzz"])


async def test_requeue_rejects_bad_arguments() -> None:
    store = MemoryStore()
    with pytest.raises(ConfigError):
        await requeue(store, JOB, [])
    with pytest.raises(ConfigError):
        await requeue(store, "bad.job", ["a"])


async def test_requeue_retries_when_a_concurrent_write_moves_the_record() -> None:
    store = MemoryStore()
    await seed_job(store)
    real_update = store.update
    raced = False

    async def racing_update(
        keyspace: Keyspace,
        key: str,
        value: bytes,
        expected: Revision,
        *,
        session: Session | None = None,
    ) -> WriteResult:
        nonlocal raced
        if not raced:
            raced = True
            entry = await store.get(keyspace, key)
            assert entry is not None
            await real_update(keyspace, key, entry.value, entry.revision)  # someone else writes
        return await real_update(keyspace, key, value, expected, session=session)

    store.update = racing_update  # type: ignore[method-assign]
    assert await requeue(store, JOB, ["b"]) == ["b"]
    assert raced


async def test_status_shows_each_splits_age_since_its_last_commit() -> None:
    from rich.console import Console

    from spate._cli.status_table import render_status
    from spate._core.records import now_ms

    store = MemoryStore()
    await seed_job(store)  # its records carry no time: no age
    written = now_ms() - 95_000  # a split whose owner stopped committing 95 s ago
    await store.create(
        Keyspace.DURABLE,
        KEYS.split("stuck"),
        encode(ProgressRecord(id="stuck", epoch=2, owner="w2", watermark=7, written_at_ms=written)),
    )
    status = await read_status(store, JOB)
    age = status.splits["stuck"].age(status.read_at_ms)
    assert age is not None
    assert 95 <= age < 120
    assert status.splits["a"].age(status.read_at_ms) is None
    document = json.loads(json.dumps(status.to_json()))
    ages = {s["id"]: s["age_s"] for s in document["splits"]}
    assert ages["a"] is None
    assert 95 <= ages["stuck"] < 120
    console = Console(width=200, record=True)
    console.print(render_status(status))
    row = next(line for line in console.export_text().splitlines() if "stuck" in line)
    assert "1m3" in row  # 1m35s, give or take the test's own time


async def test_status_shows_each_residual_under_its_parent_seeded_or_not() -> None:
    from rich.console import Console

    from spate._cli.status_table import render_status
    from spate._core.records import Residual

    store = MemoryStore()
    await seed_job(store)
    # "a" (completed) was split twice: its first residual seeded and split again, its
    # second not seeded yet (the leader writes a residual's records when it reads "a"'s).
    named = (
        Residual(id="a.r1", descriptor=b"50:75", weight=1),
        Residual(id="a.r2", descriptor=b"75:100", weight=1),
    )
    entry = await store.get(Keyspace.DURABLE, KEYS.split("a"))
    assert entry is not None
    parent = attrs.evolve(decode(ProgressRecord, entry.key, entry.value), residuals=named)
    await store.update(Keyspace.DURABLE, KEYS.split("a"), encode(parent), expected=entry.revision)
    for split, of, residuals in (("a.r1", "a", ("a.r1.r9",)), ("a.r1.r9", "a.r1", ())):
        await store.create(
            Keyspace.DURABLE, KEYS.spec(split), encode(SpecRecord(id=split, parent=of))
        )
        record = ProgressRecord(
            id=split,
            residuals=tuple(Residual(id=r, descriptor=b"x", weight=1) for r in residuals),
        )
        await store.create(Keyspace.DURABLE, KEYS.split(split), encode(record))
    status = await read_status(store, JOB)
    assert [s.id for s in status.ordered_splits()] == ["b", "c", "a", "a.r1", "a.r1.r9", "a.r2"]
    assert status.splits["a.r1"].parent == "a"
    assert status.splits["a"].residuals == ("a.r1", "a.r2")
    assert not status.splits["a.r2"].seeded
    assert status.splits["a.r2"].parent == "a"
    assert status.depth(status.splits["a.r1.r9"]) == 2
    document = json.loads(json.dumps(status.to_json()))
    listed = {s["id"]: s for s in document["splits"]}
    assert listed["a.r2"]["parent"] == "a"
    assert listed["a.r2"]["seeded"] is False
    assert listed["a"]["residuals"] == ["a.r1", "a.r2"]
    console = Console(width=200, record=True)
    console.print(render_status(status))
    lines = console.export_text().splitlines()
    assert any("└ a.r1 " in line for line in lines)
    assert any("  └ a.r1.r9" in line for line in lines)
    assert any("└ a.r2 (not seeded yet)" in line for line in lines)


async def test_status_shows_what_a_split_covers_now_and_which_split_a_residual_came_from() -> None:
    store = MemoryStore()
    await seed_job(store)
    # "d" was split: its record holds the primary; its residual's spec names it as parent.
    await store.create(
        Keyspace.DURABLE, KEYS.spec("d"), encode(SpecRecord(id="d", descriptor=b"0:100"))
    )
    await store.create(Keyspace.DURABLE, KEYS.split("d"), encode(ProgressRecord(id="d")))
    await store.create(
        Keyspace.DURABLE,
        KEYS.spec("d.r1"),
        encode(SpecRecord(id="d.r1", descriptor=b"60:100", parent="d")),
    )
    await store.create(Keyspace.DURABLE, KEYS.split("d.r1"), encode(ProgressRecord(id="d.r1")))
    entry = await store.get(Keyspace.DURABLE, KEYS.split("d"))
    assert entry is not None
    split = ProgressRecord(id="d", descriptor=b"0:60", splits=1)
    await store.update(Keyspace.DURABLE, KEYS.split("d"), encode(split), expected=entry.revision)
    status = await read_status(store, JOB)
    assert (status.splits["d"].descriptor, status.splits["d"].parent) == (b"0:60", None)
    assert (status.splits["d.r1"].descriptor, status.splits["d.r1"].parent) == (b"60:100", "d")
    document = json.loads(json.dumps(status.to_json()))  # descriptors are bytes: not shown
    parents = {s["id"]: s["parent"] for s in document["splits"]}
    assert parents["d.r1"] == "d"
    assert parents["a"] is None


async def test_status_shows_why_each_split_failed_and_a_held_split_as_held() -> None:
    store = MemoryStore()
    await seed_job(store)
    entry = await store.get(Keyspace.DURABLE, KEYS.split("b"))
    assert entry is not None
    record = attrs.evolve(decode(ProgressRecord, entry.key, entry.value), reason="bad row 7")
    await store.update(Keyspace.DURABLE, KEYS.split("b"), encode(record), entry.revision)
    status = await read_status(store, JOB)
    assert status.splits["b"].reason == "bad row 7"
    assert status.splits["a"].reason == ""
    assert [s.display_status for s in status.ordered_splits()] == [
        "quarantined",
        "held",
        "completed",
    ]
    document = json.loads(json.dumps(status.to_json()))
    assert [(s["id"], s["display_status"], s["reason"]) for s in document["splits"]] == [
        ("b", "quarantined", "bad row 7"),
        ("c", "held", ""),
        ("a", "completed", ""),
    ]


async def test_list_jobs_names_every_job_with_a_key_in_either_keyspace() -> None:
    store = MemoryStore()
    await seed_job(store)
    await store.create(Keyspace.EPHEMERAL, "starting.worker.w1", b"x")  # no plan yet
    await store.create(Keyspace.DURABLE, "not-a-job", b"x")  # another program's key
    assert await list_jobs(store) == [JOB, "starting"]


async def test_require_job_refuses_a_job_with_no_key_and_names_the_jobs_there() -> None:
    store = MemoryStore()
    await seed_job(store)
    await require_job(store, JOB)
    with pytest.raises(JobNotFound, match=r"^no job job-9 in this store \(jobs here: job-1\)"):
        await require_job(store, "job-9")
    with pytest.raises(JobNotFound, match=r"\(jobs here: none\)"):
        await require_job(MemoryStore(), JOB)


async def test_requeue_all_requeues_every_quarantined_split_and_nothing_else() -> None:
    store = MemoryStore()
    await seed_job(store)
    entry = await store.get(Keyspace.DURABLE, KEYS.split("c"))
    assert entry is not None
    record = attrs.evolve(decode(ProgressRecord, entry.key, entry.value), status=Status.QUARANTINED)
    await store.update(Keyspace.DURABLE, KEYS.split("c"), encode(record), entry.revision)
    completed = await store.get(Keyspace.DURABLE, KEYS.split("a"))
    assert await requeue_all(store, JOB) == ["b", "c"]
    status = await read_status(store, JOB)
    assert {s.id: s.status for s in status.splits.values()} == {
        "a": "completed", "b": "runnable", "c": "runnable",
    }  # fmt: skip
    assert await store.get(Keyspace.DURABLE, KEYS.split("a")) == completed
    assert await requeue_all(store, JOB) == []  # none left


async def test_requeue_all_of_a_job_that_does_not_exist_is_refused() -> None:
    with pytest.raises(JobNotFound, match="no job job-1 in this store"):
        await requeue_all(MemoryStore(), JOB)


async def add_running_split(store: Store, split: str, owner: str, weight: int = 2) -> None:
    """A runnable split of ``weight`` under a live lease of ``owner``."""
    await store.create(
        Keyspace.DURABLE, KEYS.spec(split), encode(SpecRecord(id=split, weight=weight))
    )
    progress = ProgressRecord(id=split, epoch=1, status=Status.RUNNABLE, owner=owner)
    await store.create(Keyspace.DURABLE, KEYS.split(split), encode(progress))
    lease = LeaseRecord(owner=owner, nonce="n", epoch=1)
    await store.create(Keyspace.EPHEMERAL, KEYS.split(split), encode(lease))


async def set_presence(store: Store, worker: str, record: PresenceRecord) -> None:
    entry = await store.get(Keyspace.EPHEMERAL, KEYS.worker(worker))
    if entry is None:
        await store.create(Keyspace.EPHEMERAL, KEYS.worker(worker), encode(record))
    else:
        await store.update(Keyspace.EPHEMERAL, KEYS.worker(worker), encode(record), entry.revision)


async def test_status_shows_each_workers_load_capacity_and_band_and_each_splits_load() -> None:
    from rich.console import Console

    from spate._cli.status_table import render_status
    from spate._core.records import SplitLoad

    # The leader's rules, by hand: w2 holds c (named, 20/s) and f (its one other trusted
    # split: 6/s); w3 holds d (6/s); w1 holds e, measured but not trusted yet, which counts at
    # the job's mean per unit of weight: (20 + 6 + 6) / 6 per weight, times e's weight 2.
    store = MemoryStore()
    await seed_job(store)
    await add_running_split(store, "d", "w3")
    await add_running_split(store, "e", "w1")
    await add_running_split(store, "f", "w2")
    await set_presence(store, "w1", PresenceRecord(nonce="n", max_in_flight=4, untrusted=1))
    await set_presence(
        store, "w2",
        PresenceRecord(
            nonce="n", max_in_flight=4, capacity=2.0, loads=(SplitLoad(split="c", rate=20.0),),
            other_splits=1, other_load=6.0,
        ),
    )  # fmt: skip
    w3 = PresenceRecord(nonce="n", max_in_flight=4, loads=(SplitLoad(split="d", rate=6.0),))
    await set_presence(store, "w3", w3)
    status = await read_status(store, JOB, load_band=0.2)
    by_name = {w.instance: w for w in status.workers}
    e = 32.0 / 6.0 * 2
    assert by_name["w1"].load == pytest.approx(e)
    assert (by_name["w2"].load, by_name["w2"].capacity) == (26.0, 2.0)
    assert by_name["w3"].load == 6.0
    total = e + 26.0 + 6.0
    assert status.load_mean() == pytest.approx(total / 4.0)
    # each worker's mean is its share by capacity
    assert by_name["w2"].mean == pytest.approx(total / 2.0)
    assert status.load_ratio(by_name["w1"]) == pytest.approx(1.0)
    assert status.load_ratio(by_name["w2"]) == pytest.approx(26.0 / (total / 2.0))
    assert status.splits["c"].load == 20.0
    assert status.splits["f"].load == 6.0  # its owner's other trusted split
    assert status.splits["e"].load is None  # untrusted
    assert status.splits["a"].load is None  # completed
    document = json.loads(json.dumps(status.to_json()))
    assert document["load_band"] == 0.2
    workers = {w["instance"]: w for w in document["workers"]}
    assert workers["w2"]["load"] == 26.0
    assert workers["w2"]["load_ratio"] == pytest.approx(26.0 / (total / 2.0), abs=1e-4)
    assert {s["id"]: s["load"] for s in document["splits"]}["c"] == 20.0
    console = Console(width=120, record=True)
    console.print(render_status(status))
    text = console.export_text()
    assert "band ±20%" in text
    assert text.count("outside the band") == 2  # w2 at 1.22x, w3 at 0.56x
    assert "hottest splits" in text


async def test_status_counts_a_moved_split_at_the_load_the_leader_carried_across_the_move() -> None:
    from spate._core.records import SplitLoad

    # The leader (w1) moved c to w2, whose own measurement of it is not trusted yet: the
    # leader counts it at the load it carried across the move, and publishes that load.
    store = MemoryStore()
    await seed_job(store)
    await add_running_split(store, "d", "w1")
    await set_presence(
        store, "w1",
        PresenceRecord(
            nonce="n", max_in_flight=4, loads=(SplitLoad(split="d", rate=8.0),),
            carried=(SplitLoad(split="c", rate=8.0), SplitLoad(split="a", rate=3.0)),
        ),
    )  # fmt: skip
    await set_presence(store, "w2", PresenceRecord(nonce="n", max_in_flight=4, untrusted=1))
    status = await read_status(store, JOB)
    by_name = {w.instance: w for w in status.workers}
    assert by_name["w2"].load == 8.0  # not the mean-per-weight guess, not nothing
    assert status.splits["c"].load == 8.0
    assert status.splits["a"].load is None  # completed: a carried load no longer counts
    assert [status.load_ratio(w) for w in status.workers] == [1.0, 1.0]


async def test_status_shows_a_finished_jobs_verdict() -> None:
    from rich.console import Console

    from spate._cli.status_table import render_status

    store = MemoryStore()
    await seed_job(store)
    running = await read_status(store, JOB)
    assert (running.verdict, running.outcome()) == (None, None)
    console = Console(width=80, record=True)
    console.print(render_status(running))
    assert "verdict" not in console.export_text()
    entry = await store.get(Keyspace.DURABLE, KEYS.plan)
    assert entry is not None
    plan = decode(PlanRecord, entry.key, entry.value)
    verdict = VerdictRecord(all_complete=False, completed=2, quarantined=1)
    await store.update(
        Keyspace.DURABLE, KEYS.plan, encode(attrs.evolve(plan, verdict=verdict)), entry.revision
    )
    status = await read_status(store, JOB)
    assert status.verdict == verdict
    assert status.outcome() == "stalled: 2 completed, 1 quarantined"
    assert json.loads(json.dumps(status.to_json()))["verdict"] == {
        "all_complete": False, "completed": 2, "quarantined": 1,
    }  # fmt: skip
    console = Console(width=80, record=True)
    console.print(render_status(status))
    assert "verdict: stalled: 2 completed, 1 quarantined" in console.export_text()


async def test_status_of_a_job_that_reports_no_load_has_no_load_table() -> None:
    from rich.console import Console

    from spate._cli.status_table import render_status

    store = MemoryStore()
    await seed_job(store)
    status = await read_status(store, JOB)
    assert status.load_mean() is None
    console = Console(width=120, record=True)
    console.print(render_status(status))
    assert "load" not in console.export_text().lower().replace("unreadable", "")
