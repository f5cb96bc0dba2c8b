"""Three coordinators share one store; one dies abruptly mid-job; the others finish it."""

from __future__ import annotations

import trio

from spate import (
    AllComplete,
    Coordinator,
    Event,
    Fenced,
    Gained,
    Lost,
    Progress,
    RevokeRequested,
    Stalled,
    open_coordinator,
)
from spate._core.records import Status
from spate.store import Store
from spate_stores.memory import MemoryServer

from .harness import JOB, client, config, planner_of, record_of

SPLITS = 50
END = 100
STEP = 10


def weight(i: int) -> int:
    return 1 + i % 5


async def work(
    coord: Coordinator, gained: Gained, revoke: trio.Event, log: list[tuple[str, str, int]]
) -> None:
    """A handler: advance in steps (time proportional to weight), commit each, drain on request."""
    position = gained.progress.watermark or 0
    try:
        while position < END:
            await trio.sleep(0.1 * gained.weight)
            position = min(END, position + STEP)
            await coord.commit(gained.split, Progress(position, completed=position >= END))
            log.append((coord.instance, gained.split, position))
            if position < END and revoke.is_set():
                await coord.release([gained.split])
                return
    except Fenced:
        return  # lost: its new owner resumes from the last commit


async def run_worker(
    store: Store,
    instance: str,
    verdicts: dict[str, Event],
    log: list[tuple[str, str, int]],
    *,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    async with (
        open_coordinator(
            store,
            job=JOB,
            instance=instance,
            planner=planner_of(SPLITS, weight=weight),
            config=config(max_in_flight=12),
        ) as coord,
        trio.open_nursery() as handlers,
    ):
        task_status.started()
        scopes: dict[str, trio.CancelScope] = {}
        revokes: dict[str, trio.Event] = {}

        async def handle(gained: Gained) -> None:
            with scopes.setdefault(gained.split, trio.CancelScope()):
                await work(coord, gained, revokes[gained.split], log)

        async for event in coord.events():
            if isinstance(event, Gained):
                scopes[event.split] = trio.CancelScope()
                revokes[event.split] = trio.Event()
                handlers.start_soon(handle, event)
            elif isinstance(event, Lost):
                scopes.pop(event.split, trio.CancelScope()).cancel()
            elif isinstance(event, RevokeRequested):
                revokes.get(event.split, trio.Event()).set()
            elif isinstance(event, AllComplete | Stalled):
                verdicts[instance] = event
                handlers.cancel_scope.cancel()
                return


async def run_fleet(
    store: Store, verdicts: dict[str, Event], log: list[tuple[str, str, int]]
) -> None:
    """Run w0, w1, w2; kill w0 abruptly mid-job; return when the survivors have a verdict."""
    async with trio.open_nursery() as nursery:
        doomed = trio.CancelScope()

        async def doomed_worker(task_status: trio.TaskStatus[None]) -> None:
            with doomed:
                await run_worker(store, "w0", verdicts, log, task_status=task_status)

        await nursery.start(doomed_worker)
        for instance in ("w1", "w2"):
            await nursery.start(run_worker, store, instance, verdicts, log)
        await trio.sleep(3.0)
        assert {i for i, _, _ in log} == {"w0", "w1", "w2"}  # mid-job, everyone working
        assert len({s for _, s, p in log if p == END}) < SPLITS
        doomed.cancel()  # no hand-back: its leases must run out


async def test_three_coordinators_finish_a_weighted_job_after_one_dies_abruptly(
    autojump_clock: trio.abc.Clock,
) -> None:
    store = client(MemoryServer())  # one store object shared by the three coordinators
    verdicts: dict[str, Event] = {}
    log: list[tuple[str, str, int]] = []
    with trio.fail_after(600):
        await run_fleet(store, verdicts, log)
    assert verdicts == {"w1": AllComplete(), "w2": AllComplete()}
    for i in range(SPLITS):
        record, _ = await record_of(store, f"s{i:02d}")
        assert record.status is Status.COMPLETED
        assert record.watermark == END
    # Per split, committed watermarks only grew (every commit was fenced by its epoch).
    last: dict[str, int] = {}
    for _, split, position in log:
        assert position > last.get(split, 0)
        last[split] = position
    # The dead worker's unfinished splits were finished by the others, from its commits on.
    started = {s for i, s, _ in log if i == "w0"}
    finished = {s for i, s, p in log if i == "w0" and p == END}
    assert started - finished
    for split in started - finished:
        assert any(i != "w0" and s == split for i, s, _ in log)
