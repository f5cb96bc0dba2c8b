"""A split's load, smoothed: exponential decay with a half-life, fed by (amount, time) reports.

The owner of a split feeds its meter what the handler reports (``SplitHandle.report_load``) or
the busy time it measured; the leader reads one number per split, the *rate* (units of work a
second), and whether it is *trusted*.

The estimator: a report of ``amount`` at time ``t`` is work done over the time since the report
before it (since measuring began, for the first), spread evenly over that span; the work is
weighted ``exp(-λ (c - t))`` with ``λ = ln 2 / half_life``, and the weighted sum is divided by
the same weight integrated over the span measured, ``(1 - exp(-λ w)) / λ`` for a span of ``w``
seconds ending at ``c``. The span ends at the last report: the time since it is work not yet
reported, not work not done. Early on that is the plain mean rate (no start-up bias towards
zero, as a bare exponential moving average has); after a few half-lives it is a moving
average that forgets a load that moved on with the half-life.

Why spread, and why stop at the last report: a load reported once a second with a half-life
of 5 s, valued at the reading instead, read up to 7% high just after a report and 7% low just
before the next, a sawtooth in step on every split of a worker started together; the leader
saw a steady worker wander across its band and moved splits to chase it. Measured this way a
steady load reads as exactly itself at any instant. A split that stops reporting still
decays towards zero: silence longer than its last report's interval counts as no work.

**Trust.** A rate measured over a short window is noise (one batch reported in the first
second reads as a huge rate), so a split counts by its measurement only once its window spans
``max(MIN_TRUST_WINDOW, half_life)``: Dicer's assigner ignores windows shorter than a minute,
and with the default half-life of 60 s one half-life is that minute; with a longer half-life
the window waits for one half-life, the span over which the estimate settles. Until then the
balance counts it at the job's mean load per unit of weight (:mod:`.planner`).

Pure: no clock of its own, times are passed in.
"""

from __future__ import annotations

import math

from spate._errors import ConfigError

__all__ = ["MIN_TRUST_WINDOW", "LoadMeter", "check_amount", "trust_window"]

MIN_TRUST_WINDOW = 60.0
"""Seconds of measurement before a split's load is trusted, at the least (Dicer: 1 min)."""


def trust_window(half_life: float) -> float:
    """Seconds a split must be measured before its load counts: ``max(60 s, half_life)``."""
    return max(MIN_TRUST_WINDOW, half_life)


def check_amount(amount: object) -> float:
    """Return ``amount`` as a float if it is a finite number at least 0, else raise ConfigError."""
    if isinstance(amount, bool) or not isinstance(amount, (int, float)):
        raise ConfigError(
            f"a load report must be a number of work units (an int or a float), not {amount!r}"
        )
    value = float(amount)
    if not math.isfinite(value) or value < 0:
        raise ConfigError(
            f"a load report must be finite and at least 0 (work done since the last report), "
            f"not {amount!r}"
        )
    return value


class LoadMeter:
    """The smoothed load of one split on one owner (see the module text).

    ``started_at`` is when measuring began (the tenancy's start): the span a first report
    covers. Reports must not go back in time; a report stamped earlier than the last one is
    counted at the last one's time, spread as the last one was.
    """

    __slots__ = ("_decay", "_gap", "_half_life", "_last", "_started", "_sum")

    def __init__(self, started_at: float, half_life: float) -> None:
        if not (math.isfinite(half_life) and half_life > 0):
            raise ConfigError(
                f"load_half_life must be a positive number of seconds, not {half_life!r}"
            )
        self._half_life = half_life
        self._decay = math.log(2) / half_life
        self._started = started_at
        self._last = started_at  # the time self._sum is valued at: the last report's
        self._gap = 0.0  # the span the last report covered
        self._sum = 0.0

    @property
    def started_at(self) -> float:
        """When measuring began."""
        return self._started

    def _spread(self, gap: float) -> float:
        """The weight at its end of a unit of work spread evenly over ``gap`` seconds."""
        x = self._decay * gap
        return -math.expm1(-x) / x if x > 0 else 1.0

    def report(self, amount: float, at: float) -> None:
        """Count ``amount`` units of work done by ``at`` (ConfigError for a bad amount)."""
        value = check_amount(amount)
        at = max(at, self._last)
        if at > self._last:
            self._gap = at - self._last
            self._sum *= math.exp(-self._decay * self._gap)
        # a report at the last one's time (or earlier) is more of the same span's work
        self._sum += value * self._spread(self._gap)
        self._last = at

    def rate(self, now: float) -> float:
        """The smoothed load at ``now``: units of work a second (0 before any time passed)."""
        # measured up to the last report, or past it by the silence longer than its span
        end = max(self._last, now - self._gap)
        window = end - self._started
        if window <= 0:
            return 0.0
        weight = -math.expm1(-self._decay * window) / self._decay
        return self._sum * math.exp(-self._decay * (end - self._last)) / weight

    def trusted(self, now: float) -> bool:
        """Whether the span measured by ``now`` is long enough for the load to count."""
        return now - self._started >= trust_window(self._half_life)
