"""The simulator's Trio engine: a whole fleet of ``run_worker`` calls in one Trio run.

:func:`simulate` runs one :class:`~spate_testing.sim.scenario.Scenario` and returns its
:class:`~spate_testing.sim.history.History`. It must run under a ``MockClock`` (see
:func:`spate_testing.sim.runner.run_scenario`). Unlike the machine engine
(:mod:`spate_testing.sim.machines`), it runs the real runtime, handlers and store client;
the price is that Trio decides the order of tasks runnable at one instant, and (on purpose)
not the same way twice, so a seed names a scenario here, not one exact interleaving.

Every worker incarnation talks to the shared :class:`~spate_stores.memory.MemoryServer`
through its own stack: ``run_worker`` -> ``FaultyStore`` (its faults, its freeze and
partition switches) -> ``RecordingStore`` (the true outcome of each write) -> its own
``MemoryStore`` client. The run has two phases: *chaos*, where the driver (random, or a
script) joins, kills, restarts, freezes and partitions workers while the random store faults
run; then *settle*, where every fault stops and the job has ``scenario.bound`` seconds of
simulated time to reach its verdict. The final listing is then read straight from the
server and appended as the history's :class:`~spate_testing.sim.history.Final`.
"""

from __future__ import annotations

import collections
import itertools
import logging
import random
from collections.abc import Callable
from typing import Literal

import attrs
import trio

from spate.errors import FatalCoordinationError
from spate.store import Store
from spate.worker import run_worker
from spate_stores.memory import MemoryServer, MemoryStore
from spate_testing.faults import FaultRates, FaultyStore
from spate_testing.sim.history import Action, Final, History
from spate_testing.sim.recorder import Recorder, RecordingMetrics, final_listing
from spate_testing.sim.scenario import ActionKind, Scenario, Scripted

__all__ = ["SimRun", "simulate", "worker_nonce"]

logger = logging.getLogger("spate_testing.sim")

State = Literal["running", "leaving", "killed", "verdict", "left", "crashed"]
FINGERPRINT = "spate-sim"


def worker_nonce(seed: int, actor: str) -> str:
    """The process nonce of ``actor`` in the run of ``seed``: injected, so a run repeats."""
    return random.Random(f"{seed}/{actor}/nonce").randbytes(16).hex()


@attrs.define(eq=False)
class _Incarnation:
    actor: str
    instance: str
    store: FaultyStore
    metrics: RecordingMetrics
    scope: trio.CancelScope = attrs.field(factory=trio.CancelScope)
    state: State = "running"
    done: trio.Event = attrs.field(factory=trio.Event)
    # Overlapping stalls and cuts end when the last of them does.
    frozen_until: float = 0.0
    cut_until: float = 0.0

    @property
    def live(self) -> bool:
        return self.state == "running"


