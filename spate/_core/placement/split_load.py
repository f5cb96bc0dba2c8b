"""What load a split puts on a worker: the one rule placement balances by.

The index (:mod:`spate._core.placement.index`) and the reference model
(``spate_testing._placement_model``) both read a split's load from its
:class:`~spate._core.placement.vocabulary.Placement`, whose load is :func:`split_load` of its
weight until the job reports loads. From then on the leader's balance rounds
(:mod:`spate._core.leader.balance_rounds`) pass each split's load in placement's units, by
:func:`measured_units` and :func:`unmeasured_units`: one scale for the measured and the not
yet measured, so neither looks lighter than it is.
"""

from __future__ import annotations

__all__ = ["LOAD_UNITS", "measured_units", "split_load", "unmeasured_units"]

LOAD_UNITS = 10
"""Placement's integer units per weight unit of load, once loads are reported: a split of the
job's mean load per unit of weight counts 10, so a light split counts 1 and no load rounds to
nothing a worker would notice."""


def split_load(weight: int) -> int:
    """The load a split of planned ``weight`` puts on a worker: its weight, at least 1.

    A split of weight 0 (or less) still takes a lane and a handler's time: counted as nothing,
    any number of them would look like no load at all to the balance.
    """
    return max(1, weight)


def measured_units(load: float, per_weight: float) -> int:
    """A measured split's load in placement's units, ``per_weight`` the job's mean per weight.

    At least 1, for the reason :func:`split_load` gives.
    """
    return max(1, round(LOAD_UNITS * load / per_weight))


def unmeasured_units(weight: int) -> int:
    """A split not yet measured, once loads are reported: the job's mean load per its weight."""
    return LOAD_UNITS * split_load(weight)
