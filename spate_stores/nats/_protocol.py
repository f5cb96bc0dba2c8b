"""The NATS client protocol without I/O: bytes in, events out; commands in, bytes out.

:class:`Parser` turns whatever the server sent, split into chunks however the transport pleases
(TCP segments, WebSocket frames), into :data:`Event` objects. The ``encode_*`` functions turn
commands into the exact bytes to send. Nothing here touches a socket or a clock, so every rule
is tested byte for byte (see ``tests/stores/nats/test_nats_protocol.py``).

Wire facts this follows (checked against nats-server 2.9, 2.11 and 2.15):

* control lines end in CRLF and their fields are separated by *runs* of spaces or tabs
  (2.9 writes ``MSG subj 1  29`` with two spaces when there is no reply subject);
* ``INFO`` may arrive at any time, not only first;
* ``HMSG`` carries a header block starting with ``NATS/1.0`` and an optional status code and
  description (``NATS/1.0 503``, ``NATS/1.0 100 Idle Heartbeat``);
* after some ``-ERR`` messages the server closes the connection, after others it does not.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any, TypeAlias

import attrs

__all__ = [
    "Err",
    "Event",
    "Headers",
    "Info",
    "Msg",
    "Ok",
    "Ping",
    "Pong",
    "ProtocolError",
    "encode_connect",
    "encode_headers",
    "encode_ping",
    "encode_pong",
    "encode_pub",
    "encode_sub",
    "encode_unsub",
    "parse_headers",
]

MAX_CONTROL_LINE = 64 * 1024
"""Longest control line accepted; the server's own limit is 4 KiB, so more is garbage."""
MAX_MESSAGE_SIZE = 64 * 1024 * 1024
"""Largest message accepted (the server's max_payload is at most 64 MiB)."""

_CRLF = b"\r\n"
_HEADER_VERSION = "NATS/1.0"
# -ERR messages after which the connection stays open; every other -ERR ends it.
_NON_FATAL_ERRORS = ("invalid subject", "invalid publish subject", "permissions violation")


class ProtocolError(Exception):
    """The byte stream is not valid NATS protocol; the connection cannot continue."""


@attrs.frozen
class Headers:
    """The header block of an ``HMSG``: an optional status, then ordered name/value pairs."""

    items: tuple[tuple[str, str], ...] = ()
    """Header fields in wire order (names keep their case; a name may repeat)."""
    status: int | None = None
    """The status code of the ``NATS/1.0 <code>`` line, if any (503, 404, 100, ...)."""
    description: str = ""
    """The text after the status code (``Idle Heartbeat``, ``Message Not Found``)."""

    def get(self, name: str) -> str | None:
        """The first value of header ``name`` (case-insensitive), or None."""
        lowered = name.lower()
        for key, value in self.items:
            if key.lower() == lowered:
                return value
        return None


@attrs.frozen
class Info:
    """``INFO``: the server's description of itself (may arrive again at any time)."""

    data: dict[str, Any]


@attrs.frozen
class Msg:
    """``MSG`` or ``HMSG``: a message delivered to subscription ``sid``."""

    subject: str
    sid: int
    reply: str | None
    payload: bytes
    headers: Headers | None = None
    """None for ``MSG``; the parsed header block for ``HMSG``."""

    @property
    def status(self) -> int | None:
        """The header status code (503 no responders, 404, 100 heartbeat/flow control)."""
        return None if self.headers is None else self.headers.status


@attrs.frozen
class Ping:
    """``PING``: the server checks we are alive; answer with ``PONG``."""


@attrs.frozen
class Pong:
    """``PONG``: the answer to our ``PING``."""


@attrs.frozen
class Ok:
    """``+OK``: acknowledgement in verbose mode (we never ask for it, but tolerate it)."""


@attrs.frozen
class Err:
    """``-ERR``: an error from the server; ``fatal`` when the server closes the connection."""

    message: str
    fatal: bool


Event: TypeAlias = Info | Msg | Ping | Pong | Ok | Err
"""Anything :meth:`Parser.receive_data` yields."""


def _error_is_fatal(message: str) -> bool:
    return not message.lower().startswith(_NON_FATAL_ERRORS)


def _int(field: bytes, what: str) -> int:
    if not field.isdigit():
        raise ProtocolError(f"{what} is not a non-negative integer: {field[:40]!r}")
    return int(field)


