"""What a balance round reads and what it decides: plain values, validated on construction.

The defaults, each from an anchor (``reference/load-balancing.md``):

- ``balance_interval = 60.0`` — KCL 3 runs its variance balancing on every third assignment
  run (about once a minute) and Dicer balances every minute; 0 turns balancing off.
- ``load_half_life = 60.0`` — between Dicer's two (120 s on the client, 10 s at the
  assigner): a load that moved on is half forgotten by the next round, and with the trust
  window of a minute (:func:`~spate._core.balance.meter.trust_window`) a split is measured
  before its first round counts it. (In ``bench/balance.py`` a hot set rotating every 10
  minutes averages 1.18x the bound at 60 s; 30 s does no better.)
- ``load_band = 0.10`` — KCL 3's ``reBalanceThresholdPercentage`` and Dicer's default
  tolerance are both 10%: a worker within ±10% of its mean is left alone.
- ``max_moved_load = 0.10`` — Slicer's churn budget is about 9% of the load a round; 10% is
  that, rounded, and still lets a count-balanced lognormal job (whose total excess above the
  mean is about 15-20% of its load) converge in two or three rounds.
- ``excess_share = 0.6`` — KCL 3's ``dampeningPercentage``: a hot worker sheds at most 60% of
  its excess a round, so a load that is drifting is not chased past the mean.
- ``churn_price = 0.25`` — Dicer's churn penalty: a move must remove more imbalance than a
  quarter of the load it moves.
- ``cooldown_rounds = 3`` — a split moved stays put three rounds (three minutes at the default
  ``balance_interval`` of 60 s): longer than the trust window of its new owner's measurement
  (60 s), so it is never moved again on a guess.
- ``split_factor = 2.0`` — Slicer splits a slice hotter than twice the mean. Once asked, a
  split and its pieces (its residuals, theirs, ...) are asked again while a piece alone is
  more than the band of the roomiest worker holds (``(1 + load_band)`` x its share), so the
  pieces end small enough for moves to balance. With the trigger alone, 8 splits on 4 workers,
  one 16x the others, stop at two halves of 8, each above the mean (5.75) and below twice it:
  a worker holding one stays 39% over the mean for good (``bench/balance.py``).
- ``idle_share = 0.01`` — a job whose load fell under 1% of its recent peak is idle.
- ``new_worker_window = 120.0`` — a worker that joined within two default rounds is *new*:
  Dicer fills new pods to the mean, so a donor may give a new worker its whole excess.
- ``min_gain = 0.01`` — a move must lower the round's potential (see :mod:`.planner`) by at
  least 1% of the mean worker load: the late moves of a settled fleet that the rule stopped
  each carried 0.2-6% of a worker's mean and changed nothing a user could see.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import attrs

from spate._core.balance.meter import LoadMeter
from spate._core.placement.vocabulary import validate_locality
from spate._errors import ConfigError

__all__ = [
    "BalanceConfig",
    "BalanceRound",
    "BalanceSplit",
    "BalanceState",
    "BalanceWorker",
    "Move",
]


def _fraction(name: str, value: float, *, upper: float = 1.0) -> None:
    if not (isinstance(value, (int, float)) and math.isfinite(value) and 0 < value <= upper):
        raise ConfigError(f"{name} must be a number in (0, {upper}], not {value!r}")


def _number(value: object, name: str, what: str = "a finite number of seconds") -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ConfigError(f"{name} must be {what}, not {value!r}")
    return float(value)


def _check_knobs(config: BalanceConfig) -> None:
    """The one validation of the knobs ``spate.Config`` shares with :class:`BalanceConfig`.

    Its messages are the user's: ``Config`` prefixes them with ``Config.`` and re-raises, so
    they name the field as the user spelled it.
    """
    if _number(config.balance_interval, "balance_interval") < 0:
        raise ConfigError(
            f"balance_interval must be zero or positive (0 turns load balancing off), not "
            f"{config.balance_interval!r}"
        )
    if _number(config.load_half_life, "load_half_life") <= 0:
        raise ConfigError(f"load_half_life must be positive, not {config.load_half_life!r}")
    for name in ("load_band", "max_moved_load"):
        value = getattr(config, name)
        if not 0 < _number(value, name, "a finite number") <= 1:
            raise ConfigError(f"{name} must be a share in (0, 1] (0.10 is 10%), not {value!r}")
    tier = config.isolation_tier
    if isinstance(tier, bool) or not isinstance(tier, int):
        raise ConfigError(f"isolation_tier must be an int, not {tier!r}")
    if tier < 0:
        raise ConfigError(
            f"isolation_tier must be zero or more (0 is the coarsest tier of a locality), not "
            f"{tier!r}"
        )


@attrs.frozen
class BalanceConfig:
    """The knobs of load balancing (see the module text for why each default).

    The home of the knobs ``spate.Config`` shares (``balance_interval``, ``load_half_life``,
    ``load_band``, ``max_moved_load``, ``isolation_tier``): ``Config`` takes their defaults
    from here and validates them by building one of these.
    """

    balance_interval: float = 60.0
    """Seconds between balance rounds (0 turns load balancing off)."""
    load_half_life: float = 60.0
    """Half-life of a split's smoothed load, in seconds (see :mod:`.meter`)."""
    load_band: float = 0.10
    """Half-width of the band around a worker's mean load per unit of capacity."""
    max_moved_load: float = 0.10
    """Share of the job's load one round may move."""
    excess_share: float = 0.6
    """Share of a hot worker's excess over its mean that one round may take from it."""
    churn_price: float = 0.25
    """A move must remove more imbalance than this times the load it moves."""
    cooldown_rounds: int = 3
    """Rounds a moved split stays where it was put."""
    split_factor: float = 2.0
    """A split whose load exceeds this times the mean worker load is asked to split."""
    idle_share: float = 0.01
    """The job is idle below this share of its recent peak load."""
    new_worker_window: float = 120.0
    """Seconds after joining during which a worker is filled to its mean."""
    isolation_tier: int = 0
    """The tier of localities whose failure domains share the job evenly (as placement's)."""
    min_gain: float = 0.01
    """A move must lower the potential by this share of the mean worker load (:mod:`.planner`)."""

    def __attrs_post_init__(self) -> None:
        _check_knobs(self)
        _fraction("excess_share", self.excess_share)
        _fraction("idle_share", self.idle_share)
        _fraction("min_gain", self.min_gain)
        if not (math.isfinite(self.churn_price) and 0 <= self.churn_price < 2):
            # a move removes at most twice its load from the sum of deviations: a price of
            # 2 or more forbids every move
            raise ConfigError(f"churn_price must be in [0, 2), not {self.churn_price!r}")
        if not (isinstance(self.cooldown_rounds, int) and self.cooldown_rounds >= 1):
            raise ConfigError(
                f"cooldown_rounds must be a whole number of rounds, at least 1, not "
                f"{self.cooldown_rounds!r}"
            )
        if not (math.isfinite(self.split_factor) and self.split_factor > 1):
            raise ConfigError(f"split_factor must be a number above 1, not {self.split_factor!r}")
        if not (math.isfinite(self.new_worker_window) and self.new_worker_window >= 0):
            raise ConfigError(
                f"new_worker_window must be seconds, at least 0, not {self.new_worker_window!r}"
            )

    @property
    def enabled(self) -> bool:
        """Whether load balancing runs at all (``balance_interval`` above 0)."""
        return self.balance_interval > 0

    def meter(self, started_at: float) -> LoadMeter:
        """A fresh meter of one split's load with this config's half-life."""
        return LoadMeter(started_at, self.load_half_life)


