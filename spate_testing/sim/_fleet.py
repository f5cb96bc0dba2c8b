"""The simulator's Trio engine: a whole fleet of ``run_worker`` calls in one Trio run.

:func:`simulate` runs one :class:`~spate_testing.sim._scenario.Scenario` and returns its
:class:`~spate_testing.sim._history.History`. It must run under a ``MockClock`` (see
:func:`spate_testing.sim._runner.run_scenario`). Unlike the machine engine
(:mod:`spate_testing.sim._machines`), it runs the real runtime, handlers and store client;
the price is that Trio decides the order of tasks runnable at one instant, and (on purpose)
not the same way twice, so a seed names a scenario here, not one exact interleaving.

Every worker incarnation talks to the shared :class:`~spate_stores.memory.MemoryServer`
through its own stack: ``run_worker`` -> ``FaultyStore`` (its faults, its freeze and
partition switches) -> ``RecordingStore`` (the true outcome of each write) -> its own
``MemoryStore`` client. The run has two phases: *chaos*, where the driver (random, or a
script) joins, kills, restarts, freezes and partitions workers while the random store faults
run; then *settle*, where every fault stops and the job has ``scenario.bound`` seconds of
simulated time to reach its verdict. The final listing is then read straight from the
server and appended as the history's :class:`~spate_testing.sim._history.Final`.
"""

from __future__ import annotations

import collections
import logging
import random
from collections.abc import Callable
from typing import Literal

import attrs
import trio

from spate import FatalCoordinationError, run_worker
from spate._core.records import Keys
from spate.store import Keyspace, Store
from spate_stores.memory import MemoryServer, MemoryStore
from spate_testing.faults import FaultRates, FaultyStore
from spate_testing.sim._actions import FleetActions
from spate_testing.sim._history import Action, Final, History, ItemSpace, Split, StoreWrite
from spate_testing.sim._recorder import Recorder, RecordingMetrics, final_listing
from spate_testing.sim._scenario import Scenario

__all__ = ["SimRun", "note_item_space", "simulate", "split_counts", "worker_nonce"]

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
    frozen_until: float = 0.0
    cut_until: float = 0.0

    @property
    def switches(self) -> FaultyStore:
        return self.store


class _Fleet(FleetActions[_Incarnation]):
    def __init__(
        self,
        scenario: Scenario,
        history: History,
        wrap_store: Callable[[Store], Store],
        nursery: trio.Nursery,
    ) -> None:
        super().__init__(scenario, history)
        self.wrap_store = wrap_store
        self.nursery = nursery
        self.recorder = Recorder(history)
        self.server = MemoryServer()
        self.incarnations: list[_Incarnation] = []
        self.count: dict[str, int] = {}

    # -- lives --------------------------------------------------------------------------

    def client(self) -> MemoryStore:
        return MemoryStore(server=self.server, ephemeral_ttl=self.scenario.lease)

    def lives(self) -> list[_Incarnation]:
        return self.incarnations

    def now(self) -> float:
        return trio.current_time()

    def after(self, delay: float, fn: Callable[[], None]) -> None:
        async def later() -> None:
            await trio.sleep(delay)
            fn()

        self.nursery.start_soon(later)

    def kill(self, life: _Incarnation) -> None:
        # Cut off first, then thaw: calls a frozen victim had in flight fail instead of
        # landing, as a SIGKILLed process's unsent requests would.
        life.store.partition()
        life.store.thaw()
        life.state = "killed"
        life.scope.cancel()

    def leave(self, life: _Incarnation) -> None:
        life.state = "leaving"
        life.scope.cancel()

    def leader(self) -> _Incarnation | None:
        # The incarnation whose write last won the leader key (it may have lapsed since):
        # good enough to aim a failover at.
        key = Keys(self.scenario.job).leader
        for event in reversed(self.history.events):
            if (
                isinstance(event, StoreWrite)
                and event.key == key
                and event.keyspace == Keyspace.EPHEMERAL.value
                and event.outcome == "won"
            ):
                if event.op == "delete":
                    return None
                return next((i for i in self.incarnations if i.actor == event.actor), None)
        return None

    def start(self, instance: str, how: str = "start") -> None:
        nursery = self.nursery
        life = self.count.get(instance, 0) + 1
        self.count[instance] = life
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
        inc = _Incarnation(
            actor, instance, store, self.recorder.metrics(actor, self.scenario.config)
        )
        self.incarnations.append(inc)
        self.action(actor, how)
        nursery.start_soon(self._life, inc, name=f"sim worker {actor}")

    async def _life(self, inc: _Incarnation) -> None:
        handler = self.recorder.handler(self.scenario.workload.handle, inc.actor, hooks=self)
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
        self.action(inc.actor, "crash-expected" if expected else "crash", _describe(exc))

    # -- the two phases -----------------------------------------------------------------

    async def chaos(self) -> None:
        scenario = self.scenario
        start = trio.current_time()
        if scenario.script is not None:
            for step in sorted(scenario.script, key=lambda s: s.at):
                await trio.sleep_until(start + step.at)
                if not self.act(step.what, step.target, step.duration):
                    raise RuntimeError(f"scripted action {step} could not be done")
            await trio.sleep_until(start + scenario.chaos_seconds)
            return
        end = start + scenario.chaos_seconds
        while self.eventful:
            await trio.sleep(self.gap())
            if trio.current_time() >= end:
                break
            drawn = self.draw()
            assert drawn is not None
            self.act(drawn[0], "", drawn[1])
        await trio.sleep_until(end)

    def calm_down(self) -> None:
        self.calm_switches()
        if not [i for i in self.incarnations if i.state in ("running", "verdict")]:
            self.start(self.new_instance())

    async def settle(self) -> bool:
        with trio.move_on_after(self.scenario.bound) as scope:
            while True:
                # Checked before "nothing pending": when the last live worker dies of an
                # expected cause (a duplicate id) after the calm, everything is done and
                # nobody reached the verdict; the job still needs a worker to reach it.
                if not any(i.state in ("running", "verdict") for i in self.incarnations):
                    self.start(self.new_instance())
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


