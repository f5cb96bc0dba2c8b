"""A simulated run's parameters, drawn from its seed (or written by hand for a regression).

:meth:`Scenario.from_seed` picks everything a run needs from one :class:`random.Random`: the
workload (bounded or open plan, split sizes, poison splits), the fleet (how many workers,
how many at most), the timings (lease, drain deadline, rebalance delay...), the store faults
every worker suffers (unavailability, lost replies, duplicate and dropped watch events,
latency, silent expiry), and how often the chaos driver acts (joins, kills, restarts,
graceful leaves, freezes, partitions, store outages).

Half the seeds draw a *splittable* workload (:class:`~spate_testing.sim._workload.Workload`'s
ranges, longer splits, sometimes one straggler) with the leader's split requests on, and
:class:`SplitFaults`: the chaos driver then also strikes around splits (a kill just after a
split landed, a zombie that splits, a split whose reply is lost, a leader failover while a
request stands). Those draws come from a generator of their own, so every other seed's
scenario is what it was.

A quarter of the seeds report *loads* (docs/balancing.md: the leader's balance rounds move splits by
them), from a generator of their own too; half of those run splits long enough for their
loads to be trusted and moved, under a longer, sparser chaos whose fleet grows back.

A regression scenario pins the shape of a bug instead: a fixed :attr:`Scenario.script` of
actions at chosen times replaces the random driver, so the scenario keeps meaning the same
thing when unrelated code changes the random draws.
"""

from __future__ import annotations

import itertools
import math
import random
from typing import Literal, TypeAlias

import attrs

from spate import Config
from spate_testing.faults import FaultRates
from spate_testing.sim._workload import Workload

__all__ = ["ACTIONS", "ActionKind", "Scenario", "Scripted", "SplitFaults"]

ActionKind: TypeAlias = Literal[
    "join", "kill", "restart", "leave", "freeze", "partition", "outage", "duplicate"
]
ACTIONS: tuple[ActionKind, ...] = (
    "join",
    "kill",
    "restart",
    "leave",
    "freeze",
    "partition",
    "outage",
    "duplicate",
)
"""What the chaos driver can do:

``join`` a new worker; ``kill`` one (cut off from the store, then cancelled: no hand-back);
``restart`` a killed one under the same instance id; ``leave`` gracefully (cancel
``run_worker``); ``freeze`` one (its store calls stall, then land late: a zombie);
``partition`` one from the store for a while; ``outage`` (every worker cut off at once);
``duplicate`` (a second live process under an existing instance id, which must be refused)."""


@attrs.frozen
class Scripted:
    """One scripted action: at ``at`` seconds, do ``what`` to ``target`` for ``duration``."""

    at: float
    what: ActionKind
    target: str = ""
    duration: float = 0.0


@attrs.frozen(kw_only=True)
class SplitFaults:
    """How often the chaos driver strikes around splitting, each a probability in [0, 1].

    Drawn per split call (or per request told to a handler), during the chaos phase only.
    """

    kill_before_reply: float = 0.0
    """Kill the owner the instant its split write lands, before it hears (machine engine)."""
    kill_after: float = 0.0
    """Kill the owner once it heard its split landed, before it commits again."""
    lost_reply: float = 0.0
    """A split write lands but its reply is lost: the caller retries (machine engine)."""
    zombie: float = 0.0
    """Make the owner a zombie just before its split write leaves: freeze or partition it, or
    freeze it while a twin under its instance id reclaims its splits (then its split raises
    Fenced)."""
    leader: float = 0.0
    """Kill or freeze the leader when a handler is told of its request (on the Trio engine:
    when the handler acts on it): a failover while the request stands."""

    def __attrs_post_init__(self) -> None:
        for field in attrs.fields(SplitFaults):
            value = getattr(self, field.name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"SplitFaults.{field.name} must be within [0, 1], not {value!r}")


