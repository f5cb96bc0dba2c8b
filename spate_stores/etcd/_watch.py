"""Watch streams: list-then-watch with no gap, events decoded, breakage as StoreUnavailable.

The store lists a prefix at revision R (one consistent snapshot) and watches from R + 1, so
every later write arrives exactly once and nothing falls between the snapshot and the live
events. Events carry their own ``mod_revision``: replayed history arrives batched under the
header of the *current* revision, so headers never order events.

A watch breaks (StoreUnavailable, the caller re-watches, which lists again) when the stream
closes or errors, when etcd cancels it (its start revision was compacted, which happens if
the history between the listing and the watch was compacted away), or when a silent stream
does not answer a progress request. The stream is a WebSocket (both directions at once,
so progress requests work); with authentication enabled it is a one-way HTTP stream
instead, because the gateway's WebSocket proxy cannot pass an auth token to etcd.
"""

from __future__ import annotations

import collections
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any, Protocol

import httpx
import trio

from spate import StoreError, StoreUnavailable
from spate.store import Delete, Entry, Keyspace, Put, SnapshotDone, WatchEvent
from spate_stores.etcd import _errors as errors
from spate_stores.etcd._config import KeyLayout
from spate_stores.etcd._gateway import Gateway
from spate_stores.etcd._watch_failover import resuming_watch
from spate_stores.etcd._wire import (
    EventKind,
    WatchMessage,
    parse_watch_message,
    watch_create,
    watch_progress,
)
from spate_stores.etcd._ws import open_socket

__all__ = ["WatchIterator", "open_watch_stream"]

IDLE_PROBE = 10.0
"""Seconds of silence after which a WebSocket watch asks etcd for a progress answer."""


class WatchSource(Protocol):
    """Where watch messages come from."""

    can_probe: bool

    async def receive(self) -> str:
        """The next message; StoreUnavailable/StoreError if the stream broke."""
        ...

    async def probe(self) -> None:
        """Ask for a progress answer (only when ``can_probe``)."""
        ...


class _SocketSource:
    can_probe = True

    def __init__(
        self,
        send: Callable[[dict[str, Any]], Awaitable[None]],
        receive: Callable[[], Awaitable[str]],
    ) -> None:
        self._socket_send = send
        self._socket_receive = receive

    async def receive(self) -> str:
        return await self._socket_receive()

    async def probe(self) -> None:
        await self._socket_send(watch_progress())


class _ChannelSource:
    """Lines a reader task pulls off an HTTP stream (so a cancelled receive loses none)."""

    can_probe = False

    def __init__(self, channel: trio.MemoryReceiveChannel[str | Exception], endpoint: str) -> None:
        self._channel = channel
        self._endpoint = endpoint

    async def receive(self) -> str:
        try:
            item = await self._channel.receive()
        except (trio.EndOfChannel, trio.ClosedResourceError):
            raise errors.watch_ended(self._endpoint) from None
        if isinstance(item, Exception):
            raise item
        return item

    async def probe(self) -> None:
        raise AssertionError("an HTTP watch stream is one-way")


async def _pump_lines(
    gateway: Gateway,
    body: dict[str, object],
    send: trio.MemorySendChannel[str | Exception],
    scope: trio.CancelScope,
) -> None:
    with scope:
        async with send:
            try:
                async with gateway.stream_lines("/v3/watch", body, doing="watching") as lines:
                    async for line in lines:
                        if line.strip():
                            await send.send(line)
            except (StoreError, StoreUnavailable) as exc:
                await _deliver(send, exc)
            except httpx.HTTPError as exc:
                await _deliver(
                    send, errors.transport_error(gateway.endpoint, exc, doing="watching")
                )
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                return  # the watch was closed; nobody reads any more


async def _deliver(send: trio.MemorySendChannel[str | Exception], exc: Exception) -> None:
    try:
        await send.send(exc)
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        pass


def created_error(gateway: Gateway, message: WatchMessage, start_revision: int) -> Exception:
    """The error for a watch etcd canceled instead of creating (compacted, refused)."""
    return errors.watch_refused(
        gateway.endpoint,
        message.cancel_reason,
        message.compact_revision,
        start_revision,
        user=gateway.config.username,
        limit=gateway.config.max_request_bytes,
    )


async def _await_created(gateway: Gateway, source: WatchSource, start_revision: int) -> None:
    with trio.move_on_after(gateway.config.timeout):
        message = _parse(gateway, await source.receive())
        if message.error:
            raise errors.watch_failed(gateway.endpoint, message.error)
        if message.canceled:
            raise created_error(gateway, message, start_revision)
        if not message.created:
            raise errors.watch_not_acknowledged(gateway.endpoint)
        return
    raise errors.watch_not_acknowledged(gateway.endpoint, gateway.config.timeout)


