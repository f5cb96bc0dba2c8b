"""The chaos actions of a simulated fleet, decided once for both engines.

Both engines (:mod:`spate_testing.sim._fleet` on Trio, :mod:`spate_testing.sim._machines` on the
discrete-event scheduler) run the same chaos on their workers: join, kill, restart, leave,
freeze, partition, outage, duplicate (see :data:`~spate_testing.sim._scenario.ACTIONS`), drawn
the same way from the scenario's driver generator, with the same rules for who may be
restarted and when a stall ends. :class:`FleetActions` holds those decisions; an engine
supplies its lives and the few things only it can do (start a worker, kill one, have one
leave, run something later).

Around splitting the driver also strikes on cue (:class:`~spate_testing.sim._scenario.
SplitFaults`): the handlers call its hooks (:class:`~spate_testing.sim._handlers.SplitHooks`)
as a split is sent, lands and is heard, and as a request is told, and each hook draws from a
generator of its own whether to kill, freeze or partition someone there.
"""

from __future__ import annotations

import abc
import collections
import itertools
import random
from collections.abc import Callable
from typing import ClassVar, Generic, Protocol, TypeVar

from spate_testing.faults import FaultRates
from spate_testing.sim._history import Action, History
from spate_testing.sim._scenario import ActionKind, Scenario

__all__ = ["FleetActions", "Life", "Switches"]


class Switches(Protocol):
    """A worker's store faults, as a chaos driver throws them (FaultyStore or a model link)."""

    rates: FaultRates

    def freeze(self) -> None:
        """Stall every call until the thaw."""
        ...

    def thaw(self) -> None:
        """Let stalled calls go on."""
        ...

    def partition(self) -> None:
        """Cut the worker off from the store."""
        ...

    def heal(self) -> None:
        """End the cut."""
        ...


class Life(Protocol):
    """One incarnation of a worker, as the chaos driver sees it."""

    frozen_until: float
    cut_until: float

    @property
    def actor(self) -> str:
        """Its name in the history (``"w3#2"``)."""
        ...

    @property
    def instance(self) -> str:
        """Its instance id."""
        ...

    @property
    def state(self) -> str:
        """``running``, ``leaving``, ``killed``, ``verdict``... (engines add their own)."""
        ...

    @property
    def switches(self) -> Switches:
        """Its store faults."""
        ...


L = TypeVar("L", bound=Life)