@attrs.frozen(kw_only=True)
class Scenario:
    """Everything one simulated run does; a pure function of the seed unless scripted."""

    seed: int
    job: str = "sim"
    workload: Workload
    initial_workers: int
    max_workers: int
    lease: float
    config: Config
    rates: FaultRates
    chaos_seconds: float
    action_gap: tuple[float, float] = (1.0, 4.0)
    weights: tuple[tuple[ActionKind, int], ...] = ()
    bound: float = 180.0
    """Seconds of simulated time the job has to reach its verdict once the faults stop."""
    leave_deadline: float = 6.0
    script: tuple[Scripted, ...] | None = None
    split_faults: SplitFaults = SplitFaults()
    """The chaos around splitting (only a splittable workload splits)."""
    sessions: bool = False
    """Whether the store keeps ephemeral keys by session (etcd) rather than key by key.

    The machine engine's store model then binds every lease key to its writer's session,
    kept by keepalives; the Trio engine runs on the memory store, whose keys always expire
    one by one, and ignores it."""

    @classmethod
    def from_seed(cls, seed: int) -> Scenario:
        """Draw a scenario from ``seed``."""
        rng = random.Random(seed)
        lease = rng.choice([2.0, 3.0, 4.0])
        workload = _draw_workload(rng, seed)
        initial = rng.randint(1, 5)
        config = Config(
            lease_duration=lease,
            max_in_flight=rng.randint(1, 3),
            max_attempts=rng.randint(2, 4),
            replan_interval=rng.choice([1.0, 2.0, 3.0]),
            reconcile_interval=rng.choice([1.0, 2.0, 5.0]),
            rebalance_delay=rng.choice([0.0, 0.0, lease / 2, 2 * lease]),
            drain_deadline=rng.choice([lease / 2, lease, 2 * lease]),
            membership_debounce=rng.choice([0.0, 0.0, 0.25, 1.0]),
            planner_thread=False,
            # Drawn apart from the main draws, so every other choice of a seed stays what it
            # was before pages were drawn (the pinned regression seeds keep their scenarios).
            # Pages this small cut each backstop listing into many, with writes between them.
            list_page_size=random.Random(f"pages {seed}").choice([1, 2, 3, 5, 8, 1000]),
        )
        scenario = cls(
            seed=seed,
            workload=workload,
            initial_workers=initial,
            max_workers=max(initial, rng.randint(2, 6)),
            lease=lease,
            config=config,
            rates=_draw_rates(rng, lease),
            chaos_seconds=rng.choice([10.0, 20.0, 40.0, 60.0]),
            action_gap=(0.5, rng.choice([2.0, 4.0, 8.0])),
            weights=_draw_weights(rng),
            # Drawn from a generator of its own, so adding it left every other draw alone.
            sessions=random.Random(f"{seed}/sessions").random() < 0.5,
        )
        # So are the splitting draws: a seed that does not split is the scenario it was.
        split_rng = random.Random(f"{seed}/split")
        if split_rng.random() < 0.5:
            scenario = _splittable(scenario, split_rng)
        # And the load draws: a seed that reports no load is the scenario it was.
        load_rng = random.Random(f"{seed}/load")
        if load_rng.random() < LOAD_SHARE:
            scenario = _loaded(scenario, load_rng)
        return scenario


def _draw_workload(rng: random.Random, seed: int) -> Workload:
    count = rng.randint(1, 16)
    splits = [(f"s{i:02d}", rng.randint(1, 8), rng.randint(1, 3)) for i in range(count)]
    batches: tuple[tuple[tuple[str, int, int], ...], ...]
    if rng.random() < 0.5:
        batches = (tuple(splits),)
    else:
        cuts = sorted(rng.sample(range(1, count + 1), k=min(count, rng.randint(1, 3))))
        edges = [0, *cuts]
        if edges[-1] != count:
            edges.append(count)
        batches = tuple(tuple(splits[a:b]) for a, b in itertools.pairwise(edges))
        # An empty final batch still closes the plan; it stands for a planner that finds
        # nothing new on its last run.
        if rng.random() < 0.3:
            batches = (*batches, ())
    poison = frozenset(s for s, _, _ in splits if rng.random() < 0.08)
    step = rng.choice([0.1, 0.25, 0.5, 1.0])
    # Drawn from a generator of its own, so adding it left every other draw of a seed alone.
    stubborn_rng = random.Random(f"{seed}/stubborn")
    stubborn = frozenset(s for s, _, _ in splits if stubborn_rng.random() < 0.1)
    return Workload(batches=batches, poison=poison, stubborn=stubborn, step_seconds=step)


LOAD_SHARE = 0.25
"""The share of seeds whose handlers report loads: the leader balances by them."""


STRETCHED_SHARE = 0.5
"""The share of the load seeds whose splits last minutes (their loads are trusted, so rounds
move them) and whose chaos lasts minutes."""
GROWTH_WEIGHT = 3
"""A stretched seed's least weight of joins and restarts among its chaos actions."""
STRETCHED_SPLIT_SECONDS = 90.0
"""A stretched seed's splits last at least this long: trusted after a minute, then moved."""


