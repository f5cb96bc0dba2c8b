"""Deploys of real ``spate worker`` processes on a real store: SIGTERM, rolling restarts.

The fleet works the demo's job; an observer in the test reads the job's status four times a
second and records, for every split, when its watermark moved and who owned it. From that
come the figures these checks assert on (loosely: well inside a lease) and print: how long
after a SIGTERM every split the leaver held was committed by another worker, and the longest
time each split went without a commit while unfinished (its longest idle gap).
"""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import sys

import attrs
import trio

from spate.ops import read_status
from spate_stores import open_store

JOB = "deploys"
SPLITS = 8
BATCH_SECONDS = 1.5
"""A commit every 1.5 s per split: a split lasts 12-36 s (8-24 batches)."""
TTL = 15.0
POLL = 0.25


@attrs.define
class Timeline:
    """What the observer saw: every split's commits, as (seconds, owner, watermark)."""

    commits: dict[str, list[tuple[float, str | None, int | None]]] = attrs.Factory(dict)
    completed: dict[str, float] = attrs.Factory(dict)
    owners: dict[str, str | None] = attrs.Factory(dict)
    polled: trio.Event = attrs.Factory(trio.Event)

    async def next_poll(self) -> None:
        """Return after the observer's next read of the job."""
        await self.polled.wait()

    def longest_gaps(self, until: float) -> dict[str, float]:
        """Each split's longest stretch without a commit while unfinished (up to ``until``)."""
        gaps: dict[str, float] = {}
        for split, seen in self.commits.items():
            times = [
                t for t, _, watermark in seen if watermark is not None
            ]  # from its first commit
            end = self.completed.get(split, until)
            times = [t for t in times if t <= end] + [end]
            gaps[split] = max((b - a for a, b in itertools.pairwise(times)), default=0)
        return gaps

    def taken_over(self, held: set[str], leaver: str, since: float) -> float | None:
        """When every split of ``held`` was committed after ``since`` by someone else."""
        latest = since
        for split in held:
            if split in self.completed and self.completed[split] <= since:
                continue
            later = [t for t, who, _ in self.commits.get(split, []) if t > since and who != leaver]
            if not later and split not in self.completed:
                return None
            latest = max(latest, min(later) if later else self.completed[split])
        return latest - since


async def observe(url: str, timeline: Timeline, *, task_status: trio.TaskStatus[None]) -> None:
    """Poll the job's status, recording each watermark change with the time it was seen."""
    started = False
    async with open_store(url) as store:  # (read-only would see no buckets made after it)
        while True:
            try:
                status = await read_status(store, JOB)
            except Exception:  # (before the plan exists, or a read during a hiccup)
                status = None
            now = trio.current_time()
            for split in status.splits.values() if status is not None else []:
                timeline.owners[split.id] = split.owner
                seen = timeline.commits.setdefault(split.id, [])
                if not seen or seen[-1][2] != split.watermark:
                    seen.append((now, split.owner, split.watermark))
                if split.completed and split.id not in timeline.completed:
                    timeline.completed[split.id] = now
            timeline.polled.set()
            timeline.polled = trio.Event()
            if not started:
                started = True
                task_status.started()
            await trio.sleep(POLL)


async def start_worker(url: str, instance: str) -> trio.Process:
    """A ``spate worker`` process of the demo job (its output discarded)."""
    command = [sys.executable, "-m", "spate", "worker", "--store", url, "--job", JOB]
    command += ["--instance", instance, "--splits", str(SPLITS)]
    command += ["--batch-seconds", str(BATCH_SECONDS)]
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    return await trio.lowlevel.open_process(
        command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )


async def stop(process: trio.Process, patience: float = 40) -> int:
    """SIGTERM ``process`` and wait for it (killed if it overstays ``patience`` seconds)."""
    if process.returncode is None:
        process.send_signal(signal.SIGTERM)
    with trio.move_on_after(patience):
        return await process.wait()
    process.kill()
    return await process.wait()


async def owned_by(timeline: Timeline, instance: str, count: int) -> set[str]:
    """Wait until ``instance`` owns at least ``count`` splits; return them."""
    with trio.fail_after(60):
        while True:
            held = {s for s, who in timeline.owners.items() if who == instance}
            if len(held) >= count:
                return held
            await timeline.next_poll()


async def rolling_restart(url: str, replacements: int) -> tuple[list[float], dict[str, float]]:
    """Three workers, then ``replacements`` times: start a new one, SIGTERM an old one.

    Returns the seconds each leaver's splits took to be committed elsewhere after its
    SIGTERM, and the longest idle gap of each split.
    """
    timeline = Timeline()
    handed: list[float] = []
    processes: list[trio.Process] = []
    async with trio.open_nursery() as nursery:
        try:
            fleet = [await start_worker(url, f"w{i}") for i in range(3)]
            processes += fleet
            await nursery.start(observe, url, timeline)
            for number in range(replacements):
                old = fleet.pop(0)
                old_name = f"w{number}"
                held = await owned_by(timeline, old_name, 1)
                new = await start_worker(url, f"w{number + 3}")
                processes.append(new)
                fleet.append(new)
                await trio.sleep(3)  # the new worker has started and joined
                held = {s for s, who in timeline.owners.items() if who == old_name}
                sent = trio.current_time()
                code = await stop(old)
                assert code == 130, code  # interrupted, having left gracefully
                with trio.fail_after(TTL):
                    while (took := timeline.taken_over(held, old_name, sent)) is None:
                        await timeline.next_poll()
                handed.append(took)
            with trio.fail_after(120):
                while len(timeline.completed) < SPLITS:
                    await timeline.next_poll()
            until = trio.current_time()
        finally:
            for process in processes:
                await stop(process)
            nursery.cancel_scope.cancel()
    return handed, timeline.longest_gaps(until)