class FleetActions(abc.ABC, Generic[L]):
    """The chaos driver's decisions over an engine's lives (see the module docstring)."""

    LIVE: ClassVar[frozenset[str]] = frozenset({"running"})
    """States in which a life can be acted on."""
    ALIVE: ClassVar[frozenset[str]] = frozenset({"running", "leaving"})
    """States in which a life may still write (its instance must not be restarted)."""

    def __init__(self, scenario: Scenario, history: History) -> None:
        self.scenario = scenario
        self.history = history
        self.rng = random.Random(f"{scenario.seed}/driver")
        self.calm = False
        self.duplicated: set[str] = set()
        self._instances = itertools.count()
        self._split_rng = random.Random(f"{scenario.seed}/split-chaos")
        self.struck: collections.Counter[str] = collections.Counter()
        """The faults struck around splitting, by kind (reported with the injected ones)."""

    # -- what an engine supplies --------------------------------------------------------------

    @abc.abstractmethod
    def lives(self) -> list[L]:
        """Every life so far, in the order they started."""

    @abc.abstractmethod
    def now(self) -> float:
        """The simulated time."""

    @abc.abstractmethod
    def after(self, delay: float, fn: Callable[[], None]) -> None:
        """Call ``fn`` ``delay`` seconds from now."""

    @abc.abstractmethod
    def start(self, instance: str, how: str = "start") -> None:
        """Start a new life of ``instance`` (``how``: start, restart, duplicate)."""

    @abc.abstractmethod
    def kill(self, life: L) -> None:
        """Kill ``life``: cut off from the store first, then gone (no hand-back)."""

    @abc.abstractmethod
    def leave(self, life: L) -> None:
        """Have ``life`` leave gracefully."""

    def leader(self) -> L | None:
        """The life leading the job now, if the engine can tell (the Trio engine cannot)."""
        return None

    # -- shared -------------------------------------------------------------------------------

    def action(self, actor: str, what: str, detail: str = "") -> None:
        """Record something done to ``actor``."""
        self.history.append(Action(at=self.now(), actor=actor, what=what, detail=detail))

    def new_instance(self) -> str:
        """A fresh instance id."""
        return f"w{next(self._instances)}"

    def live(self) -> list[L]:
        """The lives that can be acted on now."""
        return [life for life in self.lives() if life.state in self.LIVE]

    def act(self, what: ActionKind, target: str, duration: float) -> bool:
        """Do one action; False when it cannot be done now (nobody to do it to)."""
        live = self.live()
        if what in ("join", "restart", "duplicate"):
            return self._grow(what, target)
        victim = {life.instance: life for life in live}.get(target) if target else None
        if victim is None:
            if target or not live:
                return False
            victim = self.rng.choice(live)
        if what == "kill":
            self.kill(victim)
            self.action(victim.actor, "kill")
        elif what == "leave":
            self.leave(victim)
            self.action(victim.actor, "leave")
        elif what == "freeze":
            victim.switches.freeze()
            victim.frozen_until = max(victim.frozen_until, self.now() + duration)
            self.action(victim.actor, "freeze", f"{duration:g}s")
            self.after(duration, lambda: self._end_stall(victim, "thaw"))
        elif what == "partition":
            self._cut(victim, duration)
            self.action(victim.actor, "partition", f"{duration:g}s")
        elif what == "outage":
            self.action("store", "outage", f"{duration:g}s")
            for life in live:
                self._cut(life, duration)
        return True

    def _grow(self, what: ActionKind, target: str) -> bool:
        live = self.live()
        if what == "duplicate":
            if not live:
                return False
            instance = target or self.rng.choice(live).instance
            self.duplicated.add(instance)
            self.start(instance, "duplicate")
            return True
        if len(live) >= self.scenario.max_workers and not target:
            return False
        if what == "join":
            self.start(target or self.new_instance())
            return True
        # Restart only an instance none of whose lives can still write: a killed one is cut
        # off for good, but one still leaving (or still running) would make two live
        # processes share the id, which the protocol refuses by design ("duplicate" does that
        # on purpose).
        lives = self.lives()
        alive = {life.instance for life in lives if life.state in self.ALIVE}
        dead = sorted({life.instance for life in lives if life.state == "killed"} - alive)
        if target:
            if target in alive:
                return False
            self.start(target, "restart")
            return True
        if not dead:
            return False
        self.start(self.rng.choice(dead), "restart")
        return True

    def _cut(self, life: L, duration: float) -> None:
        life.switches.partition()
        life.cut_until = max(life.cut_until, self.now() + duration)
        self.after(duration, lambda: self._end_stall(life, "heal"))

    def _end_stall(self, life: L, what: str) -> None:
        # Overlapping stalls and cuts end when the last of them does.
        if life.state == "killed" or self.calm:
            return  # killed stays cut off; the calm already ended every stall
        now = self.now()
        if what == "thaw" and now >= life.frozen_until:
            life.switches.thaw()
            self.action(life.actor, what)
        elif what == "heal" and now >= life.cut_until:
            life.switches.heal()
            self.action(life.actor, what)

    # -- around splitting (the handlers' SplitHooks) -----------------------------------------

    def _striking(self, actor: str, rate: float) -> L | None:
        """The live life of ``actor`` if a strike of probability ``rate`` falls on it now."""
        if self.calm or rate <= 0.0 or self._split_rng.random() >= rate:
            return None
        return next((life for life in self.live() if life.actor == actor), None)

    def _stall(self, life: L, why: str) -> None:
        """Freeze (two times in three) or partition ``life`` for a drawn while."""
        lease = self.scenario.lease
        duration = self._split_rng.choice([lease / 3, lease * 0.9, lease * 1.5, lease * 3])
        if self._split_rng.random() < 2 / 3:
            life.switches.freeze()
            life.frozen_until = max(life.frozen_until, self.now() + duration)
            self.action(life.actor, "freeze", f"{duration:g}s, {why}")
            self.after(duration, lambda: self._end_stall(life, "thaw"))
        else:
            self._cut(life, duration)
            self.action(life.actor, "partition", f"{duration:g}s, {why}")

    def splitting(self, actor: str) -> None:
        """``actor``'s handler is about to send a split write: maybe make it a zombie's."""
        life = self._striking(actor, self.scenario.split_faults.zombie)
        if life is None:
            return
        self.struck["split_zombie"] += 1
        if self._split_rng.random() < 0.4:
            # A pod restarted while its old process lives on: the twin reclaims the old one's
            # splits at a higher epoch while the old one's split write waits in a short stall
            # (too short to fence itself), so that write meets the twin's record and must
            # raise Fenced. One of the two then stops, as a duplicate id must.
            self.duplicated.add(life.instance)
            self.start(life.instance, "duplicate")
            duration = 0.9 * self.scenario.lease
            life.switches.freeze()
            life.frozen_until = max(life.frozen_until, self.now() + duration)
            self.action(life.actor, "freeze", f"{duration:g}s, as its split is sent, a twin up")
            self.after(duration, lambda: self._end_stall(life, "thaw"))
            return
        self._stall(life, "as its split is sent")

    def split_landed(self, actor: str) -> bool:
        """``actor``'s split write just landed: maybe kill it or lose the reply (True)."""
        faults = self.scenario.split_faults
        life = self._striking(actor, faults.kill_before_reply)
        if life is not None:
            self.struck["split_kill_before_reply"] += 1
            self.kill(life)
            self.action(life.actor, "kill", "its split landed, before it heard")
            return True
        if self._striking(actor, faults.lost_reply) is not None:
            self.struck["split_lost_reply"] += 1
            return True
        return False

    def split_done(self, actor: str) -> None:
        """``actor``'s handler heard its split landed: maybe kill it before it commits again."""
        life = self._striking(actor, self.scenario.split_faults.kill_after)
        if life is not None:
            self.struck["split_kill_after"] += 1
            self.kill(life)
            self.action(life.actor, "kill", "its split landed and was heard, before a commit")

    def split_asked(self, actor: str) -> None:
        """``actor``'s handler was told of a split request: maybe fail the leader over now."""
        if self._striking(actor, self.scenario.split_faults.leader) is None:
            return
        leader = self.leader()
        if leader is None or leader.state not in self.LIVE:
            return
        self.struck["leader_fault_on_request"] += 1
        if self._split_rng.random() < 0.5:
            self.kill(leader)
            self.action(leader.actor, "kill", "the leader, while its split request stands")
        else:
            self._stall(leader, "the leader, while its split request stands")

    @property
    def eventful(self) -> bool:
        """Whether the scenario draws random actions at all."""
        return any(weight > 0 for _, weight in self.scenario.weights)

    def draw(self) -> tuple[ActionKind, float] | None:
        """The next random action and its duration (None when the scenario has none)."""
        scenario = self.scenario
        kinds = [k for k, w in scenario.weights if w > 0]
        weights = [w for _, w in scenario.weights if w > 0]
        if not kinds:
            return None
        what = self.rng.choices(kinds, weights)[0]
        # Half the stalls outlast the lease: the worker wakes as a zombie.
        lease = scenario.lease
        return what, self.rng.choice([lease / 3, lease * 0.9, lease * 1.5, lease * 3])

    def gap(self) -> float:
        """The random wait before the next action."""
        return self.rng.uniform(*self.scenario.action_gap)

    def calm_switches(self) -> None:
        """Every fault stops (but silent expiry, a property of the store): the settle phase."""
        self.calm = True
        self.action("sim", "calm")
        for life in self.lives():
            if life.state == "killed":
                continue
            switches = life.switches
            switches.rates = FaultRates(silent_expiry=switches.rates.silent_expiry)
            switches.thaw()
            switches.heal()