def _text(field: bytes) -> str:
    try:
        return field.decode()
    except UnicodeDecodeError:
        raise ProtocolError(f"a control line field is not UTF-8: {field[:40]!r}") from None


def parse_headers(block: bytes) -> Headers:
    """Parse a ``NATS/1.0[ code[ description]]`` header block (ending in an empty line).

    Raises ProtocolError if it is malformed.
    """
    try:
        text = block.decode()
    except UnicodeDecodeError:
        raise ProtocolError("a message header block is not UTF-8") from None
    if not text.endswith("\r\n\r\n"):
        raise ProtocolError("a message header block does not end with an empty line")
    lines = text[:-4].split("\r\n")
    first = lines[0]
    if not first.startswith(_HEADER_VERSION):
        raise ProtocolError(f"a header block starts with {first[:40]!r}, not NATS/1.0")
    status: int | None = None
    description = ""
    rest = first[len(_HEADER_VERSION) :]
    if rest:
        if not rest[0].isspace():
            raise ProtocolError(f"malformed header status line {first[:60]!r}")
        code, _, description = rest.strip().partition(" ")
        if len(code) != 3 or not code.isdigit():
            raise ProtocolError(f"malformed header status code in {first[:60]!r}")
        status = int(code)
        description = description.strip()
    items: list[tuple[str, str]] = []
    for line in lines[1:]:
        name, colon, value = line.partition(":")
        if not colon or not name or name != name.strip():
            raise ProtocolError(f"malformed header line {line[:60]!r}")
        items.append((name, value.strip()))
    return Headers(tuple(items), status, description)


# subject, sid, reply, header size, total size of a MSG/HMSG whose payload is still arriving
_PendingMsg: TypeAlias = tuple[str, int, str | None, int, int]


class Parser:
    """Incremental parser of the server-to-client byte stream.

    Feed it every chunk received, in order, with :meth:`receive_data`; it returns the events
    completed so far and buffers any partial operation. After a :class:`ProtocolError` the
    stream is unusable and every later call raises again.
    """

    def __init__(self) -> None:
        self._buffer = bytearray()
        self._pending: _PendingMsg | None = None
        self._failed: ProtocolError | None = None

    @property
    def buffered(self) -> int:
        """Bytes received but not yet parsed into an event (a partial operation)."""
        return len(self._buffer)

    def receive_data(self, data: bytes) -> list[Event]:
        """Consume ``data`` and return the events it completes, in order.

        Raises ProtocolError on bytes that are not NATS protocol.
        """
        if self._failed is not None:
            raise self._failed
        buffer = self._buffer
        buffer += data
        events: list[Event] = []
        # Parse by position and trim the buffer once: trimming per operation would move the
        # rest of a large chunk again for every small message in it.
        pos = 0
        try:
            while True:
                pending = self._pending
                if pending is not None:
                    end = pos + pending[4]
                    if len(buffer) < end + 2:
                        break
                    if buffer[end : end + 2] != _CRLF:
                        raise ProtocolError("a message payload is not followed by CRLF")
                    body = bytes(buffer[pos:end])
                    pos = end + 2
                    self._pending = None
                    events.append(_message(pending, body))
                    continue
                end = buffer.find(_CRLF, pos)
                if end < 0:
                    if len(buffer) - pos > MAX_CONTROL_LINE:
                        raise ProtocolError(f"control line longer than {MAX_CONTROL_LINE} bytes")
                    break
                line = bytes(buffer[pos:end])
                pos = end + 2
                event = self._control(line)
                if event is not None:
                    events.append(event)
        except ProtocolError as exc:
            self._failed = exc
            raise
        del buffer[:pos]
        return events

    def _control(self, line: bytes) -> Event | None:
        """The event of a control line, or None when a message payload must follow."""
        fields = line.split()
        if not fields:
            raise ProtocolError("empty control line")
        op = fields[0].upper()
        args = fields[1:]
        if op == b"MSG":
            if len(args) not in (3, 4):
                raise ProtocolError(f"MSG takes 3 or 4 arguments: {line[:80]!r}")
            self._pending = _start(args[:-1], 0, _int(args[-1], "MSG size"))
            return None
        if op == b"HMSG":
            if len(args) not in (4, 5):
                raise ProtocolError(f"HMSG takes 4 or 5 arguments: {line[:80]!r}")
            header_size = _int(args[-2], "HMSG header size")
            total = _int(args[-1], "HMSG total size")
            if header_size > total:
                raise ProtocolError(f"HMSG header size exceeds total size: {line[:80]!r}")
            self._pending = _start(args[:-2], header_size, total)
            return None
        if op == b"PING" and not args:
            return Ping()
        if op == b"PONG" and not args:
            return Pong()
        if op == b"+OK" and not args:
            return Ok()
        if op == b"-ERR":
            message = _text(line[4:].strip()).strip("'")
            return Err(message, _error_is_fatal(message))
        if op == b"INFO":
            try:
                data = json.loads(line[4:])
            except ValueError:
                raise ProtocolError(f"INFO is not valid JSON: {line[:80]!r}") from None
            if not isinstance(data, dict):
                raise ProtocolError(f"INFO is not a JSON object: {line[:80]!r}")
            return Info(data)
        raise ProtocolError(f"unknown protocol operation {line[:40]!r}")


