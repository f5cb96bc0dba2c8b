"""Chaos on real servers: ``spate worker`` processes against etcd or NATS, killed and stopped.

``python -m spate_testing.sim.chaos --store etcd`` (or ``nats``, or ``both``) starts a real
server on free loopback ports, runs a fleet of ``spate worker`` processes of the demo job
against it, and for a while SIGKILLs workers (a supervisor restarts them under the same
instance id), SIGSTOPs them (some for longer than the lease, so they wake as zombies) and
restarts the server. Then it lets the job finish, reads every worker's history of
acknowledged commits and the final listing, and holds them to the simulator's invariant
checker. Real processes cannot show their store writes, so the checks are those a history of
acknowledged commits supports: no acknowledged commit lost, acknowledgements in epoch order,
one owner per epoch, every split finished, verdicts matching the listing, termination.

With ``poison`` (``--poison N``), N splits are process-killing poison: every worker started
with ``--crash-on`` for them exits a moment after gaining one, before its first commit (the
supervisor restarts it). Fair blame must quarantine exactly those: each of their owners dies
without moving them forward, while the healthy splits that die beside them keep moving.
:attr:`ChaosResult.outcomes` holds every split's end.

Unlike the simulator this runs on the real clock and is not reproducible; the seed only fixes
the chaos schedule. It is the ``chaos`` nox session (not part of the default run).

With ``--cluster`` the store is a 3-member cluster (etcd, or NATS with R3 buckets) reached
through a URL naming every member, and instead of restarting "the server" the run SIGKILLs
the store's leader (etcd's raft leader; the durable bucket's stream leader on NATS) and later
a follower, restarting each a few seconds later. The result then also counts duplicated
acknowledgements and the stall after the leader kill: the time until the fleet's next
acknowledged commit (seen as a worker's history file growing).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import attrs
import trio

from spate._cli.demo.process import CRASH_EXIT
from spate._cli.demo.workload import Dataset
from spate_testing.sim._checker import Violation, check
from spate_testing.sim._history import Acked, Action, History, Verdict
from spate_testing.sim._recorder import final_listing

__all__ = ["ChaosResult", "main", "run_chaos"]

JOB = "chaos"
_VERDICT = re.compile(r"verdict: (AllComplete\(\)|Stalled\(completed=(\d+), quarantined=(\d+)\))")


@attrs.define
class _Life:
    instance: str
    number: int
    process: subprocess.Popen[bytes]
    history: Path
    output: Path
    stopped_until: float | None = None
    noted: bool = False

    @property
    def actor(self) -> str:
        return f"{self.instance}#{self.number}"


@attrs.frozen
class ChaosResult:
    """What one chaos run did and found."""

    store: str
    server: str
    wall_seconds: float
    actions: dict[str, int]
    acked_commits: int
    refused_zombie_commits: int
    """Commits the workers saw fenced: a stopped worker's late write, refused by the store."""
    splits: int
    completed: int
    quarantined: int
    violations: tuple[Violation, ...]
    history: History = attrs.field(repr=False, eq=False)
    poison: tuple[str, ...] = ()
    """The process-killing poison splits of the run."""
    outcomes: dict[str, str] = attrs.field(factory=dict, repr=False, eq=False)
    """Every split's final status (``completed``, ``quarantined``, ``runnable``)."""

    def table(self) -> dict[tuple[str, str], int]:
        """``(poison|healthy, status) -> splits``: what became of each kind of split."""
        counts: collections.Counter[tuple[str, str]] = collections.Counter()
        for split, status in self.outcomes.items():
            counts[("poison" if split in self.poison else "healthy", status)] += 1
        return dict(sorted(counts.items()))

    duplicated_commits: int = 0
    """Acknowledgements of the same split, epoch and watermark more than once."""
    lost_commits: int = 0
    """Acknowledged commits the final listing does not hold (lost-ack violations)."""
    leader_stalls: tuple[float, ...] = ()
    """Cluster mode: seconds from each store-leader kill to the next acknowledged commit."""
    election_timeout: float | None = None
    """Cluster mode: the store's election timeout, seconds."""

    @property
    def ok(self) -> bool:
        """Whether the history was clean."""
        return not self.violations


