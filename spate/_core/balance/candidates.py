"""A donor's movable splits, and the searches a balance round makes in them.

:data:`Candidates` groups a worker's movable splits by the affinity key a receiver must honour
(``""`` for none), each group sorted by (load, id): the largest split under a limit is one
bisection, whatever the worker holds.
"""

from __future__ import annotations

import bisect
import heapq
import math
from typing import TypeAlias

__all__ = ["Candidates", "bound", "find", "heaviest", "lightest", "prefixes", "take"]

Candidates: TypeAlias = dict[str, list[tuple[float, str]]]
"""Affinity key ("" for none) -> that group's splits as sorted (load, id)."""

_TOP = chr(0x10FFFF)  # sorts after every split id: (load, _TOP) bounds all entries of a load


def prefixes(locality: str) -> tuple[str, ...]:
    """The affinity keys a worker at ``locality`` honours: "" and each whole-tier prefix."""
    if not locality:
        return ("",)
    tiers = locality.split("/")
    return ("", *("/".join(tiers[: i + 1]) for i in range(len(tiers))))


def find(
    groups: Candidates, keys: tuple[str, ...], allowance: float, limit: float
) -> tuple[float, str, str, int] | None:
    """The split a donor gives, among ``groups[keys]``, as (load, id, key, index), left in place.

    The heaviest of load at most ``min(allowance, limit)``; when none is that light, the
    lightest of load at most ``limit``: KCL gives leases until the amount is reached, so the
    last may pass it. (Letting only a donor's first split pass it, more strictly, took a
    count-balanced Zipf job of 1,024 splits on 32 workers 8 rounds to converge instead of 5,
    and a hot worker whose splits are all heavier than its allowance could shed none.)
    """
    best: tuple[float, str] | None = None
    where: tuple[str, int] = ("", -1)
    within = min(allowance, limit)
    for key in keys:
        group = groups.get(key)
        if group:
            i = bisect.bisect_right(group, (within, _TOP)) - 1
            if i >= 0 and (best is None or group[i] > best):
                best, where = group[i], (key, i)
    if best is None and allowance < limit:
        for key in keys:
            group = groups.get(key)
            if group:
                i = bisect.bisect_right(group, (within, _TOP))
                if i < len(group) and group[i][0] <= limit and (best is None or group[i] < best):
                    best, where = group[i], (key, i)
    if best is None:
        return None
    return (*best, *where)


def heaviest(groups: Candidates, keys: tuple[str, ...]) -> float:
    """The load of the heaviest split among ``groups[keys]`` (-inf when there is none)."""
    if len(keys) == 1:
        # a receiver without a locality (most of them): one group, without a generator (asked
        # for every receiver a donor tries)
        group = groups.get(keys[0])
        return group[-1][0] if group else -math.inf
    return max((groups[key][-1][0] for key in keys if groups.get(key)), default=-math.inf)


def bound(groups: Candidates, keys: tuple[str, ...], load: float) -> float:
    """At least the load of any split :func:`find` finds with an allowance of at most ``load``.

    The lightest load above ``load`` among ``groups[keys]`` (``load`` when there is none):
    :func:`find` gives one within ``load``, or else the lightest above its allowance.
    """
    above = math.inf
    for key in keys:
        group = groups.get(key)
        if group:
            i = bisect.bisect_right(group, (load, _TOP))
            if i < len(group) and group[i][0] < above:
                above = group[i][0]
    return load if above == math.inf else max(load, above)


def take(
    groups: Candidates, keys: tuple[str, ...], allowance: float, limit: float
) -> tuple[float, str] | None:
    """Take out and return the split :func:`find` finds, as (load, id)."""
    found = find(groups, keys, allowance, limit)
    if found is None:
        return None
    load, split, key, i = found
    groups[key].pop(i)
    return load, split


def lightest(groups: Candidates, keys: tuple[str, ...], count: int) -> list[tuple[float, str, str]]:
    """The ``count`` lightest splits among ``groups[keys]``, as (load, id, key), left in place."""
    return heapq.nsmallest(
        count, ((load, split, key) for key in keys for load, split in groups.get(key, ())[:count])
    )
