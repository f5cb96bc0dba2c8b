"""A Trio NATS connection: handshake, request/reply, subscriptions, PINGs and reconnection.

One :class:`NatsConnection` owns one server connection at a time and every task that serves
it (reader, pinger, WebSocket internals) in one nursery, opened by ``__aenter__`` and closed by
``__aexit__``: a cancel of the code around the connection does not reach those tasks, so the
connection serves that code's clean-up (a worker's hand-backs) until it is closed. When the
connection breaks it reconnects with capped exponential backoff, re-subscribes, and carries on.
Exactly what happens to work in flight:

* a request whose bytes may have reached the server fails with
  :class:`~spate.StoreUnavailable` ("may or may not have landed") and is never resent:
  resending a write that landed could apply it twice;
* a request not yet sent waits for the connection to come back (up to its timeout), then goes
  out on the new connection;
* bytes queued for a broken connection are dropped, never sent on the next one;
* every subscription receives a :class:`ConnectionLost` marker in its channel, so its reader
  knows messages may have been missed while the connection was down.

With several servers (configured, or advertised by the cluster in INFO ``connect_urls``) each
attempt goes to the next server of the pool (see ``_servers.py``): the first connection tries
every configured server once before giving up, and a broken connection reconnects elsewhere.
"""

from __future__ import annotations

import collections
import itertools
import logging
import math
import random
import secrets
from contextlib import AbstractAsyncContextManager
from typing import Any

import attrs
import trio

from spate import StoreError
from spate._quote import seconds
from spate._version import __version__
from spate_stores._first_words import first_words
from spate_stores._service_nursery import open_service_nursery
from spate_stores.nats import _errors as errors
from spate_stores.nats._creds import load_credentials
from spate_stores.nats._errors import ServerError, TlsVerificationFailed
from spate_stores.nats._options import ConnectOptions
from spate_stores.nats._protocol import (
    Err,
    Event,
    Info,
    Msg,
    Parser,
    Ping,
    Pong,
    ProtocolError,
    encode_connect,
    encode_ping,
    encode_pong,
    encode_pub,
    encode_sub,
    encode_unsub,
)
from spate_stores.nats._servers import ServerPool
from spate_stores.nats._transport import (
    SocketTransport,
    Transport,
    TransportError,
    WebSocketTransport,
)

__all__ = ["ConnectionLost", "NatsConnection", "Subscription", "TlsVerificationFailed"]

log = logging.getLogger("spate.nats")

_INBOX_SID = 1
_MAX_PINGS_OUTSTANDING = 2


@attrs.frozen
class ConnectionLost:
    """Put in every subscription's channel when the connection breaks: messages may be lost."""

    reason: str


@attrs.define(eq=False)
class Subscription:
    """Messages on one subject, in order, as a Trio memory channel (unbounded).

    The channel never makes the connection's reader wait: JetStream flow control, answered
    by whoever consumes the channel, is what bounds it.
    """

    sid: int
    subject: str
    receive: trio.MemoryReceiveChannel[Msg | ConnectionLost]
    send: trio.MemorySendChannel[Msg | ConnectionLost]


class _Pending:
    """One request waiting for its reply: the requesting task parks itself here.

    The task is rescheduled directly rather than through a :class:`trio.Event` (whose parking
    lot costs more than the rest of the wake-up); ``replied`` marks a wake-up by a reply, which
    the connection counts to coalesce the writes of tasks woken together.
    """

    __slots__ = ("deadline", "replied", "result", "subject", "task")

    def __init__(self, subject: str, deadline: float) -> None:
        self.subject = subject
        self.deadline = deadline
        self.result: Msg | Exception | None = None
        self.task: trio.lowlevel.Task | None = None
        self.replied = False

    def resolve(self, result: Msg | Exception) -> bool:
        """Settle the request (the first result wins); whether this call settled it."""
        if self.result is not None:
            return False
        self.result = result
        task, self.task = self.task, None
        if task is not None:
            trio.lowlevel.reschedule(task)
        return True

    async def wait(self) -> None:
        """Park the current task until :meth:`resolve` (a checkpoint; cancellable)."""
        if self.result is not None:
            await trio.lowlevel.checkpoint()
            return
        self.task = trio.lowlevel.current_task()
        await trio.lowlevel.wait_task_rescheduled(self._abort)

    def _abort(self, _: trio.lowlevel.RaiseCancelT) -> trio.lowlevel.Abort:
        self.task = None
        return trio.lowlevel.Abort.SUCCEEDED