@contextlib.contextmanager
def _server(kind: str, cluster: bool = False) -> Iterator[Any]:
    if cluster and kind == "etcd":
        from spate_testing.servers.clusters import etcd_cluster_sync

        with etcd_cluster_sync() as members:
            yield members
        return
    if cluster:
        from spate_testing.servers.clusters import nats_cluster_sync

        with nats_cluster_sync() as servers:
            yield servers
        return
    if kind == "etcd":
        from spate_testing.servers.etcd import etcd_server_sync

        with etcd_server_sync() as etcd:
            yield etcd
        return
    from spate_testing.servers.nats import NatsServer

    nats = NatsServer(websocket=False)
    try:
        nats.start()
        yield nats
    finally:
        nats.cleanup()


def _restart_server(kind: str, server: Any) -> None:
    if kind == "etcd":
        server.stop_sync()
        server.start_sync()
    else:
        server.restart()  # SIGTERM: JetStream flushes; a SIGKILL may lose acknowledged writes


class _Fleet:
    def __init__(
        self,
        url: str,
        workdir: Path,
        splits: int,
        seed: int,
        history: History,
        poison: tuple[str, ...] = (),
    ):
        self.poison = poison
        self.url = url
        self.workdir = workdir
        self.splits = splits
        self.seed = seed
        self.history = history
        self.lives: list[_Life] = []
        self.counts: collections.Counter[str] = collections.Counter()
        self.started = time.monotonic()

    def now(self) -> float:
        return time.monotonic() - self.started

    def action(self, actor: str, what: str, detail: str = "") -> None:
        self.counts[what] += 1
        self.history.append(Action(at=self.now(), actor=actor, what=what, detail=detail))

    def start(self, instance: str, how: str = "start") -> _Life:
        number = 1 + sum(1 for life in self.lives if life.instance == instance)
        history = self.workdir / f"{instance}#{number}.jsonl"
        output = self.workdir / f"{instance}#{number}.out"
        argv = [
            sys.executable, "-m", "spate", "worker", "--store", self.url, "--job", JOB,
            "--instance", instance, "--splits", str(self.splits), "--seed", str(self.seed),
            "--batch-seconds", "0.5", "--max-in-flight", "4", "--history", str(history),
        ]  # fmt: skip
        for split in self.poison:
            argv += ["--crash-on", split]
        with output.open("wb") as out:
            process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
        life = _Life(instance, number, process, history, output)
        self.lives.append(life)
        self.action(life.actor, how)
        return life

    def running(self) -> list[_Life]:
        return [life for life in self.lives if life.process.poll() is None]

    def latest(self, instance: str) -> _Life:
        return [life for life in self.lives if life.instance == instance][-1]


