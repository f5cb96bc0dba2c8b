"""A whole fleet of coordination machines on one discrete-event scheduler: the replayable simulator.

:func:`simulate_machines` runs one :class:`~spate_testing.sim._scenario.Scenario` the way
:func:`spate_testing.sim._fleet.simulate` does (the same workers, faults, chaos actions and
phases, recorded into the same :class:`~spate_testing.sim._history.History` for the same
checker), but with no event loop: each worker is a :class:`~spate_testing.sim._process.SimWorker`
driving the real :class:`~spate._core.machine.Machine` with an injected clock and nonce, the
store is the synchronous :class:`~spate_testing.sim._model.ModelStore`, and every wait is a
callback on one :class:`~spate_testing.sim._clockwork.Scheduler`. What runs next is decided by
due time and scheduling order alone, so a run is a pure function of its scenario: a seed
replays bit for bit, in any process, with nothing of Trio's (or anyone's) patched.
"""

from __future__ import annotations

import collections
import random
from collections.abc import Callable
from functools import partial

import attrs

from spate import FatalCoordinationError
from spate._core.records import Keys
from spate.store import EphemeralSemantics, Keyspace
from spate_testing.faults import FaultRates
from spate_testing.sim._actions import FleetActions
from spate_testing.sim._clockwork import Scheduler
from spate_testing.sim._fleet import (
    FINGERPRINT,
    SimRun,
    note_item_space,
    split_counts,
    worker_nonce,
)
from spate_testing.sim._history import Action, Final, History
from spate_testing.sim._model import Link, ModelStore
from spate_testing.sim._process import SimWorker
from spate_testing.sim._recorder import RecordingMetrics, listing_of
from spate_testing.sim._scenario import Scenario, Scripted

__all__ = ["simulate_machines"]


@attrs.define(eq=False)
class _Life:
    worker: SimWorker
    frozen_until: float = 0.0
    cut_until: float = 0.0
    done: bool = False

    @property
    def actor(self) -> str:
        return self.worker.actor

    @property
    def instance(self) -> str:
        return self.worker.instance

    @property
    def state(self) -> str:
        return self.worker.state

    @property
    def switches(self) -> Link:
        return self.worker.link