class _Fleet:
    def __init__(
        self, scenario: Scenario, history: History, wrap_store: Callable[[Store], Store]
    ) -> None:
        self.scenario = scenario
        self.wrap_store = wrap_store
        self.history = history
        self.recorder = Recorder(history)
        self.server = MemoryServer()
        self.rng = random.Random(f"{scenario.seed}/driver")
        self.incarnations: list[_Incarnation] = []
        self.lives: dict[str, int] = {}
        self.next_instance = itertools.count()
        self.calm = False
        self.duplicated: set[str] = set()

    # -- lives --------------------------------------------------------------------------

    def client(self) -> MemoryStore:
        return MemoryStore(server=self.server, ephemeral_ttl=self.scenario.lease)

    def start(self, nursery: trio.Nursery, instance: str, how: str = "start") -> None:
        life = self.lives.get(instance, 0) + 1
        self.lives[instance] = life
        actor = f"{instance}#{life}"
        rates = self.scenario.rates
        if self.calm:
            rates = FaultRates(silent_expiry=rates.silent_expiry)
        store = FaultyStore(
            self.recorder.store(self.wrap_store(self.client()), actor),
            rng=random.Random(f"{self.scenario.seed}/{actor}"),
            rates=rates,
            name=actor,
        )
        store.attach(nursery)  # late-landing writes outlive the call that sent them
        inc = _Incarnation(actor, instance, store, self.recorder.metrics(actor))
        self.incarnations.append(inc)
        self.recorder.action(actor, how)
        nursery.start_soon(self._life, inc, name=f"sim worker {actor}")

    def new_instance(self) -> str:
        return f"w{next(self.next_instance)}"

    async def _life(self, inc: _Incarnation) -> None:
        handler = self.recorder.handler(self.scenario.workload.handle, inc.actor)
        try:
            with inc.scope:
                verdict = await run_worker(
                    inc.store,
                    job=self.scenario.job,
                    instance=inc.instance,
                    planner=self.scenario.workload.planner(),
                    handler=handler,
                    config=self.scenario.config,
                    fingerprint=FINGERPRINT,
                    leave_deadline=self.scenario.leave_deadline,
                    metrics=inc.metrics,
                    nonce=worker_nonce(self.scenario.seed, inc.actor),
                )
                inc.state = "verdict"
                self.recorder.verdict(inc.actor, verdict)
        except Exception as exc:  # every way a worker can die is part of the history
            self._crashed(inc, exc)
        finally:
            if inc.state == "leaving":
                inc.state = "left"
            self.history.append(inc.metrics.snapshot(settled=inc.state in ("verdict", "left")))
            inc.done.set()

    def _crashed(self, inc: _Incarnation, exc: BaseException) -> None:
        # A killed worker may die of anything; a worker sharing its instance id with another
        # live one must stop with FatalCoordinationError. Any other death is a finding,
        # including an exception group leaking out of run_worker.
        twin = inc.instance in self.duplicated or any(
            other is not inc and other.instance == inc.instance and not other.done.is_set()
            for other in self.incarnations
        )
        expected = (
            inc.state == "killed"
            or (isinstance(exc, FatalCoordinationError) and twin)
            or _gave_up_starting(exc, inc.store)
        )
        if inc.state != "killed":
            inc.state = "crashed"
        self.recorder.action(inc.actor, "crash-expected" if expected else "crash", _describe(exc))

    def live(self) -> list[_Incarnation]:
        return [i for i in self.incarnations if i.live]

    # -- actions ------------------------------------------------------------------------

    def act(self, nursery: trio.Nursery, what: ActionKind, target: str, duration: float) -> bool:
        """Do one action; False when it cannot be done now (nobody to do it to)."""
        live = self.live()
        by_instance = {i.instance: i for i in live}
        victim = by_instance.get(target) if target else None
        if what in ("join", "restart", "duplicate"):
            return self._grow(nursery, what, target)
        if victim is None:
            if target or not live:
                return False
            victim = self.rng.choice(live)
        if what == "kill":
            # Cut off first, then thaw: calls a frozen victim had in flight fail instead of
            # landing, as a SIGKILLed process's unsent requests would.
            victim.store.partition()
            victim.store.thaw()
            victim.state = "killed"
            victim.scope.cancel()
            self.recorder.action(victim.actor, "kill")
        elif what == "leave":
            victim.state = "leaving"
            victim.scope.cancel()
            self.recorder.action(victim.actor, "leave")
        elif what == "freeze":
            victim.store.freeze()
            victim.frozen_until = max(victim.frozen_until, trio.current_time() + duration)
            self.recorder.action(victim.actor, "freeze", f"{duration:g}s")
            nursery.start_soon(self._later, duration, victim, "thaw")
        elif what == "partition":
            self._cut(nursery, victim, duration)
            self.recorder.action(victim.actor, "partition", f"{duration:g}s")
        elif what == "outage":
            self.recorder.action("store", "outage", f"{duration:g}s")
            for inc in live:
                self._cut(nursery, inc, duration)
        return True

    def _grow(self, nursery: trio.Nursery, what: ActionKind, target: str) -> bool:
        live = self.live()
        if what == "duplicate":
            if not live:
                return False
            instance = target or self.rng.choice(live).instance
            self.duplicated.add(instance)
            self.start(nursery, instance, "duplicate")
            return True
        if len(live) >= self.scenario.max_workers and not target:
            return False
        if what == "join":
            self.start(nursery, target or self.new_instance())
            return True
        # Restart only an instance none of whose lives can still write: a killed one is cut
        # off for good, but one still leaving (or still running) would make two live
        # processes share the id, which the protocol refuses by design ("duplicate" does that
        # on purpose).
        alive = {i.instance for i in self.incarnations if i.state in ("running", "leaving")}
        dead = sorted({i.instance for i in self.incarnations if i.state == "killed"} - alive)
        if target:
            if target in alive:
                return False
            self.start(nursery, target, "restart")
            return True
        if not dead:
            return False
        self.start(nursery, self.rng.choice(dead), "restart")
        return True

    def _cut(self, nursery: trio.Nursery, inc: _Incarnation, duration: float) -> None:
        inc.store.partition()
        inc.cut_until = max(inc.cut_until, trio.current_time() + duration)
        nursery.start_soon(self._later, duration, inc, "heal")

    async def _later(self, delay: float, inc: _Incarnation, what: str) -> None:
        await trio.sleep(delay)
        if inc.state == "killed" or self.calm:
            return  # killed stays cut off; calm_down already ended every stall
        now = trio.current_time()
        if what == "thaw" and now >= inc.frozen_until:
            inc.store.thaw()
            self.recorder.action(inc.actor, what)
        elif what == "heal" and now >= inc.cut_until:
            inc.store.heal()
            self.recorder.action(inc.actor, what)

    # -- the two phases -----------------------------------------------------------------

    async def chaos(self, nursery: trio.Nursery) -> None:
        scenario = self.scenario
        if scenario.script is not None:
            await self._scripted(nursery, scenario.script)
            return
        kinds = [k for k, w in scenario.weights if w > 0]
        weights = [w for _, w in scenario.weights if w > 0]
        end = trio.current_time() + scenario.chaos_seconds
        lease = scenario.lease
        while kinds:
            await trio.sleep(self.rng.uniform(*scenario.action_gap))
            if trio.current_time() >= end:
                break
            what = self.rng.choices(kinds, weights)[0]
            # Half the stalls outlast the lease: the worker wakes as a zombie.
            duration = self.rng.choice([lease / 3, lease * 0.9, lease * 1.5, lease * 3])
            self.act(nursery, what, "", duration)
        await trio.sleep_until(end)

    async def _scripted(self, nursery: trio.Nursery, script: tuple[Scripted, ...]) -> None:
        start = trio.current_time()
        for step in sorted(script, key=lambda s: s.at):
            await trio.sleep_until(start + step.at)
            if not self.act(nursery, step.what, step.target, step.duration):
                raise RuntimeError(f"scripted action {step} could not be done")
        await trio.sleep_until(start + self.scenario.chaos_seconds)

    def calm_down(self, nursery: trio.Nursery) -> None:
        self.calm = True
        self.recorder.action("sim", "calm")
        for inc in self.incarnations:
            if inc.state == "killed":
                continue
            inc.store.rates = FaultRates(silent_expiry=inc.store.rates.silent_expiry)
            inc.store.thaw()
            inc.store.heal()
        if not [i for i in self.incarnations if i.state in ("running", "verdict")]:
            self.start(nursery, self.new_instance())

    async def settle(self, nursery: trio.Nursery) -> bool:
        with trio.move_on_after(self.scenario.bound) as scope:
            while True:
                # Checked before "nothing pending": when the last live worker dies of an
                # expected cause (a duplicate id) after the calm, everything is done and
                # nobody reached the verdict; the job still needs a worker to reach it.
                if not any(i.state in ("running", "verdict") for i in self.incarnations):
                    self.start(nursery, self.new_instance())
                    continue
                pending = [i for i in self.incarnations if not i.done.is_set()]
                if not pending:
                    break
                await _any_done(pending)
        return not scope.cancelled_caught

    def stop_all(self) -> None:
        for inc in self.incarnations:
            if not inc.done.is_set():
                inc.state = "leaving" if inc.state == "running" else inc.state
                inc.scope.cancel()

    async def final(self, terminated: bool) -> Final:
        async with self.client() as store:
            return await final_listing(
                store,
                self.scenario.job,
                expected=self.scenario.workload.split_ids,
                terminated=terminated,
                bound=self.scenario.bound,
            )


