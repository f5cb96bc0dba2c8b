"""The coordinator's store session: opened at startup, named by every write, ended with it.

This is the one place the protocol meets :meth:`spate.store.Store.session`. The rest of the
core sees three things: :attr:`SessionSlot.current` (which
:func:`spate._write_spans.write` names on
every ephemeral create and update), :attr:`SessionSlot.keeps_keys` (on a session store the
session's keepalive keeps every lease key alive, so nothing is renewed per split), and
:meth:`SessionSlot.starved` (the self-fence: on a session store a key written under the
current session lives until at least its last confirmed keepalive plus the lease).

A session the store reports lost (etcd: the lease expired during a partition longer than the
TTL) took every key written under it along; the slot opens a new one in the background, and
the protocol notices the lost keys as it always does (lease Deletes, lost compare-and-swaps,
the self-fence), then announces itself again under the new session.
"""

from __future__ import annotations

import logging
from contextlib import AsyncExitStack

import trio

from spate._core.backoff import REOPEN_BACKOFF, Backoff
from spate._errors import StoreError, StoreUnavailable
from spate._store import EphemeralSemantics, Session, Store

__all__ = ["SessionSlot"]

logger = logging.getLogger("spate.session")


class SessionSlot:
    """Holds the coordinator's current session and replaces it when the store loses it."""

    def __init__(self, store: Store, *, op_timeout: float) -> None:
        self._store = store
        self._op_timeout = op_timeout
        self._stack: AsyncExitStack | None = None
        self._replacing = False
        self.current: Session | None = None
        """The session ephemeral writes name (None before startup opened one)."""
        self.session = 0
        """The current session's number (counts sessions opened): a lease key written under
        an older one is gone."""
        self.keeps_keys = store.capabilities.ephemeral is EphemeralSemantics.SESSION
        """Whether the session (not per-key renewals) keeps ephemeral keys alive."""

    async def open(self) -> None:
        """Open a session (replacing none). Raises StoreUnavailable if the store cannot."""
        stack = AsyncExitStack()
        session = await stack.enter_async_context(self._store.session())
        self._stack, self.current = stack, session
        self.session += 1

    async def _open_replacement(self) -> AsyncExitStack | None:
        """Open a new session and make it current; return the old one's stack to close."""
        old = self._stack
        await self.open()
        return old

    async def close(self) -> None:
        """End the current session, giving up after about one operation timeout.

        On a session store its keys go now; if the store cannot be reached they go when the
        session's lease expires, within the TTL, since nothing keeps it alive any more.
        """
        stack, self._stack = self._stack, None
        if stack is not None:
            await self._close_stack(stack)

    async def _close_stack(self, stack: AsyncExitStack) -> None:
        with trio.CancelScope(shield=True) as scope:
            scope.deadline = trio.current_time() + self._op_timeout
            try:
                await stack.aclose()
            except (StoreError, StoreUnavailable) as exc:
                logger.info("could not end the store session cleanly (%s); it expires", exc)
        if scope.cancelled_caught:
            logger.warning(
                "the store did not confirm the end of this worker's session within %.1f s; "
                "its keys expire within the TTL instead",
                self._op_timeout,
            )

    def starved(self, session: int, now: float, lease: float) -> bool:
        """Whether a key written under session number ``session`` may have expired by ``now``.

        Only meaningful where :attr:`keeps_keys`: the key lives until at least the session's
        last confirmed keepalive plus the lease, and dies with a lost or replaced session.
        """
        current = self.current
        if current is None or session != self.session or current.lost:
            return True
        confirmed = current.last_confirmed
        return confirmed is not None and now - confirmed >= lease

    def next_deadline(self, lease: float) -> float | None:
        """When the current session's keys may expire unless a keepalive is confirmed."""
        session = self.current
        if session is None or session.last_confirmed is None:
            return None
        return session.last_confirmed + lease

    def check(self, nursery: trio.Nursery) -> None:
        """Start replacing the current session if the store has lost it (a heartbeat input)."""
        session = self.current
        if session is not None and session.lost and not self._replacing:
            self._replacing = True
            nursery.start_soon(self._replace)

    async def _replace(self) -> None:
        logger.warning(
            "the store lost this worker's session (its ephemeral keys are gone); opening a new "
            "one and announcing again"
        )
        try:
            backoff = Backoff.of(REOPEN_BACKOFF)
            while True:
                try:
                    # The new session first: writes naming the lost one keep failing as
                    # transient (SessionLost) until it is in place, never as an ended one.
                    with trio.fail_after(self._op_timeout * 3):
                        old = await self._open_replacement()
                    break
                except (StoreUnavailable, trio.TooSlowError) as exc:
                    logger.info("could not open a new store session yet (%s)", exc)
                await trio.sleep(backoff.delay())
            if old is not None:
                await self._close_stack(old)
        finally:
            self._replacing = False