def run_chaos(
    store: str,
    *,
    workers: int = 4,
    splits: int = 48,
    seconds: float = 45.0,
    lease: float = 6.0,
    seed: int = 1,
    bound: float = 240.0,
    server_restarts: int = 1,
    poison: int = 0,
    cluster: bool = False,
) -> ChaosResult:
    """Run one chaos run against a fresh ``store`` server (``"etcd"`` or ``"nats"``).

    ``poison`` splits (chosen by the seed) crash every worker process that works them.
    ``cluster`` runs it on a 3-member cluster, killing its leader and a follower instead of
    restarting the server (see the module docstring).
    """
    if store not in ("etcd", "nats"):
        raise ValueError(f"store must be 'etcd' or 'nats', not {store!r}")
    rng = random.Random(seed)
    started = time.monotonic()
    history = History(job=JOB, seed=seed)
    expected = [split for split, _, _, _ in Dataset(seed=seed, splits=splits).ranges()]
    # Their own generator: the chaos schedule of a seed stays what it was without poison.
    poisoned = tuple(sorted(random.Random(seed + 7919).sample(expected, poison)))
    stalls: list[float] = []
    with (
        tempfile.TemporaryDirectory(prefix="spate-chaos-") as tmp,
        _server(store, cluster) as server,
    ):
        url = server.store_url(f"chaos{seed}", ttl=lease)
        fleet = _Fleet(url, Path(tmp), splits, seed, history, poisoned)
        try:
            for i in range(workers):
                fleet.start(f"w{i}")
            if cluster:
                stalls = _cluster_chaos(fleet, store, server, rng, seconds, lease, f"chaos{seed}")
            else:
                _chaos(fleet, store, server, rng, seconds, lease, server_restarts)
            terminated = _settle(fleet, bound)
        finally:
            for life in fleet.lives:
                if life.process.poll() is None:
                    life.process.send_signal(signal.SIGCONT)
                    life.process.kill()
                    life.process.wait()
        _read_lives(fleet)
        fenced = sum(
            life.output.read_text(errors="replace").count("was fenced") for life in fleet.lives
        )
        final = trio.run(_final, url, expected, terminated, bound)
        history.append(final)
    violations = tuple(check(history))
    listing = final.splits
    acked = collections.Counter(
        (a.split, a.epoch, a.watermark, a.completed) for a in history.of(Acked)
    )
    return ChaosResult(
        store=store,
        server=f"{store} {'.'.join(map(str, server.version))}",
        wall_seconds=time.monotonic() - started,
        actions=dict(sorted(fleet.counts.items())),
        acked_commits=len(history.of(Acked)),
        refused_zombie_commits=fenced,
        splits=len(listing),
        completed=sum(1 for s in listing if s.completed),
        quarantined=sum(1 for s in listing if s.status == "quarantined"),
        violations=violations,
        history=history,
        poison=poisoned,
        outcomes={s.split: s.status for s in listing},
        duplicated_commits=sum(n - 1 for n in acked.values() if n > 1),
        lost_commits=sum(1 for v in violations if v.invariant == "lost-ack"),
        leader_stalls=tuple(stalls),
        election_timeout=float(server.election_timeout) if cluster else None,
    )


def _acks_so_far(fleet: _Fleet) -> int:
    """How many acknowledgement lines the workers' history files hold now."""
    total = 0
    for life in fleet.lives:
        try:
            total += life.history.read_bytes().count(b"\n")
        except OSError:
            continue
    return total


def _cluster_chaos(
    fleet: _Fleet,
    kind: str,
    cluster: Any,
    rng: random.Random,
    seconds: float,
    lease: float,
    namespace: str,
) -> list[float]:
    """Worker chaos as in :func:`_chaos` (no server restarts), plus store-member kills.

    At ~30% of the run the store's leader is SIGKILLed, at ~65% a follower; each comes back
    4 s later. Returns the stall after each leader kill (seconds to the next acknowledgement).
    """
    stream = None
    if kind == "nats":
        from spate.store import Keyspace
        from spate_stores.nats._keys import bucket_name

        stream = "KV_" + bucket_name(namespace, Keyspace.DURABLE)
    plan = [(0.3 * seconds, "leader"), (0.65 * seconds, "follower")]
    stalls: list[float] = []
    down: list[tuple[float, Any]] = []
    started = time.monotonic()

    def tick(now: float) -> None:
        for item in [d for d in down if d[0] <= now]:
            down.remove(item)
            fleet.action("store", "member-restart", repr(item[1]))
            cluster.restart_member_sync(item[1])
        if plan and now - started >= plan[0][0]:
            _, role = plan.pop(0)
            member = cluster.member(role) if stream is None else cluster.member(role, stream)
            before = _acks_so_far(fleet)
            killed_at = time.monotonic()
            cluster.stop_member_sync(member, kill=True)
            fleet.action("store", f"{role}-kill", repr(member))
            down.append((killed_at + 4.0, member))
            if role == "leader":
                while _acks_so_far(fleet) == before and time.monotonic() - killed_at < 60:
                    time.sleep(0.01)
                stalls.append(time.monotonic() - killed_at)

    _chaos(fleet, kind, cluster, rng, seconds, lease, 0, tick=tick)
    for _, member in down:
        cluster.restart_member_sync(member)
    return stalls


