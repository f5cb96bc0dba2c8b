"""Splitting a straggler: a backfill whose one long range is split for the idle workers.

A bounded job ends when its slowest split ends. This backfill has eight ranges of rows, one of
them sixteen times the others: without splitting, three of the four workers would finish their
short ranges and then sit idle while the fourth works through the long one alone.

With splitting, the leader notices the idle lanes and asks the long range's owner to split
(``SplitHandle.split_requested``). The handler, right after a commit, cuts what it has left in
two with :meth:`spate.SplitHandle.split`: it keeps the first half (the *primary*) and a new
split, the *residual*, takes the second half to an idle worker. Residuals are split again
while lanes sit idle, so the long range ends up shared by the whole fleet.

The descriptor of every split is the range of rows it covers, ``b"start:end"``. The sink is an
in-memory table that counts how often each row was written, so the end of the run can show
that every row was backfilled exactly once, by whichever split held it.

Run it: ``python examples/splittable_backfill.py`` runs four workers of one lane each on the
in-process memory store (about four seconds), prints every residual split off the long range
and the makespan, and exits 0 if every row was written exactly once. ``--no-split`` runs the
same job with the leader's split requests turned off, for comparison. ``--store URL`` runs it
on etcd or NATS (in real time there as here: about four seconds); ``--help`` says the rest.
"""

from __future__ import annotations

import argparse
import collections
import logging
import sys
from collections.abc import Awaitable, Callable, Sequence
from functools import partial

import attrs
import trio

import spate
from spate_stores import open_store

BATCH = 50
"""Rows per commit; a split point is always a commit point."""
ROW_SECONDS = 0.002
"""How long backfilling one row takes (a stand-in for the real work)."""
SIZES = (200,) * 7 + (3200,)
"""Rows in each planned range: seven short ones and the straggler."""
CONFIG = spate.Config(
    max_in_flight=1,
    # Short timings for a short example (the defaults, 2 s and 1 s, suit real fleets): an
    # in-process fleet gathers at once, and a lane idle for a quarter of a second is idle.
    membership_debounce=0.5,
    split_request_delay=0.25,
)


def encode(start: int, end: int) -> bytes:
    """The descriptor of the split covering rows ``start..end``."""
    return f"{start}:{end}".encode()


def decode(descriptor: bytes) -> tuple[int, int]:
    """The rows ``(start, end)`` a descriptor covers."""
    start, _, end = descriptor.partition(b":")
    return int(start), int(end)


@attrs.define
class Table:
    """The backfill's sink: how often each row was written, and by which split."""

    writes: collections.Counter[int] = attrs.field(factory=collections.Counter)
    writers: dict[int, str] = attrs.field(factory=dict)
    residuals: list[tuple[str, str, int, int]] = attrs.field(factory=list)
    """(parent, residual, first row, end row) of every split that landed, in order."""
    first_row_at: float | None = None
    last_row_at: float = 0.0

    async def backfill(self, split: str, start: int, end: int) -> None:
        """Write rows ``start..end`` (pretending each takes ``ROW_SECONDS``)."""
        if self.first_row_at is None:
            self.first_row_at = trio.current_time()
        await trio.sleep((end - start) * ROW_SECONDS)
        for row in range(start, end):
            self.writes[row] += 1
            self.writers[row] = split
        self.last_row_at = trio.current_time()


def make_handler(table: Table) -> Callable[[spate.SplitHandle], Awaitable[None]]:
    """The handler: backfill the split's rows, commit each batch, split when asked."""

    async def handle(split: spate.SplitHandle) -> None:
        start, end = decode(split.descriptor)
        watermark = split.progress.watermark
        position = start if watermark is None else watermark  # where the last owner committed
        while position < end:
            upto = min(position + BATCH, end)
            await table.backfill(split.id, position, upto)
            position = upto
            await split.commit(position, completed=position >= end)
            # Commit first, then split: the split point lies past every row written so far.
            if split.split_requested.is_set() and end - position >= 2 * BATCH:
                middle = position + (end - position) // 2
                residual = await split.split(
                    primary=encode(start, middle), residual=encode(middle, end)
                )
                table.residuals.append((split.id, residual, middle, end))
                end = middle  # this handler stops at middle; the residual's owner does the rest
            if split.revoke_requested.is_set() and position < end:
                return  # handed back at a commit: the next owner resumes here

    return handle


