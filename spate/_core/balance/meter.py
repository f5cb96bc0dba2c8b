"""A split's load, smoothed: exponential decay with a half-life, fed by (amount, time) reports.

The owner of a split feeds its meter what the handler reports (``SplitHandle.report_load``) or
the busy time it measured; the leader reads one number per split, the *rate* (units of work a
second), and whether it is *trusted*.

The estimator: every report of ``amount`` at time ``t`` is weighted ``exp(-λ (now - t))`` with
``λ = ln 2 / half_life``, and the weighted sum is divided by the same weight integrated over the
window measured so far, ``(1 - exp(-λ w)) / λ`` for a window of ``w`` seconds. Early on that is
the plain mean rate over the window (no start-up bias towards zero, as a bare exponential
moving average has); after a few half-lives it is a moving average that forgets a load that
moved on with the half-life. A split that stops reporting decays towards zero: it does no work.

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

    ``started_at`` is when measuring began (the tenancy's start): the window a first report
    covers. Reports must not go back in time; a report stamped earlier than the last one is
    counted at the last one's time.
    """

    __slots__ = ("_decay", "_half_life", "_last", "_started", "_sum")

    def __init__(self, started_at: float, half_life: float) -> None:
        if not (math.isfinite(half_life) and half_life > 0):
            raise ConfigError(
                f"load_half_life must be a positive number of seconds, not {half_life!r}"
            )
        self._half_life = half_life
        self._decay = math.log(2) / half_life
        self._started = started_at
        self._last = started_at  # the time self._sum is valued at
        self._sum = 0.0

    @property
    def started_at(self) -> float:
        """When measuring began."""
        return self._started

    def report(self, amount: float, at: float) -> None:
        """Count ``amount`` units of work done by ``at`` (ConfigError for a bad amount)."""
        value = check_amount(amount)
        at = max(at, self._last)
        self._sum = self._sum * math.exp(-self._decay * (at - self._last)) + value
        self._last = at

    def rate(self, now: float) -> float:
        """The smoothed load at ``now``: units of work a second (0 before any time passed)."""
        window = max(0.0, now - self._started)
        if window <= 0:
            return 0.0
        weight = -math.expm1(-self._decay * window) / self._decay
        decayed = self._sum * math.exp(-self._decay * max(0.0, now - self._last))
        return decayed / weight

    def trusted(self, now: float) -> bool:
        """Whether the window measured by ``now`` is long enough for the load to count."""
        return now - self._started >= trust_window(self._half_life)
