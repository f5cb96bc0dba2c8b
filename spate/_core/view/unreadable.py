"""What the view does with a record it cannot read: it costs what the record carries, no more.

A record that cannot be read (another schema, bad JSON, unknown or missing fields, bad base64)
is said loudly, with its key and how to repair it, and then:

- **a split's progress record or spec**: the split is *held aside*, folded as quarantined with
  the reason naming the key (:meth:`spate._core.view.split_table.SplitTable.hold_aside`); the rest
  of the job runs, and the verdict counts it;
- **the plan record**: the view keeps the last readable one, and the leadership stops leading
  while it cannot be read (nobody is elected), since every leader write is built on it; the
  workers keep what they hold and commit it;
- **the leader key**: folded as the key of no process (:func:`leader_stand_in`): a leader that
  held it is deposed, and nobody elects while it stands; it goes with its writer's session.

Leases still stop the worker: they are what says who owns a split right now.
"""

from __future__ import annotations

import logging

from spate._core.records import Keys, LeaderRecord, UnreadableRecord

__all__ = ["leader_stand_in", "say_plan_unreadable", "say_split_held_aside"]

logger = logging.getLogger("spate.view")


def say_split_held_aside(keys: Keys, split: str, exc: UnreadableRecord) -> None:
    """Log that ``split`` is held aside because of ``exc`` (once per write of the key)."""
    logger.error(
        "%s Split %s is held aside as quarantined until the record is repaired "
        "(spate repair --store URL --job %s %s); the rest of the job runs",
        exc,
        split,
        keys.job,
        split,
    )


def say_plan_unreadable(keys: Keys, exc: UnreadableRecord) -> None:
    """Log that the plan record cannot be read, and what that stops."""
    logger.error(
        "%s No worker leads until it is repaired (spate repair --store URL --job %s --plan); "
        "the workers keep the splits they hold and commit them",
        exc,
        keys.job,
    )


def leader_stand_in(keys: Keys, exc: UnreadableRecord) -> LeaderRecord:
    """What the view folds for an unreadable leader key (logged): the key of no process."""
    logger.error(
        "%s No worker leads while it stands: it goes within a TTL once its writer stops "
        "renewing it; if it stays, stop what writes it (or delete the key: spate repair "
        "--store URL --job %s --leader); the workers keep the splits they hold",
        exc,
        keys.job,
    )
    return LeaderRecord(owner="(unreadable)", nonce="", generation=0)