def _parse_version(text: object) -> tuple[int, ...]:
    numbers = []
    for part in str(text).split("-")[0].split("."):
        if not part.isdigit():
            break
        numbers.append(int(part))
    return tuple(numbers)


class NatsConnection:
    """One logical connection to a NATS server that survives reconnections (see module doc)."""

    def __init__(self, options: ConnectOptions) -> None:
        self.options = options
        self.pool = ServerPool(options.configured)
        """The servers this connection may use (configured first, then advertised ones)."""
        self._info: dict[str, Any] = {}
        self._transport: Transport | None = None
        self._ready = trio.Event()
        self._closed = False
        self._fatal: StoreError | None = None
        self._loss: Exception | None = None
        self._last_loss = "not connected yet"
        self._session_scope = trio.CancelScope()
        self._pending: dict[str, _Pending] = {}
        self._deadlines: collections.deque[_Pending] = collections.deque()
        self._timer_wakeup = trio.Event()
        self._subs: dict[int, Subscription] = {}
        self._sids = itertools.count(_INBOX_SID + 1)
        self._tokens = itertools.count(1)
        self._inbox = f"_INBOX.{secrets.token_hex(11)}"
        self._outbuf = bytearray()
        self._writer_busy = False
        # Requesters woken by a reply that have not run yet. While there are some, writes are
        # held back (see _send): those tasks run next in the same scheduler batch and, as a
        # request/reply client's tasks usually do, send again, so all of them go out in one
        # send. The last of them sends everything (and the writer task, if none sends).
        self._woken = 0
        self._writer_wakeup = trio.Event()
        self._pings_outstanding = 0
        self._parser = Parser()
        self._nursery_manager: AbstractAsyncContextManager[trio.Nursery] | None = None
        self._nursery: trio.Nursery | None = None
        self.reconnects = 0
        """How many times the connection was re-established (for tests and telemetry)."""
        self._public_key: str | None = None

    # -- state -----------------------------------------------------------------------------

    @property
    def server_info(self) -> dict[str, Any]:
        """The latest INFO the server sent (merged across INFO updates)."""
        return self._info

    @property
    def server_version(self) -> tuple[int, ...]:
        """The server version from INFO, e.g. ``(2, 11, 4)``."""
        return _parse_version(self._info.get("version", "0"))

    @property
    def max_payload(self) -> int:
        """Largest message (headers plus payload) the server accepts."""
        return int(self._info.get("max_payload", 1024 * 1024))

    @property
    def server(self) -> tuple[str, int]:
        """``(host, port)`` of the server in use (or tried next, while disconnected)."""
        return self.pool.current

    @property
    def connected(self) -> bool:
        """Whether a connection is up right now."""
        return self._transport is not None and self._loss is None

    def new_inbox(self) -> str:
        """A fresh subject nobody else subscribes to (for JetStream deliveries).

        It has two tokens after the inbox prefix, so the request wildcard ``<inbox>.*`` does
        not match it and deliveries are never mistaken for replies.
        """
        return f"{self._inbox}.d.{next(self._tokens)}"

    # -- lifecycle -------------------------------------------------------------------------

    async def __aenter__(self) -> NatsConnection:
        """Connect (one attempt); raises StoreUnavailable if unreachable, StoreError if refused."""
        # The connection's tasks serve every caller until the connection is closed: a cancel
        # of the code around the store must not cut off the requests its clean-up still makes.
        self._nursery_manager = open_service_nursery()
        self._nursery = await self._nursery_manager.__aenter__()
        try:
            self._nursery.start_soon(self._timer)
            await self._nursery.start(self._run)
        except BaseException:
            self._closed = True
            self._nursery.cancel_scope.cancel()
            await self._nursery_manager.__aexit__(None, None, None)
            raise
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        """Close: requests in flight fail with StoreUnavailable, subscriptions end."""
        await self.aclose()

    async def aclose(self) -> None:
        """Close the connection and stop every task serving it (idempotent)."""
        if self._nursery_manager is None or self._nursery is None:
            return
        self._closed = True
        for pending in list(self._pending.values()):
            pending.resolve(errors.closed_while_waiting(self.options.url, pending.subject))
        for sub in list(self._subs.values()):
            sub.send.close()
        self._subs.clear()
        self._ready.set()
        self._nursery.cancel_scope.cancel()
        manager, self._nursery_manager = self._nursery_manager, None
        await manager.__aexit__(None, None, None)

    # -- the connection loop ----------------------------------------------------------------

    async def _run(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        first = True
        delay = 0.05
        tried: list[tuple[str, int]] = []
        while not self._closed:
            started = trio.current_time()
            server = self.pool.current
            connected, reason = await self._session(task_status if first else None)
            if not connected or self._loss is not None:
                self.pool.advance()  # next attempt: the next server (no-op with one)
            if first and not connected:
                tried.append(server)
                if len(tried) < len(self.options.configured) and not (
                    errors.is_fatal_first_failure(reason)
                ):
                    continue  # the first connection tries each configured server once
                if isinstance(reason, errors.HandshakeTimeout) and len(tried) == 1:
                    # Only a first connection asks (an outage's reconnections need no words).
                    said = await first_words(*server, min(2.0, self.options.timeout))
                    raise errors.silent_server(
                        self.options.url, *server, self.options.transport, said, reason
                    )
                raise errors.first_connection_failed(
                    self.options.url, reason, tried, check=self._credentials_hint()
                )
            first = False
            if self._is_closed():
                return
            if isinstance(reason, ServerError) and reason.is_auth:
                # Requests fail fast with a clear error until the credentials work again.
                self._fatal = errors.credentials_refused(
                    self.options.url, reason.message, check=self._credentials_hint()
                )
                self._ready.set()
            log.warning("connection to %s lost (%s); reconnecting", self.options.url, reason)
            if trio.current_time() - started > 10 * self.options.reconnect_wait_max:
                delay = 0.05  # the last session lived a while: retry promptly
            await trio.sleep(delay * random.uniform(0.5, 1.0))
            delay = min(delay * 2, self.options.reconnect_wait_max)

    def _is_closed(self) -> bool:
        return self._closed

    def _credentials_hint(self) -> str:
        """What to check when the server refuses the credentials (the NKey's public key too)."""
        hint = self.options.credentials_hint
        if self._public_key is not None:
            hint += f"; this client's public key is {self._public_key}"
        return hint

    async def _session(self, task_status: trio.TaskStatus[None] | None) -> tuple[bool, Exception]:
        """Connect and serve until the connection ends; return if it connected, and why it ended."""
        self._loss = None
        self._pings_outstanding = 0
        transport: Transport | None = None
        with trio.CancelScope() as scope:
            self._session_scope = scope
            async with trio.open_nursery() as nursery:
                try:
                    transport = await self._connect(nursery)
                except (TransportError, ProtocolError, ServerError, StoreError) as exc:
                    self._loss = exc
                    nursery.cancel_scope.cancel()
                except trio.TooSlowError:
                    self._loss = errors.HandshakeTimeout(
                        f"no connection and handshake within {seconds(self.options.timeout)}"
                    )
                    nursery.cancel_scope.cancel()
                else:
                    self._transport = transport
                    self._fatal = None
                    self._ready.set()
                    if task_status is not None:
                        task_status.started()
                    else:
                        self.reconnects += 1
                        log.info("reconnected to %s", ServerPool.describe([self.pool.current]))
                    self._writer_wakeup = trio.Event()
                    nursery.start_soon(self._writer, transport)
                    nursery.start_soon(self._ping_loop)
                    await self._read_loop(transport)
        if transport is not None:
            await transport.aclose()
        self._transport = None
        return transport is not None, self._loss_reason()

    def _loss_reason(self) -> Exception:
        return self._loss or TransportError("the connection ended")

    def _lose(self, reason: Exception) -> None:
        """The connection broke: fail what was in flight, warn subscribers, end the session."""
        if self._loss is not None:
            return
        self._loss = reason
        self._last_loss = str(reason)
        self._outbuf.clear()
        self._ready = trio.Event()
        for pending in list(self._pending.values()):
            pending.resolve(errors.broke_while_waiting(self.options.url, reason, pending.subject))
        marker = ConnectionLost(str(reason))
        for sub in self._subs.values():
            sub.send.send_nowait(marker)
        self._session_scope.cancel()

    async def _connect(self, nursery: trio.Nursery) -> Transport:
        options = self.options
        host, port = self.pool.current
        transport: Transport
        with trio.fail_after(options.timeout):
            if options.transport == "ws":
                context = options.ssl_context() if options.tls else None
                transport = await WebSocketTransport.connect(nursery, host, port, context)
            else:
                transport = await SocketTransport.connect(host, port)
            try:
                transport = await self._handshake(transport, host)
            except BaseException:
                await transport.aclose()
                raise
        return transport

    async def _handshake(self, transport: Transport, host: str) -> Transport:
        """INFO, TLS upgrade if needed, CONNECT, PING/PONG, subscriptions; the transport to use."""
        options = self.options
        self._parser = parser = Parser()
        info: dict[str, Any] | None = None
        early: list[Event] = []
        while info is None:
            data = await transport.receive_some()
            if not data:
                raise TransportError("the server closed the connection before sending INFO")
            for event in parser.receive_data(data):
                if info is not None:
                    early.append(event)
                elif isinstance(event, Info):
                    info = event.data
                else:
                    raise ProtocolError(f"expected INFO first, got {event!r}")
        self._info = dict(info)
        self._learn(info)
        where = ServerPool.describe([self.pool.current])
        secured = False
        if isinstance(transport, SocketTransport) and (options.tls or info.get("tls_required")):
            if early or parser.buffered:
                raise ProtocolError("the server sent data after INFO before the TLS upgrade")
            if info.get("tls_verify") and options.cert_file is None:
                # Else the handshake "succeeds" and the server hangs up on the first read.
                raise errors.client_certificate_required(where)
            secured = True
            try:
                transport = await transport.start_tls(options.ssl_context(), host)
            except TransportError as exc:
                if "certificate" in str(exc).lower():
                    raise TlsVerificationFailed(str(exc)) from exc
                if not (info.get("tls_required") or info.get("tls_available")):
                    # Its INFO offered no TLS, and the handshake failed: it has none.
                    raise errors.does_not_speak_tls(host, self.pool.current[1], exc) from exc
                raise
        if info.get("headers") is False:
            raise errors.headers_unsupported(options.url)
        connect: dict[str, Any] = {
            "verbose": False,
            "pedantic": False,
            "headers": True,
            "no_responders": True,
            "protocol": 1,
            "lang": "python-spate-trio",
            "version": __version__,
            "name": options.name,
            "tls_required": options.tls,
        }
        if options.user is not None:
            connect["user"] = options.user
            connect["pass"] = options.password or ""
        if options.token is not None:
            connect["auth_token"] = options.token
        credentials = load_credentials(options.nkey_file, options.creds_file)
        if credentials is not None:
            self._public_key = credentials.key.public_key
            nonce = info.get("nonce")
            connect.update(credentials.connect_fields(nonce if isinstance(nonce, str) else None))
        subs = [encode_sub(f"{self._inbox}.*", _INBOX_SID)]
        subs += [encode_sub(sub.subject, sub.sid) for sub in self._subs.values()]
        await transport.send_all(encode_connect(connect) + encode_ping())
        while True:
            for event in early:
                if isinstance(event, Pong):
                    # Subscriptions go out before anything else on this connection, so a
                    # request written after this cannot overtake its own reply subscription.
                    await transport.send_all(b"".join(subs))
                    return transport
                if isinstance(event, Info):
                    self._info.update(event.data)
                    self._learn(event.data)
                elif isinstance(event, Ping):
                    await transport.send_all(encode_pong())
                elif isinstance(event, Err):
                    raise ServerError(event.message)
            try:
                data = await transport.receive_some()
            except TransportError as exc:
                # TLS 1.3 settles the client certificate after the handshake: a refused one
                # shows as an alert on the first read.
                if secured and "alert" in str(exc).lower():
                    raise errors.client_certificate_refused(where, exc) from exc
                raise
            if not data:
                raise TransportError("the server closed the connection during the handshake")
            early = parser.receive_data(data)

    async def _read_loop(self, transport: Transport) -> None:
        parser = self._parser
        while True:
            try:
                data = await transport.receive_some()
            except TransportError as exc:
                self._lose(exc)
                return
            if not data:
                self._lose(TransportError("the server closed the connection"))
                return
            try:
                events = parser.receive_data(data)
            except ProtocolError as exc:
                self._lose(exc)
                return
            for event in events:
                if type(event) is Msg:
                    self._deliver(event)
                elif isinstance(event, Ping):
                    self._send(encode_pong(), quiet=True)
                elif isinstance(event, Pong):
                    self._pings_outstanding = 0
                elif isinstance(event, Info):
                    self._info.update(event.data)
                    self._learn(event.data)
                elif isinstance(event, Err):
                    self._server_error(event)
            if self._loss is not None:
                return

    def _learn(self, info: dict[str, Any]) -> None:
        # A cluster advertises its servers' client addresses (WebSocket ones separately).
        key = "ws_connect_urls" if self.options.transport == "ws" else "connect_urls"
        self.pool.learn(info.get(key))

    def _deliver(self, msg: Msg) -> None:
        if msg.sid == _INBOX_SID:
            prefix, _, token = msg.subject.rpartition(".")
            if prefix == self._inbox:
                pending = self._pending.get(token)
                if pending is not None and pending.resolve(msg):
                    pending.replied = True
                    self._woken += 1
            return
        sub = self._subs.get(msg.sid)
        if sub is not None:
            sub.send.send_nowait(msg)

    def _server_error(self, err: Err) -> None:
        if err.fatal:
            self._lose(ServerError(err.message))
            return
        log.warning("NATS server %s: %s", self.options.url, err.message)
        _, _, quoted = err.message.partition('"')
        subject = quoted.rstrip('"')
        if err.message.lower().startswith("permissions violation for publish") and subject:
            failure = errors.publish_denied(self.options.url, subject, err.message)
            for pending in list(self._pending.values()):
                if pending.subject == subject:
                    pending.resolve(failure)

    async def _ping_loop(self) -> None:
        while True:
            await trio.sleep(self.options.ping_interval)
            if self._pings_outstanding >= _MAX_PINGS_OUTSTANDING:
                self._lose(TransportError("the server stopped answering PINGs"))
                return
            self._pings_outstanding += 1
            self._send(encode_ping(), quiet=True)

    # -- sending ---------------------------------------------------------------------------

    def _send(self, data: bytes, *, quiet: bool = False) -> None:
        """Hand ``data`` to the connection: written now if the kernel takes it, else queued.

        Synchronous on purpose: a caller cancelled mid-write can never leave half an operation
        on the wire (which would break the stream for every other user of the connection).
        What the kernel does not take at once goes to the writer task, in order. Raises
        StoreUnavailable (unless ``quiet``) when the connection is down: nothing was sent.
        """
        transport = self._transport
        if transport is None or self._loss is not None:
            if quiet:
                return
            raise errors.connection_down(self.options.url, self._last_loss)
        outbuf = self._outbuf
        if self._woken or self._writer_busy or not transport.sends_directly:
            # Coalesce: a woken requester still to run will send this along with its own
            # bytes; else the writer task sends it at the next scheduler batch.
            outbuf += data
            self._writer_wakeup.set()
            return
        if outbuf:
            outbuf += data
            data = bytes(outbuf)
            outbuf.clear()
        try:
            sent = transport.try_send(data)
        except TransportError as exc:
            self._lose(exc)
            if quiet:
                return
            raise errors.broke_while_sending(self.options.url, exc) from None
        if sent == len(data):
            return
        outbuf += memoryview(data)[sent:]
        self._writer_wakeup.set()

    async def _writer(self, transport: Transport) -> None:
        """Write whatever the kernel did not take at once (and everything, for TLS/WebSocket)."""
        while True:
            await self._writer_wakeup.wait()
            self._writer_wakeup = trio.Event()
            self._writer_busy = True
            try:
                while self._outbuf and self._loss is None:
                    chunk = bytes(self._outbuf)
                    self._outbuf.clear()
                    await transport.send_all(chunk)
            except TransportError as exc:
                self._lose(exc)
                return
            finally:
                self._writer_busy = False

    async def wait_connected(self, deadline: float) -> None:
        """Return once connected; StoreUnavailable at ``deadline``, StoreError if closed."""
        while True:
            if self._closed:
                raise errors.store_closed(self.options.url)
            if self._fatal is not None:
                raise StoreError(str(self._fatal))
            if self.connected:
                return
            with trio.move_on_at(deadline):
                await self._ready.wait()
                continue
            raise errors.not_connected(self.options.url, self._last_loss)

    async def publish(
        self, subject: str, payload: bytes = b"", headers: bytes | None = None
    ) -> None:
        """Send a message without waiting for anything (fire and forget)."""
        await self.wait_connected(trio.current_time() + self.options.timeout)
        self._send(encode_pub(subject, payload, headers=headers))
        await trio.lowlevel.checkpoint()

    async def publish_if_connected(self, subject: str, payload: bytes = b"") -> None:
        """Send a message now if connected, else drop it (for best-effort cleanup)."""
        if self.connected:
            self._send(encode_pub(subject, payload), quiet=True)
        await trio.lowlevel.checkpoint()

    async def request(
        self, subject: str, payload: bytes = b"", *, headers: bytes | None = None
    ) -> Msg:
        """Send a request and return its reply.

        Raises StoreUnavailable when no reply arrives within the timeout or the connection
        breaks after the request may have been sent (it may have been applied), StoreError
        when closed.
        """
        deadline = trio.current_time() + self.options.timeout
        if not self.connected:
            await self.wait_connected(deadline)
        token = str(next(self._tokens))
        pending = _Pending(subject, deadline)
        self._pending[token] = pending
        try:
            self._send(
                encode_pub(subject, payload, reply=f"{self._inbox}.{token}", headers=headers)
            )
            # No cancel scope per request (entering one costs more than the rest of a request
            # together): the timer task fails pendings whose deadline passed.
            self._deadlines.append(pending)
            if len(self._deadlines) == 1:
                self._timer_wakeup.set()
            await pending.wait()
        finally:
            del self._pending[token]
            if pending.replied:
                self._woken -= 1
        result = pending.result
        if isinstance(result, Exception):
            raise result
        assert result is not None
        return result

    async def _timer(self) -> None:
        """Fail requests whose reply did not come in time (deadlines arrive in order)."""
        deadlines = self._deadlines
        while True:
            while deadlines and deadlines[0].result is not None:
                deadlines.popleft()
            if not deadlines:
                self._timer_wakeup = trio.Event()
                await self._timer_wakeup.wait()
                continue
            await trio.sleep_until(deadlines[0].deadline)
            now = trio.current_time()
            while deadlines and deadlines[0].deadline <= now:
                pending = deadlines.popleft()
                pending.resolve(
                    errors.reply_timeout(self.options.url, pending.subject, self.options.timeout)
                )

    async def subscribe(self, subject: str) -> Subscription:
        """Subscribe to ``subject``; the subscription survives reconnections."""
        send, receive = trio.open_memory_channel[Msg | ConnectionLost](math.inf)
        sub = Subscription(next(self._sids), subject, receive, send)
        self._subs[sub.sid] = sub
        if self.connected:
            self._send(encode_sub(subject, sub.sid), quiet=True)
        await trio.lowlevel.checkpoint()
        return sub

    async def unsubscribe(self, sub: Subscription) -> None:
        """End a subscription (its channel closes; never raises)."""
        if self._subs.pop(sub.sid, None) is None:
            return
        sub.send.close()
        if self.connected:
            self._send(encode_unsub(sub.sid), quiet=True)
        await trio.lowlevel.checkpoint()
