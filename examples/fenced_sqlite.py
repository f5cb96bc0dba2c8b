"""Exactly-once output to your own database: SQLite rows guarded by ``SplitHandle.fence``.

spate fences its own progress record, but a handler writes its output somewhere else first.
A worker frozen past its lease (a GC pause, SIGSTOP, a VM migration) wakes up as a zombie and
may still write there before it notices that its split has a new owner. The fence makes the
database itself refuse those writes:

- the sink keeps one row per split in ``fences``: the largest fence that wrote, and where
  the split's output ends;
- a new owner first *takes over* the split in the sink (:meth:`FencedSink.take_over`): it
  raises the stored fence to its own and reads where the output ends, so it resumes there
  and every older owner is locked out from that moment on;
- every batch of rows is written in one transaction with
  ``UPDATE fences SET fence = ?, watermark = ? WHERE split = ? AND fence <= ?``:
  if a newer owner has been there, nothing matches, the transaction rolls back, and the
  late rows never land (:class:`StaleFence`).

SQLite calls block, so they run in a worker thread (``trio.to_thread``), never on the event
loop where they would delay lease renewals.

The fence keeps growing across a job deleted and created again (it carries the job's
incarnation), so running this job again on the same database, with a fresh store, is safe:
the new owners take every split over with larger fences, find the output complete and finish.

Run it: ``python examples/fenced_sqlite.py [DATABASE]`` runs a fleet of three workers on the
in-process memory store and checks that every record landed exactly once (run it twice on one
database: still exactly once). ``--store URL`` runs the fleet on etcd or NATS instead (a fresh
namespace or ``--job`` name per database: a job the store already finished writes nothing
more); ``--help`` says the rest.
"""

from __future__ import annotations

import argparse
import logging
import sqlite3
import sys
import tempfile
from collections.abc import Awaitable, Callable, Sequence
from contextlib import closing
from functools import partial
from pathlib import Path
from typing import Any, Protocol

import trio

import spate
from spate_stores import open_store

Row = tuple[str, int, int]
"""One output row: (split, record, value)."""
RunSync = Callable[..., Awaitable[Any]]

SCHEMA = """
CREATE TABLE IF NOT EXISTS fences (
    split TEXT PRIMARY KEY,
    fence INTEGER NOT NULL,
    watermark INTEGER
);
CREATE TABLE IF NOT EXISTS output (
    split TEXT NOT NULL,
    record INTEGER NOT NULL,
    value INTEGER NOT NULL,
    fence INTEGER NOT NULL
);
"""


class StaleFence(spate.Fenced):
    """A newer owner of the split has written to the sink: this owner's rows were refused.

    A :class:`spate.Fenced`: escaping the handler of a tenancy that has ended, it is logged as
    what it is (a stale tenancy's write refused; nothing to do), not as a failure.
    """


class FencedSink:
    """Output rows in SQLite, accepted only from the split's newest owner."""

    def __init__(self, path: str | Path, *, run_sync: RunSync = trio.to_thread.run_sync) -> None:
        self.path = str(path)
        self._run_sync = run_sync  # how blocking calls leave the event loop

    def _connect(self) -> sqlite3.Connection:
        return sqlite3.connect(self.path, timeout=30.0)

    async def create(self) -> None:
        """Create the tables if they are missing."""
        await self._run_sync(self._create)

    def _create(self) -> None:
        with closing(self._connect()) as db:
            db.executescript(SCHEMA)

    async def take_over(self, split: str, fence: int) -> int | None:
        """Lock older owners of ``split`` out and return where its output ends (None: nothing yet).

        Raises :class:`StaleFence` if a newer owner has already taken it over.
        """
        result: int | None = await self._run_sync(self._take_over, split, fence)
        return result

    def _take_over(self, split: str, fence: int) -> int | None:
        with closing(self._connect()) as db, db:  # one transaction
            if not self._raise_fence(db, split, fence, None):
                raise StaleFence(split, f"a newer owner than fence {fence} took it over")
            row = db.execute("SELECT watermark FROM fences WHERE split = ?", (split,)).fetchone()
            return None if row is None else row[0]

    async def write(self, split: str, fence: int, rows: Sequence[Row], watermark: int) -> None:
        """Append ``rows`` and move the split's output end to ``watermark``, in one transaction.

        Raises :class:`StaleFence`, writing nothing, if a newer owner has taken the split over.
        """
        await self._run_sync(self._write, split, fence, list(rows), watermark)

    def _write(self, split: str, fence: int, rows: list[Row], watermark: int) -> None:
        with closing(self._connect()) as db, db:  # one transaction: the rows and the fence
            if not self._raise_fence(db, split, fence, watermark):
                raise StaleFence(split, f"the sink refused rows of fence {fence} (a newer owner)")
            db.executemany(
                "INSERT INTO output (split, record, value, fence) VALUES (?, ?, ?, ?)",
                [(s, record, value, fence) for s, record, value in rows],
            )

    def _raise_fence(
        self, db: sqlite3.Connection, split: str, fence: int, watermark: int | None
    ) -> bool:
        """The guard: True if ``fence`` may write ``split`` (and now holds it in the sink)."""
        db.execute(
            "INSERT OR IGNORE INTO fences (split, fence, watermark) VALUES (?, ?, NULL)",
            (split, fence),
        )
        cursor = db.execute(
            "UPDATE fences SET fence = ?, watermark = COALESCE(?, watermark) "
            "WHERE split = ? AND fence <= ?",
            (fence, watermark, split, fence),
        )
        return cursor.rowcount == 1


