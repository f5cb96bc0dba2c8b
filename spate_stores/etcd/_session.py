"""Store sessions on etcd: one etcd lease per session.

Every ephemeral write attaches its key to the lease of the session it names, so a key lives
while that session keeps its lease alive and dies within the TTL once it stops (process death,
network loss) or at once when the session ends (its lease is revoked). Each session sends a
keepalive every third of the TTL over its own WebSocket to the gateway, apart from the pooled
HTTP connections that carry commits, so commit traffic cannot starve it.

A lease can be lost while the session is in use: a pause or partition longer than the TTL, a
revoke by an operator. Then etcd answers keepalives without a TTL, and writes naming the lease
fail with "lease not found"; the session's own clock also knows that a lease with no keepalive
confirmed for a whole TTL cannot have survived. Refreshing a dead lease would do nothing
forever, so:

* a coordinator's session (``replace_lost=False``) becomes *lost*: its keepalives stop and
  writes naming it raise SessionLost (not applied); the coordinator opens a new session;
* the client's default session (for writes that name none: tools and tests) drops the lease
  and the next ephemeral write grants a new one. A write refused for its lease was not
  applied, so the store retries it once on a fresh lease.
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
    lease_grant,
    lease_id,
    lease_keepalive,
    lease_revoke,
    lease_ttl,
    parse_stream_result,
)
from spate_stores.etcd._ws import open_socket

__all__ = ["LeaseSession"]

log = logging.getLogger("spate.stores.etcd")

_Send = Callable[[dict[str, Any]], Awaitable[None]]
_Receive = Callable[[], Awaitable[str]]


class LeaseSession:
    """Grants, keeps alive and finally revokes one session's lease (see the module docs).

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
        self._lease: int | None = None
        # Trio time of the latest request (grant or keepalive) etcd confirmed for the
        # current lease: etcd restarts the TTL when it receives the request, which is no
        # earlier than when it was sent, so expiry is never later than this plus the TTL.
        self._confirmed_at = 0.0
        self._lease_ready = trio.Event()
        self._losses = 0

    @property
    def lease_id(self) -> int | None:
        """The current lease ID, or None when no live lease is held."""
        return self._lease

    @property
    def losses(self) -> int:
        """How many leases this session has lost (expired or revoked while in use)."""
        return self._losses

    @property
    def gateway(self) -> Gateway:
        """The gateway of the store client that opened this session."""
        return self._gateway

    @property
    def lost(self) -> bool:
        """Whether etcd (or the clock) says this session's lease is gone (never for the default)."""
        if not self._replace_lost and not self._lost and not self._ended:
            self._expire_by_clock()
        return self._lost

    @property
    def last_confirmed(self) -> float:
        """Trio time of the latest grant or keepalive etcd confirmed for the current lease."""
        return self._confirmed_at

    async def start(self) -> None:
        """Grant the session's lease now (a coordinator's session starts with one)."""
        async with self._lock:
            await self._grant()

    async def lease(self) -> int:
        """The lease for the next ephemeral write, granting a new one if this may."""
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
            if self._lease is None:
                await self._grant()
            assert self._lease is not None
            return self._lease

    def invalidate(self, lease: int, why: str) -> None:
        """Drop ``lease`` (if still current): etcd says it is gone."""
        if lease == self._lease:
            self._lease = None
            self._losses += 1
            self._lease_ready = trio.Event()
            if not self._replace_lost:
                self._lost = True
                self._lease_ready.set()  # wakes the keepalive task, which then ends
                log.warning(
                    "etcd session lease %x on %s is lost (%s); its ephemeral keys are gone "
                    "and its coordinator must open a new session",
                    lease,
                    self._gateway.endpoint,
                    why,
                )
                return
            log.warning(
                "etcd lease %x of the store client for %s is lost (%s); its ephemeral keys "
                "are gone and the next ephemeral write starts a new lease",
                lease,
                self._gateway.endpoint,
                why,
            )

    def _expire_by_clock(self) -> None:
        if self._lease is not None and trio.current_time() - self._confirmed_at >= self._ttl:
            self.invalidate(self._lease, f"no keepalive was confirmed for {seconds(self._ttl)}")

    async def _grant(self) -> None:
        started = trio.current_time()
        reply = await self._gateway.call(
            "/v3/lease/grant", lease_grant(self._ttl), doing="granting the session lease"
        )
        lease, granted = lease_id(reply), lease_ttl(reply)
        if lease == 0 or granted <= 0:
            raise errors.lease_unusable(self._gateway.endpoint, reply)
        if granted != self._ttl:
            await self._revoke(lease)
            raise errors.lease_ttl_mismatch(self._gateway.endpoint, granted, self._ttl)
        self._lease = lease
        self._confirmed_at = started
        self._lease_ready.set()

    async def run(self) -> None:
        """Keep the current lease alive until cancelled or lost (a background task)."""
        backoff = 0.05
        while not self._lost:
            if self._lease is None:
                await self._lease_ready.wait()
                continue
            try:
                path = "/v3/lease/keepalive"
                async with open_socket(self._gateway, path, "lease keepalive") as sock:
                    backoff = 0.05
                    while self._lease is not None:
                        await self._beat(sock.send, sock.receive)
            except (StoreUnavailable, StoreError) as exc:
                # Never let the background task die: a dead keepalive would take the whole
                # store down with it. Keep retrying; the clock check drops a lease that
                # cannot have survived the outage.
                level = logging.INFO if isinstance(exc, StoreUnavailable) else logging.WARNING
                log.log(level, "etcd lease keepalive interrupted: %s", exc)
                self._expire_by_clock()
                await trio.sleep(backoff)
                backoff = min(backoff * 2, self._interval)

    async def _beat(self, send: _Send, receive: _Receive) -> None:
        lease = self._lease
        if lease is None:
            return
        due = self._confirmed_at + self._interval
        if trio.current_time() < due:
            # Re-check after sleeping: the lease may have been replaced meanwhile.
            await trio.sleep_until(due)
            return
        sent = trio.current_time()
        await send(lease_keepalive(lease))
        with trio.move_on_after(self._gateway.config.timeout):
            try:
                reply = parse_stream_result(await receive())
            except ValueError as exc:
                raise errors.keepalive_unreadable(exc) from None
            if lease_id(reply) != lease or lease != self._lease:
                return  # an answer about a lease this session no longer holds
            if lease_ttl(reply) <= 0:
                self.invalidate(lease, "etcd answered a keepalive without a TTL")
            else:
                self._confirmed_at = max(self._confirmed_at, sent)
            return
        raise errors.keepalive_timeout(self._gateway.endpoint, self._gateway.config.timeout)

    async def close(self) -> None:
        """End the session: revoke the lease so its keys go now, not a TTL later.

        Gives up after the gateway's timeout when etcd cannot be reached: the keys then go
        when the lease expires, within the TTL, since nothing keeps it alive any more.
        """
        self._ended = True
        lease, self._lease = self._lease, None
        if lease is not None:
            with trio.CancelScope(shield=True):
                await self._revoke(lease)

    async def _revoke(self, lease: int) -> None:
        with trio.move_on_after(self._gateway.config.timeout):
            try:
                await self._gateway.call(
                    "/v3/lease/revoke", lease_revoke(lease), doing="revoking the session lease"
                )
            except (StoreError, StoreUnavailable, ReplyError) as exc:
                # The keys still die within the TTL: nothing keeps the lease alive any more.
                log.info("could not revoke etcd lease %x (%s); it expires on its own", lease, exc)
