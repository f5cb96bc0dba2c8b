"""The one exception hierarchy of spate.

Everything spate raises on purpose derives from :class:`SpateError`::

    SpateError
    ├── StoreError              permanent store trouble: auth, misconfiguration, value too large,
    │   │                       an unreadable record; retrying the same call will not help
    │   └── ValueTooLarge       a value over the store's declared size limit
    ├── StoreUnavailable        transient: timeout, connection lost, server restarting; a write that
    │                           raised it may or may not have landed (the protocol handles that)
    ├── Fenced                  this worker no longer owns the split; its write did not land
    ├── FatalCoordinationError  the fleet cannot be joined safely: broken store, fingerprint
    │                           mismatch, duplicate instance id, watermark regression
    ├── ConfigError             invalid configuration or arguments
    └── PlanError               the planner returned an invalid plan (nothing of it was written)

Store adapters translate their transport's exceptions into ``StoreError`` or
``StoreUnavailable`` at the boundary, so no ``httpx`` or socket exception ever reaches a caller.
Every message says what happened and what to do next.
"""

from __future__ import annotations

__all__ = [
    "ConfigError",
    "FatalCoordinationError",
    "Fenced",
    "PlanError",
    "SessionLost",
    "SpateError",
    "StoreError",
    "StoreUnavailable",
    "ValueTooLarge",
]


class SpateError(Exception):
    """Base class of every error spate raises on purpose."""


class StoreError(SpateError):
    """A permanent store failure: authentication, configuration, oversize value, bad record.

    Retrying the same operation will not help; the message says what to fix.
    """


class ValueTooLarge(StoreError):
    """A value exceeds the store's declared ``max_value_size``; nothing was written."""

    def __init__(self, key: str, size: int, limit: int) -> None:
        super().__init__(
            f"value for key {key!r} is {size} bytes, over this store's limit of {limit} bytes; "
            "nothing was written. Keep descriptors and progress state small (store a pointer to "
            "large data instead)."
        )
        self.key = key
        self.size = size
        self.limit = limit


class StoreUnavailable(SpateError):
    """A transient store failure (timeout, connection loss, leader election in the store).

    A write that raised this may or may not have landed. Callers of the store contract must
    treat the outcome as unknown; the coordinator re-reads before it decides anything.
    """


class SessionLost(StoreUnavailable):
    """A store session ended while its coordinator still used it (its keys are gone).

    Raised by a write that names a session the store has given up on: on etcd, a lease that
    expired (no keepalive confirmed for a whole TTL, a partition, an operator's revoke). The
    write was not applied. Open a new session to keep writing ephemeral keys; the coordinator
    does so by itself.
    """


class Fenced(SpateError):
    """This worker does not (or no longer) own the split, so its write was not applied.

    Raised by commit/fail/release for a split the worker does not hold, or whose progress
    record moved on (another owner, a newer epoch). Stop working on the split: another
    worker may already be resuming it from the last committed watermark.
    """

    def __init__(self, split: str, reason: str = "") -> None:
        detail = f": {reason}" if reason else ""
        super().__init__(
            f"split {split!r} is not owned by this worker{detail}; the write did not land. "
            "Stop processing it: its new owner resumes from the last committed watermark."
        )
        self.split = split
        self.reason = reason


class FatalCoordinationError(SpateError):
    """The worker cannot take part in the job safely and has stopped.

    Causes: the store failed the startup CAS probe, the job fingerprint differs from the
    fleet's, another live worker uses the same instance id, or a commit would move a
    watermark backwards (a bug in the work source).
    """


class ConfigError(SpateError, ValueError):
    """An invalid configuration value or argument; the message names it and the valid range."""


class PlanError(SpateError, ValueError):
    """The planner returned an invalid plan; nothing of that plan was written."""