class Sink(Protocol):
    """What the handler needs of a sink (a :class:`FencedSink`, or a test's wrapper)."""

    async def take_over(self, split: str, fence: int) -> int | None:
        """Lock older owners out; return where the split's output ends."""
        ...

    async def write(self, split: str, fence: int, rows: Sequence[Row], watermark: int) -> None:
        """Append rows and move the output end, unless a newer owner took over."""
        ...


BATCH = 10
"""Records per transaction (and per spate commit)."""


def make_handler(sink: Sink) -> Callable[[spate.SplitHandle], Awaitable[None]]:
    """The handler: square every record of the split's range, fenced by ``split.fence``."""

    async def handle(split: spate.SplitHandle) -> None:
        end = int(split.descriptor)
        # The sink, not spate's progress record, says where the output ends: rows written
        # just before a crash (after the last spate commit) are not written twice.
        position = await sink.take_over(split.id, split.fence) or 0
        if position >= end:
            # Every row is in the sink already: a crash after the last write, or the same job
            # run again on this database. Finish the split, or it would never complete.
            await split.commit(end, completed=True)
            return
        while position < end:
            upto = min(position + BATCH, end)
            rows = [(split.id, record, record * record) for record in range(position, upto)]
            await sink.write(split.id, split.fence, rows, upto)
            position = upto
            await split.commit(position, completed=position == end)
            if split.revoke_requested.is_set() and position < end:
                return  # handed back; the next owner resumes at the sink's watermark

    return handle


def make_planner(splits: int, records: int) -> Callable[[spate.PlanContext], spate.Plan]:
    """``splits`` splits of ``records`` records each (the descriptor is the record count)."""

    def plan(ctx: spate.PlanContext) -> spate.Plan:
        ids = [f"part-{i:03d}" for i in range(splits)]
        specs = [spate.SplitSpec(i, descriptor=str(records).encode()) for i in ids]
        return spate.Plan([s for s in specs if s.id not in ctx.known], final=True)

    return plan


def exactly_once(path: str | Path, splits: int, records: int) -> bool:
    """Whether the output holds every record of every split exactly once."""
    with closing(sqlite3.connect(str(path))) as db:
        rows = db.execute("SELECT split, record, COUNT(*) FROM output GROUP BY split, record")
        counts = {(split, record): n for split, record, n in rows}
    wanted = {(f"part-{i:03d}", r) for i in range(splits) for r in range(records)}
    return set(counts) == wanted and set(counts.values()) == {1}


async def main(
    path: str,
    splits: int = 8,
    records: int = 100,
    workers: int = 3,
    *,
    store_url: str = "memory://",
    job: str = "squares",
) -> bool:
    """Run the job on an in-process fleet; return whether the output is exactly once."""
    sink = FencedSink(path)
    await sink.create()
    handler = make_handler(sink)
    # One client for the whole fleet: each worker holds its own session on it (and on
    # memory:// a second client would be a second, empty store).
    async with open_store(store_url) as store:

        async def worker(name: str) -> None:
            await spate.run_worker(
                store,
                job=job,
                instance=name,
                planner=make_planner(splits, records),
                handler=handler,
            )

        async with trio.open_nursery() as nursery:
            for n in range(workers):
                nursery.start_soon(worker, f"worker-{n}")
    return exactly_once(path, splits, records)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The command line (``--help`` prints it)."""
    parser = argparse.ArgumentParser(
        prog="fenced_sqlite.py",
        description="Run a fleet of workers that write every record to SQLite exactly once, "
        "fenced by SplitHandle.fence, and check the output.",
    )
    parser.add_argument(
        "database", nargs="?",
        help="the SQLite file to write (default: a new one in a temporary directory); run "
        "twice on one file: still exactly once",
    )  # fmt: skip
    parser.add_argument(
        "--store", default="memory://", metavar="URL",
        help="the store the fleet shares (default: memory://, in this process); etcd://HOST:PORT "
        "or nats://HOST:PORT runs it on a server",
    )  # fmt: skip
    parser.add_argument(
        "--job", default="squares",
        help="the job's name (default: squares); on a server, a job already finished there "
        "writes nothing more, so give a new database a new name (or a new namespace)",
    )  # fmt: skip
    parser.add_argument("--workers", type=int, default=3, help="workers in the fleet (3)")
    return parser.parse_args(argv)


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    args = parse_args()
    database = args.database or str(Path(tempfile.mkdtemp(prefix="spate-")) / "output.db")
    ok = trio.run(partial(main, database, workers=args.workers, store_url=args.store, job=args.job))
    print(f"{database}: every record exactly once: {ok}")
    sys.exit(0 if ok else 1)
