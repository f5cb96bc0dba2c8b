"""Store sessions on etcd: one etcd lease per session.

Every ephemeral write attaches its key to the etcd lease of the session it names, so a key
lives while that session keeps its etcd lease alive and dies within the TTL once it stops
(process death, network loss) or at once when the session ends (its etcd lease is revoked).
Each session sends a keepalive every third of the TTL over its own WebSocket to the gateway,
apart from the pooled HTTP connections that carry commits, so commit traffic cannot starve
it. ("Lease" alone, in spate, is a split's lease key; here every lease is etcd's.)

An etcd lease can be lost while the session is in use: a pause or partition longer than the
TTL, a revoke by an operator. Then etcd answers keepalives without a TTL, and writes naming
the etcd lease fail with "lease not found"; the session's own clock also knows that an etcd
lease with no keepalive confirmed for a whole TTL cannot have survived. Refreshing a dead
etcd lease would do nothing forever, so:

* a coordinator's session (``replace_lost=False``) becomes *lost*: its keepalives stop and
  writes naming it raise SessionLost (not applied); the coordinator opens a new session;
* the client's default session (for writes that name none: tools and tests) drops the etcd
  lease and the next ephemeral write grants a new one. A write refused for its etcd lease
  was not applied, so the store retries it once on a fresh etcd lease.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

import trio

from spate import StoreError, StoreUnavailable
from spate._quote import seconds
from spate_stores.etcd import _errors as errors
from spate_stores.etcd._gateway import Gateway, ReplyError
from spate_stores.etcd._wire import (
    etcd_lease_grant,
    etcd_lease_id,
    etcd_lease_keepalive,
    etcd_lease_revoke,
    etcd_lease_ttl,
    parse_stream_result,
)
from spate_stores.etcd._ws import open_socket

__all__ = ["EtcdLeaseSession"]

log = logging.getLogger("spate.stores.etcd")

_Send = Callable[[dict[str, Any]], Awaitable[None]]
_Receive = Callable[[], Awaitable[str]]


class EtcdLeaseSession:
    """Grants, keeps alive and finally revokes one session's etcd lease (see the module docs).

    It is the :class:`spate.store.Session` that :meth:`EtcdStore.session` yields.
    """

    def __init__(self, gateway: Gateway, ttl: int, *, replace_lost: bool = False) -> None:
        self._gateway = gateway
        self._ttl = ttl
        self._interval = ttl / 3
        self._replace_lost = replace_lost
        self._lost = False
        self._ended = False
        self._lock = trio.Lock()
        self._etcd_lease: int | None = None
        # Trio time of the latest request (grant or keepalive) etcd confirmed for the
        # current etcd lease: etcd restarts the TTL when it receives the request, which is no
        # earlier than when it was sent, so expiry is never later than this plus the TTL.
        self._confirmed_at = 0.0
        self._etcd_lease_ready = trio.Event()
        self._losses = 0

    @property
    def etcd_lease_id(self) -> int | None:
        """The current etcd lease ID, or None when no live etcd lease is held."""
        return self._etcd_lease

    @property
    def losses(self) -> int:
        """How many etcd leases this session has lost (expired or revoked while in use)."""
        return self._losses

    @property
    def gateway(self) -> Gateway:
        """The gateway of the store client that opened this session."""
        return self._gateway

    @property
    def lost(self) -> bool:
        """Whether etcd or the clock says this session's etcd lease is gone (never the default)."""
        if not self._replace_lost and not self._lost and not self._ended:
            self._expire_by_clock()
        return self._lost

    @property
    def last_confirmed(self) -> float:
        """Trio time of the latest grant or keepalive etcd confirmed for the etcd lease."""
        return self._confirmed_at

    async def start(self) -> None:
        """Grant the session's etcd lease now (a coordinator's session starts with one)."""
        async with self._lock:
            await self._grant()

    async def etcd_lease(self) -> int:
        """The etcd lease for the next ephemeral write, granting a new one if this may."""
        async with self._lock:
            if not self._ended:
                self._expire_by_clock()
            if self._lost:
                raise errors.session_lost(self._gateway.endpoint, self._ttl)
            if self._ended:
                raise StoreError(
                    "this etcd session has ended (its async with block was left), so its "
                    "ephemeral writes are refused; open a new session"
                )
            if self._etcd_lease is None:
                await self._grant()
            assert self._etcd_lease is not None
            return self._etcd_lease

    def invalidate(self, etcd_lease: int, why: str) -> None:
        """Drop ``etcd_lease`` (if still current): etcd says it is gone."""
        if etcd_lease == self._etcd_lease:
            self._etcd_lease = None
            self._losses += 1
            self._etcd_lease_ready = trio.Event()
            if not self._replace_lost:
                self._lost = True
                self._etcd_lease_ready.set()  # wakes the keepalive task, which then ends
                log.warning(
                    "etcd session lease %x on %s is lost (%s); its ephemeral keys are gone "
                    "and its coordinator must open a new session",
                    etcd_lease,
                    self._gateway.endpoint,
                    why,
                )
                return
            log.warning(
                "etcd lease %x of the store client for %s is lost (%s); its ephemeral keys "
                "are gone and the next ephemeral write starts a new lease",
                etcd_lease,
                self._gateway.endpoint,
                why,
            )

    def _expire_by_clock(self) -> None:
        if self._etcd_lease is not None and trio.current_time() - self._confirmed_at >= self._ttl:
            self.invalidate(
                self._etcd_lease, f"no keepalive was confirmed for {seconds(self._ttl)}"
            )

    async def _grant(self) -> None:
        started = trio.current_time()
        reply = await self._gateway.call(
            "/v3/lease/grant", etcd_lease_grant(self._ttl), doing="granting the session lease"
        )
        etcd_lease, granted = etcd_lease_id(reply), etcd_lease_ttl(reply)
        if etcd_lease == 0 or granted <= 0:
            raise errors.etcd_lease_unusable(self._gateway.endpoint, reply)
        if granted != self._ttl:
            await self._revoke(etcd_lease)
            raise errors.etcd_lease_ttl_mismatch(self._gateway.endpoint, granted, self._ttl)
        self._etcd_lease = etcd_lease
        self._confirmed_at = started
        self._etcd_lease_ready.set()

    async def run(self) -> None:
        """Keep the current etcd lease alive until cancelled or lost (a background task)."""
        backoff = 0.05
        while not self._lost:
            if self._etcd_lease is None:
                await self._etcd_lease_ready.wait()
                continue
            try:
                path = "/v3/lease/keepalive"
                async with open_socket(self._gateway, path, "lease keepalive") as sock:
                    backoff = 0.05
                    while self._etcd_lease is not None:
                        await self._beat(sock.send, sock.receive)
            except (StoreUnavailable, StoreError) as exc:
                # Never let the background task die: a dead keepalive would take the whole
                # store down with it. Keep retrying; the clock check drops an etcd lease that
                # cannot have survived the outage.
                level = logging.INFO if isinstance(exc, StoreUnavailable) else logging.WARNING
                log.log(level, "etcd lease keepalive interrupted: %s", exc)
                self._expire_by_clock()
                await trio.sleep(backoff)
                backoff = min(backoff * 2, self._interval)

    async def _beat(self, send: _Send, receive: _Receive) -> None:
        etcd_lease = self._etcd_lease
        if etcd_lease is None:
            return
        due = self._confirmed_at + self._interval
        if trio.current_time() < due:
            # Re-check after sleeping: the etcd lease may have been replaced meanwhile.
            await trio.sleep_until(due)
            return
        sent = trio.current_time()
        await send(etcd_lease_keepalive(etcd_lease))
        with trio.move_on_after(self._gateway.config.timeout):
            try:
                reply = parse_stream_result(await receive())
            except ValueError as exc:
                raise errors.keepalive_unreadable(exc) from None
            if etcd_lease_id(reply) != etcd_lease or etcd_lease != self._etcd_lease:
                return  # an answer about an etcd lease this session no longer holds
            if etcd_lease_ttl(reply) <= 0:
                self.invalidate(etcd_lease, "etcd answered a keepalive without a TTL")
            else:
                self._confirmed_at = max(self._confirmed_at, sent)
            return
        raise errors.keepalive_timeout(self._gateway.endpoint, self._gateway.config.timeout)

    async def close(self) -> None:
        """End the session: revoke the etcd lease so its keys go now, not a TTL later.

        Gives up after the gateway's timeout when etcd cannot be reached: the keys then go
        when the etcd lease expires, within the TTL, since nothing keeps it alive any more.
        """
        self._ended = True
        etcd_lease, self._etcd_lease = self._etcd_lease, None
        if etcd_lease is not None:
            with trio.CancelScope(shield=True):
                await self._revoke(etcd_lease)

    async def _revoke(self, etcd_lease: int) -> None:
        with trio.move_on_after(self._gateway.config.timeout):
            try:
                await self._gateway.call(
                    "/v3/lease/revoke",
                    etcd_lease_revoke(etcd_lease),
                    doing="revoking the session lease",
                )
            except (StoreError, StoreUnavailable, ReplyError) as exc:
                # The keys still die within the TTL: nothing keeps the etcd lease alive any more.
                log.info(
                    "could not revoke etcd lease %x (%s); it expires on its own", etcd_lease, exc
                )