class _Fleet(FleetActions[_Life]):
    # A worker still starting can be acted on (and may still write) too.
    LIVE = frozenset({"starting", "running"})
    ALIVE = frozenset({"starting", "running", "leaving"})

    def __init__(
        self,
        scenario: Scenario,
        history: History,
        scheduler: Scheduler,
        model: type[ModelStore],
    ) -> None:
        super().__init__(scenario, history)
        self.scheduler = scheduler
        config = scenario.config.resolve(scenario.lease)
        assert config.op_timeout is not None
        self.config = config
        self.model = model(
            scheduler,
            ttl=scenario.lease,
            history=history,
            semantics=EphemeralSemantics.SESSION
            if scenario.sessions
            else EphemeralSemantics.PER_KEY,
        )
        self._lives: list[_Life] = []
        self.count: dict[str, int] = {}

    def lives(self) -> list[_Life]:
        return self._lives

    def now(self) -> float:
        return self.scheduler.now()

    def after(self, delay: float, fn: Callable[[], None]) -> None:
        self.scheduler.later(delay, fn)

    def kill(self, life: _Life) -> None:
        life.worker.kill()

    def leave(self, life: _Life) -> None:
        life.worker.leave()

    def leader(self) -> _Life | None:
        return next((life for life in self._lives if not life.done and life.worker.leading), None)

    # -- lives ---------------------------------------------------------------------------------

    def start(self, instance: str, how: str = "start") -> None:
        life = self.count.get(instance, 0) + 1
        self.count[instance] = life
        actor = f"{instance}#{life}"
        rates = self.scenario.rates
        if self.scenario.sessions:
            rates = attrs.evolve(rates, silent_expiry=False)  # a session store's expiry is seen
        if self.calm:
            rates = FaultRates(silent_expiry=rates.silent_expiry)
        assert self.config.op_timeout is not None
        link = Link(
            self.model,
            self.scheduler,
            actor=actor,
            rng=random.Random(f"{self.scenario.seed}/{actor}"),
            rates=rates,
            op_timeout=self.config.op_timeout,
        )
        worker = SimWorker(
            scheduler=self.scheduler,
            link=link,
            history=self.history,
            actor=actor,
            instance=instance,
            job=self.scenario.job,
            workload=self.scenario.workload,
            planner=self.scenario.workload.planner(),
            config=self.config,
            fingerprint=FINGERPRINT,
            leave_deadline=self.scenario.leave_deadline,
            metrics=RecordingMetrics(
                actor, history=self.history, config=self.config, clock=self.scheduler.now
            ),
            nonce=worker_nonce(self.scenario.seed, actor),
            on_exit=self._exited,
            hooks=self,
        )
        link.split_landed = partial(self.split_landed, actor)
        self._lives.append(_Life(worker))
        self.action(actor, how)
        self.scheduler.soon(worker.guarded(worker.begin))

    def _exited(self, worker: SimWorker, error: BaseException | None) -> None:
        life = next(life for life in self._lives if life.worker is worker)
        life.done = True
        if error is None:
            return
        # A killed worker may die of anything; one sharing its instance id with another live
        # one must stop with FatalCoordinationError; one whose store failed every startup try
        # gives up by design. Any other death is a finding.
        twin = worker.instance in self.duplicated or any(
            other is not life and other.worker.instance == worker.instance and not other.done
            for other in self._lives
        )
        expected = (
            worker.state == "killed"
            or (isinstance(error, FatalCoordinationError) and twin)
            or (
                isinstance(error, FatalCoordinationError)
                and "did not succeed in" in str(error)
                and bool(worker.link.injected)
            )
        )
        self.action(
            worker.actor,
            "crash-expected" if expected else "crash",
            f"{type(error).__name__}: {error}",
        )

    # -- the phases ----------------------------------------------------------------------------

    def chaos(self) -> None:
        scenario = self.scenario
        if scenario.script is not None:
            for step in sorted(scenario.script, key=lambda s: s.at):
                self.scheduler.at(step.at, partial(self._scripted, step))
            return
        if not self.eventful:
            return
        end = scenario.chaos_seconds

        def next_action() -> None:
            if self.scheduler.now() >= end:
                return
            drawn = self.draw()
            assert drawn is not None
            self.act(drawn[0], "", drawn[1])
            self.scheduler.later(self.gap(), next_action)

        self.scheduler.later(self.gap(), next_action)

    def _scripted(self, step: Scripted) -> None:
        if not self.act(step.what, step.target, step.duration):
            raise RuntimeError(f"scripted action {step} could not be done")

    def calm_down(self) -> None:
        self.calm_switches()
        if not [life for life in self._lives if life.state in ("running", "verdict")]:
            self.start(self.new_instance())

    def settled(self) -> bool:
        # Checked before "nothing pending": when the last live worker dies of an expected
        # cause after the calm, nobody reached the verdict; the job still needs a worker.
        if not any(life.worker.state in ("starting", "running", "verdict") for life in self._lives):
            self.start(self.new_instance())
            return False
        return all(life.done for life in self._lives)

    def stop_all(self) -> None:
        for life in self._lives:
            if not life.done:
                life.worker.leave()

    def final(self, terminated: bool) -> Final:
        keys = Keys(self.scenario.job)
        return listing_of(
            self.scenario.job,
            self.model.get(Keyspace.DURABLE, keys.plan),
            self.model.list(Keyspace.DURABLE, keys.split_prefix),
            at=self.scheduler.now(),
            expected=self.scenario.workload.split_ids,
            terminated=terminated,
            bound=self.scenario.bound,
        )


def simulate_machines(
    scenario: Scenario,
    history: History | None = None,
    *,
    model: type[ModelStore] = ModelStore,
) -> SimRun:
    """Run ``scenario`` on the discrete-event scheduler and return what it recorded.

    Events go to ``history`` as they happen (a new one if None), so a run that never ends
    still leaves what it did up to then. ``model`` is the store model's class (a subclass
    that breaks the contract shows what the checker catches).
    """
    if history is None:
        history = History(job=scenario.job, seed=scenario.seed)
    scheduler = Scheduler()
    fleet = _Fleet(scenario, history, scheduler, model)
    note_item_space(scenario, history, scheduler.now())
    for _ in range(scenario.initial_workers):
        fleet.start(fleet.new_instance())
    fleet.chaos()
    scheduler.run_until(scenario.chaos_seconds)
    fleet.calm_down()
    terminated = scheduler.run_until(scheduler.now() + scenario.bound, fleet.settled)
    fleet.stop_all()
    # The stragglers leave gracefully, as cancelling run_worker makes them (bounded).
    scheduler.run_until(
        scheduler.now() + scenario.leave_deadline + 1.0,
        lambda: all(life.done for life in fleet.lives()),
    )
    for life in fleet.lives():
        if not life.done:
            life.worker.stop(None)
    history.append(fleet.final(terminated))
    faults: collections.Counter[str] = collections.Counter()
    for life in fleet.lives():
        faults.update(life.worker.link.injected)
    for event in history.of(Action):
        if event.what in _COUNTED_ACTIONS:
            faults[_COUNTED_ACTIONS[event.what]] += 1
    faults.update(fleet.struck)
    return SimRun(
        history, dict(sorted(faults.items())), scheduler.now(), splits=split_counts(history)
    )


_COUNTED_ACTIONS = {
    "kill": "kill",
    "restart": "restart",
    "leave": "leave",
    "outage": "outage",
    "duplicate": "duplicate_instance",
}
"""Actions counted among the faults (the links count their own), by report name."""