async def _any_done(incarnations: list[_Incarnation]) -> None:
    async with trio.open_nursery() as nursery:
        for inc in incarnations:

            async def wait(inc: _Incarnation = inc) -> None:
                await inc.done.wait()
                nursery.cancel_scope.cancel()

            nursery.start_soon(wait)


def _unwrapped(store: Store) -> Store:
    return store


def _gave_up_starting(exc: BaseException, store: FaultyStore) -> bool:
    # Startup retries a bounded number of times and then fails, by design; a worker whose
    # store was made to fail that often is expected to give up.
    return (
        isinstance(exc, FatalCoordinationError)
        and "did not succeed in" in str(exc)
        and bool(store.injected)
    )


def _describe(exc: BaseException, top: bool = True) -> str:
    if isinstance(exc, BaseExceptionGroup):
        inner = "; ".join(_describe(e, top=False) for e in exc.exceptions)
        where = " leaked from run_worker" if top else ""
        return f"{type(exc).__name__}{where} [{inner}]"
    return f"{type(exc).__name__}: {exc}"


async def _run_phases(fleet: _Fleet, nursery: trio.Nursery) -> None:
    for _ in range(fleet.scenario.initial_workers):
        fleet.start(nursery, fleet.new_instance())
    await fleet.chaos(nursery)
    fleet.calm_down(nursery)


