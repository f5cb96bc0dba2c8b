"""The loads this worker measures: a meter per held split, and the summary its presence carries.

A split's load is what its handler reports (``SplitHandle.report_load``) or, with
``Config.measure_load``, its busy time on the event loop. Each tenancy has its own
:class:`~spate._core.balance.meter.LoadMeter`, started when the tenancy began: a split gained
again is measured afresh (its load here may differ from its last owner's, or its last run's).

The summary rides on the presence renewal the heartbeat writes anyway (no new write), and is
bounded whatever the worker holds: the :data:`SUMMARY_SPLITS` heaviest trusted splits by name,
the other trusted ones as one count and total, and the untrusted ones as a count. The leader
needs the heavy ones by name (they are what a round moves) and every worker's total; a light
split moved by the leader counts at its worker's average light load. A worker that measures
nothing writes no summary: its presence record is byte-identical to one of a spate without
load balancing.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import attrs

from spate._core.balance.meter import LoadMeter, check_amount
from spate._core.records import SplitLoad
from spate._core.tenancy.fencing import refusal

__all__ = ["SUMMARY_SPLITS", "LoadReports", "LoadSummary"]

SUMMARY_SPLITS = 64
"""Heaviest trusted splits a presence record names one by one (the rest are one count)."""
_DIGITS = 4
"""Significant digits of a rate on the wire: a load is an estimate, and 4 keep it small."""


@attrs.frozen
class LoadSummary:
    """What a presence record carries of this worker's loads (see the module text)."""

    loads: tuple[SplitLoad, ...] = ()
    other_splits: int = 0
    other_load: float = 0.0
    untrusted: int = 0


@attrs.define
class _Metered:
    fence: int
    meter: LoadMeter


class LoadReports:
    """This worker's meters, one per held split that reported (or was measured)."""

    def __init__(
        self, half_life: float, tenancy: Callable[[str], tuple[int, float] | None]
    ) -> None:
        """``tenancy(split)`` answers the held split's (fence, when its tenancy began), or None."""
        self._half_life = half_life
        self._tenancy = tenancy
        self._meters: dict[str, _Metered] = {}

    def report(self, split: str, amount: object, now: float, fence: int | None = None) -> None:
        """Count ``amount`` units of work ``split`` did by ``now``.

        Raises ConfigError for an amount that is not a finite number at least 0, and Fenced
        when this worker does not hold ``split`` (or holds it under another fence than
        ``fence``): the work of an ended tenancy is nobody's load here.
        """
        value = check_amount(amount)
        held = self._tenancy(split)
        ended = refusal(split, None if held is None else held[0], fence, "no load was counted")
        if ended is not None:
            raise ended
        assert held is not None  # (refusal refuses a split not held: for the type checker)
        current, began = held
        metered = self._meters.get(split)
        if metered is None or metered.fence != current:
            metered = self._meters[split] = _Metered(current, LoadMeter(began, self._half_life))
        metered.meter.report(value, now)

    @property
    def measuring(self) -> bool:
        """Whether any held split was measured (a summary is then written)."""
        return bool(self._meters)

    def rates(self, now: float) -> dict[str, tuple[float, bool]]:
        """Each measured held split's (smoothed rate, trusted) at ``now``; forgets ended ones."""
        out: dict[str, tuple[float, bool]] = {}
        for split, metered in list(self._meters.items()):
            held = self._tenancy(split)
            if held is None or held[0] != metered.fence:
                del self._meters[split]  # its tenancy ended: its meter with it
                continue
            out[split] = (metered.meter.rate(now), metered.meter.trusted(now))
        return out

    def summary(self, now: float, limit: int = SUMMARY_SPLITS) -> LoadSummary:
        """The bounded summary of :meth:`rates` a presence record carries (see the module)."""
        trusted = sorted(
            ((_rounded(rate), split) for split, (rate, ok) in self.rates(now).items() if ok),
            key=lambda item: (-item[0], item[1]),
        )
        untrusted = len(self._meters) - len(trusted)
        named = tuple(SplitLoad(split=split, rate=rate) for rate, split in trusted[:limit])
        rest = trusted[limit:]
        return LoadSummary(
            loads=named,
            other_splits=len(rest),
            other_load=_rounded(math.fsum(rate for rate, _ in rest)),
            untrusted=untrusted,
        )


def _rounded(rate: float) -> float:
    return float(f"{rate:.{_DIGITS}g}")
