"""One process of the ``kazoo`` benchmark's fleets: a spate worker, or a kazoo one.

    python -m bench._kazoo_worker spate STORE_URL INSTANCE SPLITS LANES
    python -m bench._kazoo_worker kazoo HOSTS ROOT INSTANCE ITEMS      (from the repository root)

``spate``: one :func:`spate.run_worker` on its own store client, job ``bench`` of ``SPLITS``
splits, ``Config(max_in_flight=LANES)``; every handler commits back to back while a window is
open. ``kazoo``: one :class:`kazoo.client.KazooClient` (its default threading handler) sharing
``ITEMS`` items under the znode ``ROOT`` through kazoo's ``SetPartitioner`` recipe; while a
window is open it writes each item it holds with ``client.set(path, value, version=v)`` (a
compare-and-swap on the znode's version) back to back, from one thread per item (``threads``,
the synchronous API kazoo's docs teach) or as one chain of ``set_async`` calls per item
(``async``).

Both speak the same line protocol. To the parent (stdout): ``held N`` whenever the number of
splits (items) it holds changes, and ``window CPU COMMITS`` when a window closes: the process's
CPU seconds (``time.process_time``, every thread's) and its commits that landed between the
``start`` and ``stop`` lines. From the parent (stdin): ``start [MODE [SIZE]]`` opens a window
(the kazoo side writes SIZE-byte values the MODE way), ``stop`` closes it, ``quit`` (or the end
of stdin) leaves: spate hands its splits back, kazoo finishes its partitioner. Outside a window
nothing commits, so start-up CPU and the other fleet's windows are kept out of the figure.

With ``$BENCH_KAZOO_PROFILE`` naming a directory, a spate process runs its windows under
``cProfile`` (its Trio thread, where the work is) and writes ``INSTANCE.prof`` there when it
leaves: where a commit's CPU goes (``python -m pstats``). The figures of such a run are cProfile's,
not to quote.
"""

from __future__ import annotations

import cProfile
import functools
import logging
import os
import sys
import threading
import time
from typing import Any

import trio

from bench._fleet import JOB, planner_of
from spate import Config, Fenced, SplitHandle, StoreUnavailable, run_worker
from spate_stores import open_store


