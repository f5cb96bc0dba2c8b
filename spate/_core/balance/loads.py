"""Each running split's load as the leader balances by it: the one rule, for the leader and status.

A split's load is its owner's trusted measurement (:func:`owner_loads` reads it from the
owner's presence summary). A split the leader moved is measured afresh by its new owner and
is untrusted for a minute; until then it counts at the last trusted load the leader *carried*
across the move (the leader publishes those on its own presence record,
:attr:`~spate._core.records.PresenceRecord.carried`, so ``spate status`` reads them too).
Anything else is untrusted: a round counts it at the job's mean per unit of weight
(:func:`~spate._core.balance.judge_loads`).

Pure: records in, numbers out.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from spate._core.records import PresenceRecord

__all__ = ["owner_loads", "split_loads"]


def owner_loads(record: PresenceRecord | None, held: list[str]) -> dict[str, float]:
    """Each held split's trusted load from its owner's summary (the rest: untrusted).

    The summary names the heaviest trusted splits; the other trusted ones are a count and a
    total, shared evenly among the held splits it does not name, up to that count (which of
    them is not said, but they are the lightest: a light split's load is an estimate).
    ``held`` is sorted, so every reader shares them out alike.
    """
    if record is None:
        return {}
    loads = {entry.split: entry.rate for entry in record.loads}
    if record.other_splits > 0:
        each = record.other_load / record.other_splits
        rest = [s for s in held if s not in loads][: record.other_splits]
        loads.update(dict.fromkeys(rest, each))
    return loads


def split_loads(
    held: Mapping[str, Iterable[str]],
    presence: Mapping[str, PresenceRecord | None],
    carried: Mapping[str, float],
) -> dict[str, tuple[float | None, bool]]:
    """Each running split's (load, carried): its owner's trusted load, else the carried one.

    ``held`` maps each live owner to the running splits it holds, ``presence`` each worker to
    its presence record, ``carried`` a moved split to the load carried across its move. A load
    of None is untrusted; ``carried`` says the load is the one carried (the owner's own is not
    trusted yet, and the leader drops it once it is).
    """
    out: dict[str, tuple[float | None, bool]] = {}
    for owner, splits in held.items():
        names = sorted(splits)
        own = owner_loads(presence.get(owner), names)
        for split in names:
            load = own.get(split)
            if load is not None:
                out[split] = (load, False)
            else:
                out[split] = (carried.get(split), split in carried)
    return out