def make_planner(sizes: Sequence[int]) -> Callable[[spate.PlanContext], spate.Plan]:
    """One split per entry of ``sizes``, covering consecutive ranges of rows.

    A split's weight is its size in hundreds of rows, so the leader gives the long range's
    worker nothing else to do first.
    """
    specs = []
    start = 0
    for n, size in enumerate(sizes):
        descriptor = encode(start, start + size)
        weight = max(1, size // 100)
        specs.append(spate.SplitSpec(f"rows-{n:02d}", descriptor=descriptor, weight=weight))
        start += size

    def plan(ctx: spate.PlanContext) -> spate.Plan:
        return spate.Plan([s for s in specs if s.id not in ctx.known], final=True)

    return plan


async def main(
    sizes: Sequence[int] = SIZES,
    workers: int = 4,
    config: spate.Config = CONFIG,
    *,
    store_url: str = "memory://",
    job: str = "backfill",
) -> Table:
    """Run the backfill on ``workers`` in-process workers; return the sink."""
    table = Table()
    # One client for the whole fleet: each worker holds its own session on it (and on
    # memory:// a second client would be a second, empty store).
    async with open_store(store_url) as store:

        async def worker(name: str) -> None:
            verdict = await spate.run_worker(
                store,
                job=job,
                instance=name,
                planner=make_planner(sizes),
                handler=make_handler(table),
                config=config,
            )
            assert verdict == spate.AllComplete(), verdict

        async with trio.open_nursery() as nursery:
            for n in range(workers):
                nursery.start_soon(worker, f"worker-{n}")
    return table


def exactly_once(table: Table, sizes: Sequence[int]) -> bool:
    """Whether every row of the job was written once, and no other row at all."""
    return set(table.writes) == set(range(sum(sizes))) and set(table.writes.values()) == {1}


def report(table: Table, sizes: Sequence[int], workers: int) -> list[str]:
    """What happened, in lines: the residuals, the makespan, and the exactly-once check."""
    lines = [f"{len(sizes)} ranges, {sum(sizes)} rows, {workers} workers"]
    for parent, residual, first, end in table.residuals:
        lines.append(f"  {parent} split: residual {residual} takes rows {first}-{end}")
    work = sum(sizes) * ROW_SECONDS
    makespan = table.last_row_at - (table.first_row_at or 0.0)
    lines.append(
        f"makespan (first row to last): {makespan:.1f} s; the longest range alone takes "
        f"{max(sizes) * ROW_SECONDS:.1f} s, all the work spread over {workers} lanes "
        f"{work / workers:.1f} s"
    )
    lines.append(f"every row exactly once: {'yes' if exactly_once(table, sizes) else 'NO'}")
    return lines


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The command line (``--help`` prints it)."""
    parser = argparse.ArgumentParser(
        prog="splittable_backfill.py",
        description="Backfill eight ranges of rows, one sixteen times the others, on four "
        "workers of one lane each; the long range is split for the idle ones. Exits 0 when "
        "every row was written exactly once.",
    )
    parser.add_argument(
        "--no-split", action="store_true",
        help="turn the leader's split requests off, for comparison (the long range runs alone)",
    )  # fmt: skip
    parser.add_argument(
        "--store", default="memory://", metavar="URL",
        help="the store the workers share (default: memory://, in this process); "
        "etcd://HOST:PORT or nats://HOST:PORT runs it on a server",
    )  # fmt: skip
    parser.add_argument(
        "--job", default="backfill",
        help="the job's name (default: backfill); on a server, use a new one for each run "
        "(a finished job does nothing more, and this sink starts empty every run)",
    )  # fmt: skip
    return parser.parse_args(argv)


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    args = parse_args()
    splitting = not args.no_split
    config = CONFIG if splitting else attrs.evolve(CONFIG, split_requests=False)
    result = trio.run(partial(main, SIZES, 4, config, store_url=args.store, job=args.job))
    print("\n".join(report(result, SIZES, 4)))
    sys.exit(0 if exactly_once(result, SIZES) and bool(result.residuals) == splitting else 1)