@attrs.frozen
class BalanceWorker:
    """One live worker, as the balance sees it."""

    name: str
    lanes: int
    """Its lane cap (``max_in_flight``): splits it may hold at once."""
    capacity: float = 1.0
    """Load it takes relative to a worker of capacity 1.0 (``Config.capacity``)."""
    locality: str = ""
    """Its failure-domain path, coarsest tier first ("" when unknown)."""
    joined_at: float = -math.inf
    """When it joined the fleet (the leader's clock)."""

    def __attrs_post_init__(self) -> None:
        if not (isinstance(self.lanes, int) and self.lanes >= 1):
            raise ConfigError(
                f"worker {self.name!r}: lanes must be an int at least 1, not {self.lanes!r}"
            )
        if not (math.isfinite(self.capacity) and self.capacity > 0):
            raise ConfigError(
                f"worker {self.name!r}: capacity must be a positive number (1.0 is a default "
                f"worker), not {self.capacity!r}"
            )
        validate_locality(self.locality)


@attrs.frozen
class BalanceSplit:
    """One running split, as the balance sees it."""

    id: str
    owner: str
    """The live worker running it (a split whose owner is not a live worker is placement's)."""
    load: float = 0.0
    """Its smoothed load (units a second); read only when ``trusted``."""
    trusted: bool = False
    """Whether ``load`` was measured long enough to count (see :mod:`.meter`)."""
    weight: int = 1
    """Its planned weight: an untrusted split counts as the job's mean load per unit of it."""
    affinity: str = ""
    """A locality prefix it prefers ("" for none)."""
    parent: str = ""
    """The split it was split off (a residual's spec names it); "" for a planned split."""

    def __attrs_post_init__(self) -> None:
        if not (math.isfinite(self.load) and self.load >= 0):
            raise ConfigError(
                f"split {self.id!r}: load must be finite and at least 0, not {self.load!r}"
            )