async def _run_phases(fleet: _Fleet) -> None:
    for _ in range(fleet.scenario.initial_workers):
        fleet.start(fleet.new_instance())
    await fleet.chaos()
    fleet.calm_down()


@attrs.frozen
class SimRun:
    """What one simulated run produced: its history and the faults it injected, by kind."""

    history: History
    faults: dict[str, int]
    seconds: float
    """Simulated seconds the run took."""
    splits: dict[str, int] = attrs.field(factory=dict)
    """How its handlers' split calls ended, by outcome (see :func:`split_counts`)."""


def note_item_space(scenario: Scenario, history: History, at: float) -> None:
    """Open a splittable workload's history with its item space (for ``range-partition``)."""
    workload = scenario.workload
    if workload.splittable:
        start, end = workload.item_space
        history.append(ItemSpace(at=at, start=start, end=end))


def split_counts(history: History) -> dict[str, int]:
    """The split calls of ``history`` by outcome, and how many the leader had asked for.

    The outcomes are ``split``, ``fenced`` and ``abandoned``; ``asked`` counts the calls made
    on a request.
    """
    counts: collections.Counter[str] = collections.Counter()
    for event in history.of(Split):
        counts[event.outcome] += 1
        counts["asked"] += event.asked
    return dict(sorted(counts.items()))


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
    terminated = False
    note_item_space(scenario, history, started)
    async with trio.open_nursery() as nursery:
        fleet = _Fleet(scenario, history, wrap_store or _unwrapped, nursery)
        await _run_phases(fleet)
        terminated = await fleet.settle()
        fleet.stop_all()
    history.append(await fleet.final(terminated))
    faults: collections.Counter[str] = collections.Counter()
    for inc in fleet.incarnations:
        faults.update(inc.store.injected)
    for event in history.of(Action):
        if event.what in _COUNTED_ACTIONS:
            faults[_COUNTED_ACTIONS[event.what]] += 1
    faults.update(fleet.struck)
    return SimRun(
        history,
        dict(sorted(faults.items())),
        trio.current_time() - started,
        splits=split_counts(history),
    )


_COUNTED_ACTIONS = {
    "kill": "kill",
    "restart": "restart",
    "leave": "leave",
    "outage": "outage",
    "duplicate": "duplicate_instance",
}
"""Actions counted among the faults (the store wrapper counts its own), by report name."""