def _chaos(
    fleet: _Fleet,
    kind: str,
    server: Any,
    rng: random.Random,
    seconds: float,
    lease: float,
    server_restarts: int,
    tick: Callable[[float], None] | None = None,
) -> None:
    end = time.monotonic() + seconds
    restarts_at = sorted(rng.uniform(0.3, 0.8) * seconds for _ in range(server_restarts))
    pending: list[tuple[float, str, str]] = []  # (when, what, instance)
    next_action = time.monotonic() + rng.uniform(2.0, 5.0)
    while time.monotonic() < end:
        time.sleep(0.1)
        now = time.monotonic()
        for item in sorted(p for p in pending if p[0] <= now):
            pending.remove(item)
            _, what, instance = item
            life = fleet.latest(instance)
            if what == "cont" and life.process.poll() is None:
                life.process.send_signal(signal.SIGCONT)
                life.stopped_until = None
                fleet.action(life.actor, "cont")
            elif what == "restart":
                fleet.start(instance, "restart")
        _supervise(fleet, restart=True)
        if tick is not None:
            tick(now)
        if restarts_at and fleet.now() >= restarts_at[0]:
            restarts_at.pop(0)
            fleet.action("server", "server-restart")
            _restart_server(kind, server)
        if now < next_action:
            continue
        next_action = now + rng.uniform(2.0, 5.0)
        candidates = [life for life in fleet.running() if life.stopped_until is None]
        if not candidates:
            continue
        victim = rng.choice(candidates)
        if rng.random() < 0.5:
            victim.process.kill()
            victim.process.wait()
            fleet.action(victim.actor, "kill")
            pending.append((now + rng.uniform(0.0, 1.5 * lease), "restart", victim.instance))
        else:
            pause = rng.choice([lease / 2, 1.5 * lease, 2.5 * lease])
            victim.process.send_signal(signal.SIGSTOP)
            victim.stopped_until = now + pause
            fleet.action(victim.actor, "stop", f"{pause:g}s")
            pending.append((now + pause, "cont", victim.instance))
    for _, what, instance in pending:
        life = fleet.latest(instance)
        if what == "cont" and life.process.poll() is None:
            life.process.send_signal(signal.SIGCONT)
            fleet.action(life.actor, "cont")
        elif what == "restart":
            fleet.start(instance, "restart")


def _supervise(fleet: _Fleet, *, restart: bool) -> None:
    """Restart a worker that died on its own (as a supervisor would), noting why."""
    for life in list(fleet.lives):
        code = life.process.poll()
        if code is None or life.noted or code == -signal.SIGKILL:
            continue
        life.noted = True
        if _verdict_of(life) is not None:
            continue
        # A poison split's crash is restarted even while settling: the supervisor of a real
        # fleet does, and without it a crash loop could take down every worker before the
        # split runs out of attempts.
        again = restart or code == CRASH_EXIT
        detail = f"exit {code}" if code == CRASH_EXIT else f"exit {code}: {_error_of(life)}"
        fleet.action(life.actor, "crash" if not again else "crash-restarted", detail)
        if again and fleet.latest(life.instance) is life:
            fleet.start(life.instance, "restart")


def _settle(fleet: _Fleet, bound: float) -> bool:
    deadline = time.monotonic() + bound
    while time.monotonic() < deadline:
        _supervise(fleet, restart=False)
        if not fleet.running():
            return True
        time.sleep(0.2)
    return False


def _error_of(life: _Life) -> str:
    """The error a worker that exited on its own printed last (the CLI's one-line report)."""
    try:
        lines = life.output.read_text(errors="replace").splitlines()
    except OSError:
        return "(no output)"
    errors = [line for line in lines if "error:" in line or "Error" in line]
    return (errors or lines or ["(no output)"])[-1].strip()


def _verdict_of(life: _Life) -> tuple[bool, int | None, int | None] | None:
    try:
        text = life.output.read_text(errors="replace")
    except OSError:
        return None
    match = _VERDICT.search(text)
    if match is None:
        return None
    if match.group(1) == "AllComplete()":
        return True, None, None
    return False, int(match.group(2)), int(match.group(3))