def say(line: str) -> None:
    """One line to the parent."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


# -- spate ------------------------------------------------------------------------------------


class _Window:
    """Whether commits go, and what was counted when the window opened."""

    def __init__(self) -> None:
        self.going = False
        self.opened = trio.Event()
        self.commits = 0
        self.cpu_at_start = 0.0
        self.commits_at_start = 0


async def spate_main(url: str, instance: str, splits: int, lanes: int) -> None:
    window = _Window()
    held = 0
    profile_to = os.environ.get("BENCH_KAZOO_PROFILE")
    # CPU time, not wall time: the waits for replies are not what a commit costs.
    profiler = cProfile.Profile(time.process_time) if profile_to else None

    async def handler(split: SplitHandle) -> None:
        nonlocal held
        held += 1
        say(f"held {held}")
        try:
            watermark = split.progress.watermark or 0
            while not split.revoke_requested.is_set():
                if not window.going:
                    await window.opened.wait()
                    continue
                watermark += 1
                try:
                    await split.commit(watermark)
                except Fenced:
                    return
                except StoreUnavailable:
                    continue  # the tenancy outlived the retries; a settled fleet sees none
                window.commits += 1
        finally:
            held -= 1
            say(f"held {held}")

    async with open_store(url) as store, trio.open_nursery() as nursery:
        nursery.start_soon(
            functools.partial(
                run_worker,
                store,
                job=JOB,
                instance=instance,
                planner=planner_of(splits),
                handler=handler,
                config=Config(max_in_flight=lanes),
            )
        )
        while True:
            line = await trio.to_thread.run_sync(sys.stdin.readline, abandon_on_cancel=True)
            word = line.split()[0] if line.strip() else "quit"
            if word == "start":
                window.cpu_at_start = time.process_time()
                window.commits_at_start = window.commits
                window.going = True
                window.opened.set()
                if profiler is not None:
                    profiler.enable()
            elif word == "stop":
                if profiler is not None:
                    profiler.disable()
                cpu = time.process_time() - window.cpu_at_start
                commits = window.commits - window.commits_at_start
                window.going = False
                window.opened = trio.Event()
                say(f"window {cpu:.6f} {commits}")
            elif word == "quit":
                break
        nursery.cancel_scope.cancel()  # run_worker leaves gracefully: splits handed back
    if profiler is not None and profile_to:
        profiler.dump_stats(os.path.join(profile_to, f"{instance}.prof"))


# -- kazoo ------------------------------------------------------------------------------------


class KazooItems:
    """The items one kazoo process holds, and their writers."""

    def __init__(self, client: Any, root: str) -> None:
        self.client = client
        self.root = root
        self.go = threading.Event()
        """Set while a ``threads`` window is open: the item threads write."""
        self.chaining = False
        """True while an ``async`` window is open: each landed write sends the next."""
        self.halt = threading.Event()
        self.value = b""
        self.paths: list[str] = []
        self.versions: list[int] = []
        self.counts: list[int] = []
        self.threads: list[threading.Thread] = []
        self.writing: list[bool] = []
        """Per item: whether a write of it is in flight (either way)."""

    def take(self, items: list[str]) -> None:
        """Start on the items the partitioner gave this process."""
        self.halt.clear()
        self.paths = [f"{self.root}/items/{item}" for item in items]
        self.versions = []
        for path in self.paths:
            self.client.ensure_path(path)
            _, stat = self.client.get(path)
            self.versions.append(stat.version)
        self.counts = [0] * len(self.paths)
        self.writing = [False] * len(self.paths)
        self.threads = [
            threading.Thread(target=self._write_back_to_back, args=(n,), daemon=True)
            for n in range(len(self.paths))
        ]
        for thread in self.threads:
            thread.start()

    def drop(self) -> None:
        """Stop every writer (before the partitioner releases the items)."""
        self.halt.set()
        self.close()
        for thread in self.threads:
            thread.join()
        self.threads = []
        self.paths = []

    @property
    def commits(self) -> int:
        """Writes that landed since :meth:`take`."""
        return sum(self.counts)

    def open(self, mode: str, size: int) -> None:
        """Start writing ``size``-byte values, the ``mode`` way."""
        self.value = bytes(size)
        if mode == "threads":
            self.go.set()
        elif mode == "async":
            self.chaining = True
            for n in range(len(self.paths)):
                self._write_async(n)
        else:
            raise ValueError(f"unknown mode {mode!r}: threads or async")

    def close(self) -> None:
        """Stop writing, and return once the writes in flight have landed (uncounted by the
        window that closed): the next window's first write of an item carries the version
        its last one returned, whichever way either writes."""
        self.go.clear()
        self.chaining = False
        while any(self.writing):
            time.sleep(0.001)

    def _write_back_to_back(self, n: int) -> None:
        # One thread per item, as the synchronous API is used: each waits for its reply.
        from kazoo.exceptions import BadVersionError

        path = self.paths[n]
        while not self.halt.is_set():
            if not self.go.is_set():
                self.go.wait(0.5)
                continue
            self.writing[n] = True
            try:
                stat = self.client.set(path, self.value, version=self.versions[n])
            except BadVersionError:  # nobody else writes it: only after a lost session
                self.versions[n] = self.client.get(path)[1].version
                continue
            finally:
                self.writing[n] = False
            self.versions[n] = stat.version
            self.counts[n] += 1

    def _write_async(self, n: int) -> None:
        self.writing[n] = True
        result = self.client.set_async(self.paths[n], self.value, version=self.versions[n])
        result.rawlink(functools.partial(self._landed, n))

    def _landed(self, n: int, result: Any) -> None:
        # On kazoo's callback thread: count the write and send the item's next one.
        try:
            stat = result.get()
        except Exception as exc:  # a lost session: the chain ends, and says so
            self.writing[n] = False
            print(f"{self.paths[n]}: set_async failed ({exc!r})", file=sys.stderr, flush=True)
            return
        self.versions[n] = stat.version
        self.counts[n] += 1
        if self.chaining and not self.halt.is_set():
            self._write_async(n)
        else:
            self.writing[n] = False


def kazoo_main(hosts: str, root: str, instance: str, count: int) -> None:
    from kazoo.client import KazooClient

    client = KazooClient(hosts=hosts)
    client.start(timeout=30)
    items = KazooItems(client, root)
    quit_ = threading.Event()
    cpu_at_start = 0.0
    commits_at_start = 0

    def commands() -> None:
        nonlocal cpu_at_start, commits_at_start
        for line in sys.stdin:
            words = line.split()
            if not words:
                continue
            if words[0] == "start":
                mode = words[1] if len(words) > 1 else "threads"
                size = int(words[2]) if len(words) > 2 else 200
                cpu_at_start = time.process_time()
                commits_at_start = items.commits
                items.open(mode, size)
            elif words[0] == "stop":
                cpu = time.process_time() - cpu_at_start
                commits = items.commits - commits_at_start
                items.close()  # the last writes land before the next window opens
                say(f"window {cpu:.6f} {commits}")
            elif words[0] == "quit":
                break
        quit_.set()

    threading.Thread(target=commands, daemon=True).start()
    # The members must be stable for time_boundary seconds before the set is divided: 2 s,
    # as spate's membership_debounce (kazoo's default is 30 s).
    partitioner = client.SetPartitioner(
        path=f"{root}/partition",
        set=[f"s{n:06d}" for n in range(count)],
        identifier=instance,
        time_boundary=2,
    )
    holding = False
    while not quit_.is_set():
        if partitioner.failed:
            raise RuntimeError(f"{instance}: the partitioner failed (a lost session?)")
        if partitioner.release:
            if holding:
                items.drop()
                holding = False
                say("held 0")
            partitioner.release_set()
        elif partitioner.acquired:
            if not holding:
                items.take(list(partitioner))
                holding = True
                say(f"held {len(items.paths)}")
            quit_.wait(0.1)
        elif partitioner.allocating:
            partitioner.wait_for_acquire(timeout=1)
    if holding:
        items.drop()
    partitioner.finish()
    client.stop()
    client.close()


if __name__ == "__main__":
    logging.basicConfig(level=logging.ERROR)
    side, *args = sys.argv[1:]
    if side == "spate":
        url, instance, splits, lanes = args
        trio.run(spate_main, url, instance, int(splits), int(lanes))
    elif side == "kazoo":
        hosts, root, instance, count = args
        kazoo_main(hosts, root, instance, int(count))
    else:
        raise SystemExit(f"unknown side {side!r}: spate or kazoo")
