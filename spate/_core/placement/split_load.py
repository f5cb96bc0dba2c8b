"""What load a split puts on a worker: the one rule placement balances by.

The index (:mod:`spate._core.placement.index`) and the reference model
(``spate_testing._placement_model``) both read a split's load from its
:class:`~spate._core.placement.vocabulary.Placement`, whose load is this function's answer unless
the leader passes another (measured load, when the job reports it, would be passed there).
"""

from __future__ import annotations

__all__ = ["split_load"]


def split_load(weight: int) -> int:
    """The load a split of planned ``weight`` puts on a worker: its weight, at least 1.

    A split of weight 0 (or less) still takes a lane and a handler's time: counted as nothing,
    any number of them would look like no load at all to the balance.
    """
    return max(1, weight)