def _start(args: list[bytes], header_size: int, total: int) -> _PendingMsg:
    if total > MAX_MESSAGE_SIZE:
        raise ProtocolError(f"message of {total} bytes exceeds {MAX_MESSAGE_SIZE}")
    subject = _text(args[0])
    sid = _int(args[1], "subscription id")
    reply = _text(args[2]) if len(args) == 3 else None
    return (subject, sid, reply, header_size, total)


def _message(pending: _PendingMsg, body: bytes) -> Msg:
    subject, sid, reply, header_size, _ = pending
    if not header_size:
        return Msg(subject, sid, reply, body)
    return Msg(subject, sid, reply, body[header_size:], parse_headers(body[:header_size]))


# -- commands -----------------------------------------------------------------------------


_WHITESPACE = re.compile(rb"[ \t\r\n]")


def _check_token(value: str, what: str) -> bytes:
    encoded = value.encode()
    if not encoded or _WHITESPACE.search(encoded):
        raise ValueError(f"{what} {value!r} must be non-empty and contain no whitespace")
    return encoded


def encode_connect(options: dict[str, Any]) -> bytes:
    """``CONNECT {json}``."""
    return b"CONNECT " + json.dumps(options, separators=(",", ":")).encode() + _CRLF


def encode_ping() -> bytes:
    """``PING``."""
    return b"PING\r\n"


def encode_pong() -> bytes:
    """``PONG``."""
    return b"PONG\r\n"


def encode_headers(
    items: Iterable[tuple[str, str]], *, status: int | None = None, description: str = ""
) -> bytes:
    """A ``NATS/1.0`` header block from name/value pairs."""
    first = _HEADER_VERSION
    if status is not None:
        first += f" {status}" + (f" {description}" if description else "")
    lines = [first]
    for name, value in items:
        if not name or any(c in name for c in ":\r\n ") or any(c in value for c in "\r\n"):
            raise ValueError(f"invalid header {name!r}: {value!r}")
        lines.append(f"{name}: {value}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def encode_pub(
    subject: str,
    payload: bytes,
    *,
    reply: str | None = None,
    headers: bytes | None = None,
) -> bytes:
    """``PUB`` (no headers) or ``HPUB`` (with an encoded header block) with its payload."""
    parts = [b"HPUB " if headers else b"PUB ", _check_token(subject, "subject")]
    if reply is not None:
        parts += [b" ", _check_token(reply, "reply subject")]
    if headers:
        parts.append(b" %d %d\r\n" % (len(headers), len(headers) + len(payload)))
        parts += [headers, payload, _CRLF]
    else:
        parts += [b" %d\r\n" % len(payload), payload, _CRLF]
    return b"".join(parts)


def encode_sub(subject: str, sid: int, *, queue: str | None = None) -> bytes:
    """``SUB <subject> [queue] <sid>``."""
    middle = b" " + _check_token(queue, "queue group") if queue is not None else b""
    return b"SUB " + _check_token(subject, "subject") + middle + b" %d\r\n" % sid


def encode_unsub(sid: int, *, max_messages: int | None = None) -> bytes:
    """``UNSUB <sid> [max]``."""
    if max_messages is None:
        return b"UNSUB %d\r\n" % sid
    return b"UNSUB %d %d\r\n" % (sid, max_messages)