def _read_lives(fleet: _Fleet) -> None:
    for life in fleet.lives:
        if life.history.exists():
            for line in life.history.read_text().splitlines():
                try:
                    record = json.loads(line)
                except ValueError:
                    continue  # a line cut short by SIGKILL
                fleet.history.append(
                    Acked(
                        at=float(record["at"]),
                        actor=life.actor,
                        split=record["split"],
                        epoch=int(record["epoch"]),
                        watermark=record["watermark"],
                        completed=bool(record["completed"]),
                    )
                )
        verdict = _verdict_of(life)
        if verdict is not None:
            all_complete, completed, quarantined = verdict
            fleet.history.append(
                Verdict(
                    at=fleet.now(),
                    actor=life.actor,
                    all_complete=all_complete,
                    completed=completed,
                    quarantined=quarantined,
                )
            )


async def _final(url: str, expected: list[str], terminated: bool, bound: float) -> Any:
    from spate_stores import open_store

    async with open_store(url) as store:
        return await final_listing(
            store, JOB, expected=expected, terminated=terminated, bound=bound
        )


def main(argv: Sequence[str] | None = None) -> int:
    """Run chaos against each chosen store; print the figures; 1 if any history failed."""
    parser = argparse.ArgumentParser(
        prog="python -m spate_testing.sim.chaos",
        description="Kill, stop and restart real spate worker processes (and the server) "
        "on etcd and NATS; check the histories with the simulator's invariant checker.",
    )
    parser.add_argument("--store", choices=["etcd", "nats", "both"], default="both")
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--splits", type=int, default=48)
    parser.add_argument("--seconds", type=float, default=45.0, help="chaos phase length")
    parser.add_argument("--lease", type=float, default=6.0)
    parser.add_argument("--seed", type=int, default=int(os.environ.get("SPATE_CHAOS_SEED", 1)))
    parser.add_argument("--keep", help="write each history here (JSON lines)")
    parser.add_argument(
        "--poison",
        type=int,
        default=1,
        help="process-killing poison splits (default 1; 0 for none)",
    )
    parser.add_argument(
        "--cluster",
        action="store_true",
        help="3-member store clusters; kill the store's leader and a follower during the run",
    )
    args = parser.parse_args(argv)
    status = 0
    for store in ["etcd", "nats"] if args.store == "both" else [args.store]:
        result = run_chaos(
            store,
            workers=args.workers,
            splits=args.splits,
            seconds=args.seconds,
            lease=args.lease,
            seed=args.seed,
            poison=args.poison,
            cluster=args.cluster,
        )
        print(
            f"{result.server}: {result.wall_seconds:.0f} s wall, actions "
            + ", ".join(f"{k}={v}" for k, v in result.actions.items())
            + f"; {result.acked_commits} acknowledged commits, {result.refused_zombie_commits} "
            f"zombie commits refused; {result.completed} completed "
            f"and {result.quarantined} quarantined of {result.splits} splits"
        )
        if result.poison:
            table = ", ".join(f"{kind} {end}: {n}" for (kind, end), n in result.table().items())
            print(f"  poison {', '.join(result.poison)}; {table}")
            if result.table().get(("healthy", "quarantined")) or any(
                result.outcomes.get(s) != "quarantined" for s in result.poison
            ):
                print("  FAIR BLAME FAILED: a healthy split quarantined, or a poison one not")
                status = 1
        if args.cluster:
            stalls = ", ".join(f"{stall:.2f} s" for stall in result.leader_stalls)
            print(
                f"  cluster: {result.acked_commits} acknowledged, {result.lost_commits} lost, "
                f"{result.duplicated_commits} duplicated; stall after the leader kill {stalls} "
                f"(election timeout {result.election_timeout:g} s)"
            )
            if result.duplicated_commits:
                status = 1
        if args.keep:
            Path(f"{args.keep}.{store}.jsonl").write_text(result.history.to_jsonl())
        for action in result.history.of(Action):
            # A worker that exited on its own (not a poison split's crash): say why.
            if action.what.startswith("crash") and not action.detail.startswith(
                f"exit {CRASH_EXIT}"
            ):
                print(f"  {action.actor} exited on its own at {action.at:.1f} s: {action.detail}")
        for violation in result.violations:
            print(f"  VIOLATION {violation}")
        if not result.ok:
            status = 1
        print(f"{store}: {'ok' if result.ok else 'FAILED'} (seed {args.seed})")
    return status


if __name__ == "__main__":
    sys.exit(main())
