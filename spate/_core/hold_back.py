"""The hold-back rule: watch events of a key an API call is writing wait until it lets go.

A store may tell its watchers of a write before the writer reads its reply (etcd often does).
The echo of a commit then arrives while the committer still waits: passed on at once, it would
be decoded and folded as someone else's write (the view does not know the new revision yet),
on the loop, while the committer waits. Held back, it is handed on when the call lets go of the
key: by then the write has landed and been folded, so its echo is known by revision and dropped
undecoded (:mod:`spate._core.echo`). Events of the key keep their order; events of other keys
are not held. Only keys an API call holds (a commit, a failure, a release, run in the caller's
task) are held back: the machine's own flows (elections, renewals, claims) see their keys'
events as they come.

:class:`spate._core.flow_engine.FlowEngine` keeps one :class:`HoldBack` and asks it whenever a
key changes hands, so both runtimes' drivers follow the rule.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeAlias

from spate._store import Delete, Keyspace, Put

__all__ = ["HoldBack", "Redeliver"]

Key: TypeAlias = tuple[Keyspace, str]
Redeliver: TypeAlias = Callable[[Keyspace, Put | Delete], None]
"""Where a held event goes once its key is let go (the runtime's watch intake)."""


def _drop(keyspace: Keyspace, event: Put | Delete) -> None:
    """A redelivery nobody listens to (an engine that never holds anything back)."""


class HoldBack:
    """The watch events kept back, by key, until the API call holding the key lets go."""

    def __init__(self, redeliver: Redeliver = _drop) -> None:
        self._redeliver = redeliver
        self._held: dict[Key, list[Put | Delete]] = {}

    def hold(self, key: Key, event: Put | Delete, *, api_call_holds: bool) -> bool:
        """Keep ``event`` if events of ``key`` are being kept, or an API call holds ``key``.

        Returns False (pass the event on now) otherwise.
        """
        held = self._held.get(key)
        if held is None:
            if not api_call_holds:
                return False
            held = self._held[key] = []
        held.append(event)
        return True

    def let_go(self, key: Key) -> None:
        """``key``'s holder let go: hand its kept events on, in order."""
        held = self._held.pop(key, None)
        # Handed on even if the next flow queued for the key holds it now: a stream of
        # writes to one key must not hold its foreign events back for ever.
        for event in held or ():
            self._redeliver(key[0], event)