@attrs.frozen
class BalanceState:
    """What one round leaves to the next."""

    moved: Mapping[str, int] = attrs.field(factory=dict)
    """Split -> the round it was last moved in (its cooldown runs from there)."""
    peak_load: float = 0.0
    """The job's recent peak load (decaying), against which idleness is judged."""
    splitting: Mapping[str, int] = attrs.field(factory=dict)
    """Split -> the last round it was asked to split, or was a piece of such a split still
    too heavy for any worker's band (or not yet measured): the pieces asked again (see
    :mod:`.planner`, rule 5). Forgotten ``cooldown_rounds`` rounds after that."""
    left: Mapping[str, tuple[str, float]] = attrs.field(factory=dict)
    """Split -> (the worker a round moved it off, its load then): it is not moved back there
    while its load holds within half a band of that (planner rule 6)."""
    settled: Mapping[str, float] = attrs.field(factory=dict)
    """Worker -> its load at the last round that found every worker within the band: while
    the same workers' loads hold within half a band of the mean of these, no round moves
    anything (planner rule 6). Empty when the last round acted or found the fleet outside."""

    def cooling(self, split: str, round_: int, cooldown_rounds: int) -> bool:
        """Whether ``split`` is still in its cooldown at round ``round_``."""
        moved = self.moved.get(split)
        return moved is not None and round_ - moved < cooldown_rounds


@attrs.frozen
class Move:
    """One split to move: from ``source`` to ``target``, carrying ``load``."""

    split: str
    source: str
    target: str
    load: float
    exchange: str = ""
    """The split that moves the other way, when this move is half of an exchange (a receiver
    without a free lane takes a split only for one of its own)."""
    rescue: bool = False
    """Made by rule 7 (:mod:`.planner`): for a worker over its band that no move within the
    bands helps, judged by the potential alone."""


@attrs.frozen
class BalanceRound:
    """The decision of one balance round."""

    round: int
    moves: tuple[Move, ...]
    """The splits to move, in the order they were chosen."""
    split_requests: tuple[str, ...]
    """Trusted splits hotter than ``split_factor`` x the mean worker load, and pieces of
    splits asked before that no worker's band can hold, hottest first (planner rule 5)."""
    reason: str
    """Why the round did what it did: ``idle``, ``unmeasured``, ``within band``, ``moved``,
    or ``no move worth its price``."""
    job_load: float
    """The job's load (untrusted splits counted at the mean per unit of weight)."""
    moved_load: float
    """The summed load of the moves."""
    imbalance_before: float
    """The hottest worker's load over its mean, before the moves (1.0 is even)."""
    imbalance_after: float
    """The same after the moves."""
    state: BalanceState
    """What the next round starts from."""
    loads: Mapping[str, float] = attrs.field(factory=dict)
    """Each worker's load after the moves."""
    targets: Mapping[str, float] = attrs.field(factory=dict)
    """Each worker's mean: its share of the job by capacity (inside its failure domain's share)."""