def _parse(gateway: Gateway, text: str) -> WatchMessage:
    try:
        return parse_watch_message(text)
    except (ValueError, TypeError) as exc:
        raise errors.watch_unreadable(gateway.endpoint, exc, again=True) from None


@asynccontextmanager
async def open_watch_stream(
    gateway: Gateway,
    nursery: trio.Nursery,
    key: bytes,
    range_end: bytes | None,
    start_revision: int,
) -> AsyncIterator[WatchSource]:
    """Start a watch of ``[key, range_end)`` from ``start_revision``; yield its source.

    With no ``range_end`` it watches the one key ``key``.

    Returns once etcd acknowledged the watch. Background work (the HTTP reader) runs in
    ``nursery``, the store's, so no exception group wraps the caller's own exceptions.
    """
    body = watch_create(key, range_end, start_revision)
    if not gateway.uses_token and len(gateway.endpoints.all) > 1:
        # Several members: a task owns the stream and resumes it elsewhere when it breaks.
        async with resuming_watch(gateway, nursery, key, range_end, start_revision) as resumed:
            yield resumed
        return
    if not gateway.uses_token:
        async with open_socket(gateway, "/v3/watch", "watch") as sock:
            await sock.send(body)
            source = _SocketSource(sock.send, sock.receive)
            await _await_created(gateway, source, start_revision)
            yield source
        return
    for attempt in range(2):
        token = gateway.token
        send, receive = trio.open_memory_channel[str | Exception](1)
        scope = trio.CancelScope()
        nursery.start_soon(_pump_lines, gateway, dict(body), send, scope)
        try:
            channel_source = _ChannelSource(receive, gateway.endpoint)
            try:
                await _await_created(gateway, channel_source, start_revision)
            except StoreError:
                # An idle token may have expired since the last unary call (etcd 3.5 then
                # reports "permission denied", 3.4 "invalid auth token"): sign in again once.
                if attempt == 0:
                    await gateway.refresh_token(token)
                    continue
                raise
            yield channel_source
            return
        finally:
            scope.cancel()
            receive.close()


class WatchIterator:
    """The events of one watch: the snapshot as Put, SnapshotDone, then live events."""

    def __init__(
        self,
        snapshot: list[Entry],
        snapshot_revision: int,
        source: WatchSource,
        layout: KeyLayout,
        keyspace: Keyspace,
        gateway: Gateway,
    ) -> None:
        self._pending: collections.deque[WatchEvent] = collections.deque(
            [*(Put(entry) for entry in snapshot), SnapshotDone()]
        )
        self._snapshot_revision = snapshot_revision
        self._source = source
        self._layout = layout
        self._keyspace = keyspace
        self._gateway = gateway

    def __aiter__(self) -> WatchIterator:
        return self

    async def __anext__(self) -> WatchEvent:
        # Cancellation is checked before an event is taken and never after, and messages
        # are queued whole, so a cancelled call loses nothing.
        await trio.lowlevel.checkpoint_if_cancelled()
        while not self._pending:
            self._absorb(await self._next_message())
        event = self._pending.popleft()
        await trio.lowlevel.cancel_shielded_checkpoint()
        return event

    async def _next_message(self) -> WatchMessage:
        with trio.move_on_after(IDLE_PROBE if self._source.can_probe else float("inf")):
            return _parse(self._gateway, await self._source.receive())
        await self._source.probe()
        with trio.move_on_after(self._gateway.config.timeout):
            return _parse(self._gateway, await self._source.receive())
        raise errors.watch_silent(self._gateway.endpoint, self._gateway.config.timeout, again=True)

    def _absorb(self, message: WatchMessage) -> None:
        if message.error:
            raise errors.watch_broken(self._gateway.endpoint, message.error)
        if message.canceled:
            raise errors.watch_canceled(
                self._gateway.endpoint, message.compact_revision, message.cancel_reason
            )
        for raw in message.events:
            revision = raw.kv.mod_revision
            if revision <= self._snapshot_revision:
                continue  # already in the snapshot (the watch starts after it; defensive)
            key = self._layout.store_key(self._keyspace, raw.kv.key)
            if raw.kind is EventKind.DELETE:
                self._pending.append(Delete(key, revision))
            else:
                self._pending.append(Put(Entry(key, raw.kv.value, revision)))
