"""Watches that survive the loss of a member: resumed from their last revision elsewhere.

With several members (an endpoint list) a watch's WebSocket is served by a task in the
store's nursery rather than by the caller: when the stream breaks, goes silent, or its member
dies, the task opens a new stream on the next member that accepts one, starting right after
the last revision it passed on, and the caller sees nothing but the events. Revisions are
cluster-wide, so this neither misses nor repeats an event. (The task owns the socket because
a socket's own nursery cannot be opened inside the caller's ``__anext__`` and closed outside
it.) When no member can serve the watch, or etcd compacted past the resume point, the caller
gets StoreUnavailable and watches again, exactly as with one member.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import trio

from spate import StoreError, StoreUnavailable
from spate_stores.etcd import _errors as errors
from spate_stores.etcd._gateway import Gateway
from spate_stores.etcd._wire import WatchMessage, parse_watch_message, watch_create, watch_progress
from spate_stores.etcd._ws import GatewaySocket, open_socket

__all__ = ["ResumingSource", "resuming_watch"]

IDLE_PROBE = 10.0
"""Seconds of silence after which the stream asks etcd for a progress answer."""


class ResumingSource:
    """What the watch iterator reads: messages a background task passes on."""

    can_probe = False  # the task probes the stream itself

    def __init__(self, channel: trio.MemoryReceiveChannel[str | Exception]) -> None:
        self._channel = channel
        self.resumes = 0
        """How many times the stream was re-opened (for tests and telemetry)."""

    async def receive(self) -> str:
        """The next message; StoreUnavailable/StoreError when the watch cannot go on."""
        try:
            item = await self._channel.receive()
        except (trio.EndOfChannel, trio.ClosedResourceError):
            raise errors.watch_ended(None) from None
        if isinstance(item, Exception):
            raise item
        return item

    async def probe(self) -> None:
        """Never called (``can_probe`` is False)."""
        raise AssertionError("the resuming watch probes on its own")


def _parse(gateway: Gateway, text: str) -> WatchMessage:
    try:
        return parse_watch_message(text)
    except (ValueError, TypeError) as exc:
        raise errors.watch_unreadable(gateway.endpoint, exc, again=False) from None


async def _created(gateway: Gateway, sock: GatewaySocket, revision: int) -> None:
    with trio.move_on_after(gateway.config.timeout):
        message = _parse(gateway, await sock.receive())
        if message.error:
            raise errors.watch_failed(gateway.endpoint, message.error)
        if message.canceled:
            raise errors.watch_refused(
                gateway.endpoint,
                message.cancel_reason,
                message.compact_revision,
                revision,
                user=gateway.config.username,
                limit=gateway.config.max_request_bytes,
            )
        if not message.created:
            raise errors.watch_not_acknowledged(gateway.endpoint)
        return
    raise errors.watch_not_acknowledged(gateway.endpoint, gateway.config.timeout)


async def _pump(
    gateway: Gateway,
    key: bytes,
    range_end: bytes | None,
    revision: int,
    send: trio.MemorySendChannel[str | Exception],
    source: ResumingSource,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    started = False
    failures = 0
    async with send:
        while True:
            try:
                async with open_socket(gateway, "/v3/watch", "watch") as sock:
                    await sock.send(watch_create(key, range_end, revision))
                    await _created(gateway, sock, revision)
                    if not started:
                        started = True
                        task_status.started()
                    else:
                        source.resumes += 1
                    failures = 0
                    while True:
                        text = await _receive_or_probe(gateway, sock)
                        message = _parse(gateway, text)
                        if message.events:
                            # Resume right after the last event passed on (messages go whole).
                            last = max(event.kv.mod_revision for event in message.events)
                            revision = max(revision, last + 1)
                        await send.send(text)
                        if message.canceled or message.error:
                            return  # the iterator raises on it; nothing more will come
            except StoreUnavailable as exc:
                if not started:
                    raise
                failures += 1  # open_socket has moved the store past the failed member
                if failures >= len(gateway.endpoints.all):
                    await _deliver(send, exc)
                    return
            except StoreError as exc:
                if not started:
                    raise
                await _deliver(send, exc)
                return
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                return  # the watch was closed; nobody reads any more


async def _receive_or_probe(gateway: Gateway, sock: GatewaySocket) -> str:
    with trio.move_on_after(IDLE_PROBE):
        return await sock.receive()
    await sock.send(watch_progress())
    with trio.move_on_after(gateway.config.timeout):
        return await sock.receive()
    raise errors.watch_silent(gateway.endpoint, gateway.config.timeout, again=False)


async def _deliver(send: trio.MemorySendChannel[str | Exception], exc: Exception) -> None:
    try:
        await send.send(exc)
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        pass


@asynccontextmanager
async def resuming_watch(
    gateway: Gateway, nursery: trio.Nursery, key: bytes, range_end: bytes | None, revision: int
) -> AsyncIterator[ResumingSource]:
    """Watch ``[key, range_end)`` from ``revision``, resuming on other members; yield the source.

    With no ``range_end`` it watches the one key ``key`` (and resumes watching that key).

    Returns once a member acknowledged the watch (raising StoreUnavailable/StoreError if none
    did). The task serving it runs in ``nursery`` (the store's) and ends with the context.
    """
    send, receive = trio.open_memory_channel[str | Exception](1)
    source = ResumingSource(receive)
    scope = trio.CancelScope()

    async def serve(task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        with scope:
            await _pump(gateway, key, range_end, revision, send, source, task_status)

    try:
        await nursery.start(serve)
        yield source
    finally:
        scope.cancel()
        receive.close()