def _loaded(scenario: Scenario, rng: random.Random) -> Scenario:
    """``scenario`` with loads reported (lognormal(0, 1) per planned split) and fast rounds.

    Rounds every 1-5 s so a run of a few minutes has many; a load is trusted after a minute
    (the meter's floor), so only the longer runs move anything, and half the load seeds are
    stretched to be such runs (see :data:`STRETCHED_SHARE`).
    """
    loads = tuple(
        (split, round(rng.lognormvariate(0.0, 1.0), 3)) for split in scenario.workload.split_ids
    )
    config = attrs.evolve(
        scenario.config,
        balance_interval=rng.choice([1.0, 2.0, 5.0]),
        load_band=rng.choice([0.05, 0.10, 0.25]),
        max_moved_load=rng.choice([0.10, 0.25, 0.5]),
        capacity=rng.choice([1.0, 1.0, 2.0]),
    )
    workload = attrs.evolve(scenario.workload, loads=loads)
    # Long splits, so loads are trusted and rounds move them: a load is trusted after a minute
    # of one owner's measuring, and the drawn splits last seconds. Half the load seeds stretch
    # every split to a minute and a half at least, give the workers lanes for several (a
    # worker of one split is always within its band), and keep the chaos going, sparser, past
    # the first moves: moves under every fault, and failovers between one leader's moves and
    # the next one's rounds (the cooldown's hard case).
    if rng.random() < STRETCHED_SHARE:
        step = rng.choice([10.0, 15.0])
        least = math.ceil(STRETCHED_SPLIT_SECONDS / step)
        batches = tuple(
            tuple((split, steps + least, weight) for split, steps, weight in batch)
            for batch in workload.batches
        )
        workload = attrs.evolve(workload, batches=batches, step_seconds=step)
        # a budget of a tenth of the job rarely fits one split of a dozen
        config = attrs.evolve(
            config, max_in_flight=rng.choice([4, 8]), max_moved_load=rng.choice([0.25, 0.5])
        )
        initial = max(2, scenario.initial_workers)
        scenario = attrs.evolve(
            scenario,
            initial_workers=initial,
            max_workers=max(initial, scenario.max_workers),
            chaos_seconds=rng.choice([90.0, 150.0, 240.0]),
            # a split that changes hands every few seconds is never trusted
            action_gap=(5.0, rng.choice([20.0, 40.0])),
            # and a fleet that only shrinks ends with one worker, which has nobody to balance
            # with: workers come back as often as they go
            weights=tuple(
                (kind, max(weight, GROWTH_WEIGHT) if kind in ("join", "restart") else weight)
                for kind, weight in scenario.weights
            ),
            # one lane alone finishes every attempt of the job within the bound
            bound=scenario.bound + config.max_attempts * _work(batches, step),
        )
    return attrs.evolve(scenario, workload=workload, config=config)


MAX_SPLITTABLE_WORK = 120.0
"""Seconds of work (steps times step length) a splittable workload may hold at most: one lane
alone must still finish it within the bound once the faults stop."""


def _splittable(scenario: Scenario, rng: random.Random) -> Scenario:
    """``scenario`` with its workload made splittable: longer ranges, requests, split chaos."""
    workload = scenario.workload
    factor = rng.choice([1, 2, 3])
    splits = [split for batch in workload.batches for split, _, _ in batch]
    # A straggler (a split four times its size) is what the leader's requests are for.
    straggler = rng.choice(splits) if rng.random() < 0.5 else None

    def scaled(factor: int, straggle: int) -> tuple[tuple[tuple[str, int, int], ...], ...]:
        return tuple(
            tuple(
                (split, steps * factor * (straggle if split == straggler else 1), weight)
                for split, steps, weight in batch
            )
            for batch in workload.batches
        )

    straggle = 4
    batches = scaled(factor, straggle)
    while _work(batches, workload.step_seconds) > MAX_SPLITTABLE_WORK and factor * straggle > 1:
        if straggle > 1:
            straggle = 1
        else:
            factor -= 1
        batches = scaled(factor, straggle)
    workload = attrs.evolve(
        workload,
        batches=batches,
        splittable=True,
        split_rate=rng.choice([0.0, 0.0, 0.03, 0.1]),
        seed=scenario.seed,
    )
    config = attrs.evolve(
        scenario.config,
        split_requests=True,
        split_request_delay=rng.choice([0.0, 0.5, 1.0, 1.0, 2.0]),
    )

    def rate() -> float:
        return rng.choice([0.0, 0.0, 0.05, 0.15, 0.3])

    faults = SplitFaults(
        kill_before_reply=rate(),
        kill_after=rate(),
        lost_reply=rate(),
        zombie=rate(),
        leader=rate(),
    )
    return attrs.evolve(scenario, workload=workload, config=config, split_faults=faults)


def _work(batches: tuple[tuple[tuple[str, int, int], ...], ...], step: float) -> float:
    return step * sum(steps for batch in batches for _, steps, _ in batch)


def _draw_rates(rng: random.Random, lease: float) -> FaultRates:
    profile = rng.choice(["calm", "mild", "mild", "harsh"])
    if profile == "calm":
        return FaultRates(silent_expiry=rng.random() < 0.25)
    scale = 1.0 if profile == "harsh" else 0.3
    return FaultRates(
        unavailable_rate=scale * rng.uniform(0, 0.1),
        maybe_landed_rate=scale * rng.uniform(0, 0.1),
        duplicate_rate=scale * rng.uniform(0, 0.1),
        watch_drop_rate=scale * rng.uniform(0, 0.03),
        latency=rng.choice([0.0, 0.0, 0.005, 0.05]),
        silent_expiry=rng.random() < 0.25,
        spike_rate=scale * rng.choice([0.0, 0.0, 0.01, 0.03]),
        spike_latency=rng.choice([lease / 2, 1.5 * lease]),
        late_rate=scale * rng.choice([0.0, 0.0, 0.02, 0.05]),
        late_delay=rng.choice([0.2, lease, 2 * lease]),
        replay_rate=scale * rng.choice([0.0, 0.0, 0.02, 0.05]),
    )


def _draw_weights(rng: random.Random) -> tuple[tuple[ActionKind, int], ...]:
    return tuple((kind, rng.choice([0, 1, 2, 3])) for kind in ACTIONS)