@attrs.frozen
class SimRun:
    """What one simulated run produced: its history and the faults it injected, by kind."""

    history: History
    faults: dict[str, int]
    seconds: float
    """Simulated seconds the run took."""


async def simulate(
    scenario: Scenario,
    history: History | None = None,
    wrap_store: Callable[[Store], Store] | None = None,
) -> SimRun:
    """Run ``scenario`` to its end and return what it recorded (call under a MockClock).

    Events go to ``history`` as they happen (a new one if None), so a run that never ends
    still leaves what it did up to then. ``wrap_store`` wraps each worker's store client
    beneath the recorder (to run the fleet on a store of your own making, say a broken one).
    """
    started = trio.current_time()
    if history is None:
        history = History(job=scenario.job, seed=scenario.seed)
    fleet = _Fleet(scenario, history, wrap_store or _unwrapped)
    terminated = False
    async with trio.open_nursery() as nursery:
        await _run_phases(fleet, nursery)
        terminated = await fleet.settle(nursery)
        fleet.stop_all()
    history.append(await fleet.final(terminated))
    faults: collections.Counter[str] = collections.Counter()
    for inc in fleet.incarnations:
        faults.update(inc.store.injected)
    for event in history.of(Action):
        if event.what in _COUNTED_ACTIONS:
            faults[_COUNTED_ACTIONS[event.what]] += 1
    return SimRun(history, dict(sorted(faults.items())), trio.current_time() - started)


_COUNTED_ACTIONS = {
    "kill": "kill",
    "restart": "restart",
    "leave": "leave",
    "outage": "outage",
    "duplicate": "duplicate_instance",
}
"""Actions counted among the faults (the store wrapper counts its own), by report name."""
