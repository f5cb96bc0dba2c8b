"""`spate status`, `requeue --all` and `delete` against the process-wide memory store.

Each CLI call is its own ``trio.run`` with its own clock, so the namespace's TTL is made too
long to lapse between them: the seeded workers' presence keys stay live throughout.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterator

import pytest
import trio
from rich.console import Console

from spate._cli.main import main
from spate._cli.status_table import render_status
from spate.ops import JobStatus, SplitStatus, WorkerStatus
from spate.store import Keyspace
from spate_stores.memory import MemoryStore
from tests.ops.test_ops import JOB, seed_job

NAMESPACE = "operator-cli"
URL = f"memory://{NAMESPACE}"


@pytest.fixture
def store() -> Iterator[MemoryStore]:
    """The seeded job (and a second one) in a namespace of the process-wide memory server."""
    store = MemoryStore.process_shared(namespace=NAMESPACE, ephemeral_ttl=1e9)

    async def seed() -> None:
        await store.__aenter__()
        await seed_job(store)
        await store.create(Keyspace.DURABLE, "other-job.plan", b"x")

    trio.run(seed)
    yield store
    trio.run(store.aclose)


def revisions(store: MemoryStore) -> dict[object, int]:
    """Every table's revision: any write of any kind moves one."""
    return {key: table.revision for key, table in store.server._tables.items()}


def test_status_of_a_missing_job_exits_2_names_the_jobs_there_and_writes_nothing(
    store: MemoryStore, capsys: pytest.CaptureFixture[str]
) -> None:
    before = revisions(store)
    assert main(["status", "--store", URL, "--job", "nope"]) == 2
    err = capsys.readouterr().err
    assert "no job nope in this store (jobs here: job-1, other-job)" in err
    assert "may or may not" not in err
    assert revisions(store) == before


def test_status_of_a_namespace_nobody_used_creates_nothing(
    store: MemoryStore, capsys: pytest.CaptureFixture[str]
) -> None:
    tables = set(store.server._tables)
    assert main(["status", "--store", "memory://never-used?ttl=3", "--job", JOB, "--json"]) == 2
    assert "no job job-1 in this store (jobs here: none)" in capsys.readouterr().err
    assert set(store.server._tables) == tables
    assert "never-used" not in store.server._ttls  # no TTL bound: nothing was made


def test_status_reads_a_namespace_made_with_another_ttl(
    store: MemoryStore, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["status", "--store", f"{URL}?ttl=3", "--job", JOB, "--json"]) == 0
    assert '"job": "job-1"' in capsys.readouterr().out


def test_status_json_shows_a_held_split_as_held_and_each_reason(
    store: MemoryStore, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["status", "--store", URL, "--job", JOB, "--json"]) == 0
    splits = json.loads(capsys.readouterr().out)["splits"]
    assert [(s["id"], s["status"], s["display_status"], s["reason"]) for s in splits] == [
        ("b", "quarantined", "quarantined", ""),
        ("c", "runnable", "held", ""),
        ("a", "completed", "completed", ""),
    ]


def test_requeue_all_requeues_every_quarantined_split(
    store: MemoryStore, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["requeue", "--store", URL, "--job", JOB, "--all"]) == 0
    assert "requeued 1 split(s): b" in capsys.readouterr().out
    assert main(["requeue", "--store", URL, "--job", JOB, "--all"]) == 0
    assert "job job-1 has no quarantined split; nothing was requeued" in capsys.readouterr().out


@pytest.mark.parametrize("argv", [["--all", "b"], []], ids=["both", "neither"])
def test_requeue_takes_split_ids_or_all(
    store: MemoryStore, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    assert main(["requeue", "--store", URL, "--job", JOB, *argv]) == 2
    assert "or pass --all" in capsys.readouterr().err


def test_a_pattern_for_requeue_points_at_all(
    store: MemoryStore, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["requeue", "--store", URL, "--job", JOB, "range-*"]) == 2
    assert (
        "split ids are exact, not patterns (range-*); to requeue every quarantined split of "
        "the job, pass --all" in capsys.readouterr().err
    )


def test_requeue_of_a_missing_job_is_refused_before_anything_is_written(
    store: MemoryStore, capsys: pytest.CaptureFixture[str]
) -> None:
    before = revisions(store)
    assert main(["requeue", "--store", URL, "--job", "nope", "--all"]) == 2
    assert "no job nope in this store" in capsys.readouterr().err
    assert revisions(store) == before


def test_delete_refuses_while_workers_are_live_then_force_removes_the_job_alone(
    store: MemoryStore, capsys: pytest.CaptureFixture[str]
) -> None:
    before = revisions(store)
    assert main(["delete", "--store", URL, "--job", JOB]) == 2
    err = capsys.readouterr().err
    assert "job job-1 has 2 live worker(s): w1, w2; nothing was removed" in err
    assert "--force" in err
    assert revisions(store) == before
    assert main(["delete", "--store", URL, "--job", JOB, "--force"]) == 0
    out, err = capsys.readouterr()
    assert out.strip() == (
        "deleted job job-1: 11 key(s) (1 leader, 1 plan, 3 spec, 4 split, 2 worker); "
        "cut off the live worker(s) w1, w2"
    )
    assert "--force cut off w1, w2" in err
    assert main(["status", "--store", URL, "--job", JOB]) == 2
    assert "no job job-1 in this store (jobs here: other-job)" in capsys.readouterr().err


def test_delete_of_a_missing_job_is_refused(
    store: MemoryStore, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["delete", "--store", URL, "--job", "nope"]) == 2
    assert "no job nope in this store (jobs here: job-1, other-job)" in capsys.readouterr().err


def test_the_status_table_fits_80_columns_one_line_per_split() -> None:
    def split(ident: str, status: str, lease: str | None, reason: str = "") -> SplitStatus:
        return SplitStatus(
            id=ident, status=status, owner="worker-with-a-long-name-7", lease_owner=lease,
            epoch=12345, attempts=3, watermark=123_456_789_012, completed=False,
            written_at_ms=1, weight=1, revision=9, reason=reason,
        )  # fmt: skip

    long_reason = "ValueError: row 1234567 of shard 99 has a negative amount " * 5
    status = JobStatus(
        job="nightly-backfill-2026-12-02",
        exists=True,
        fingerprint="f",
        generation=7,
        finality="final",
        planned=3,
        leader="worker-with-a-long-name-7",
        workers=[WorkerStatus("worker-with-a-long-name-7", 4, True, 1)],
        splits={
            s.id: s
            for s in (
                split("range-0000000001-of-the-long-table", "quarantined", None, long_reason),
                split("range-0000000002", "runnable", "worker-with-a-long-name-7"),
                split("range-0000000003", "runnable", None),
            )
        },
        unreadable=[],
        read_at_ms=1_000_000,
    )
    out = io.StringIO()
    Console(file=out, width=80, color_system=None).print(render_status(status))
    lines = out.getvalue().splitlines()
    assert max(len(line) for line in lines) <= 80
    rows = [line for line in lines if line.startswith("range-")]
    # One line per split, then one line per failed split saying why: nothing wrapped.
    assert [row.split()[1] for row in rows[:3]] == ["quarantined", "held", "runnable"]
    assert len(rows) == 4
    assert rows[3].startswith("range-0000000001")
    assert "ValueError: row 1234567 of shard 99" in rows[3]
    assert rows[3].endswith("…")  # the long reason is cut, not wrapped
