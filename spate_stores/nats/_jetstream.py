"""The JetStream API subset a KV store needs: API calls, conditional publish, last-message reads.

JetStream answers in JSON (``{"error": {"code", "err_code", "description"}}`` on failure) or,
for direct gets, with a header-only status (``NATS/1.0 404 Message Not Found``). This module
turns both into Python values and a few precise exceptions (made by ``_errors.py``, which owns
every error code and message); the store decides what each means for the contract (Lost, None,
StoreError or StoreUnavailable).
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from typing import Any

import attrs

from spate import StoreError, StoreUnavailable
from spate_stores._tracing import client_span, server_endpoint
from spate_stores.nats import _errors as errors
from spate_stores.nats._connection import NatsConnection
from spate_stores.nats._errors import ApiError, WrongLastSequence
from spate_stores.nats._protocol import Headers, Msg, ProtocolError, parse_headers

__all__ = [
    "ApiError",
    "JetStream",
    "StoredMessage",
    "WrongLastSequence",
    "expect_sequence",
    "is_tombstone",
]

# The usual acknowledgement, parsed without json (this is every write's hot path); anything
# else (errors, duplicates, domains) goes through json.
_PLAIN_ACK = re.compile(rb'\{"stream":"[^"\\]*", ?"seq":([1-9][0-9]*)\}')

KV_OPERATION = "KV-Operation"
MARKER_REASON = "Nats-Marker-Reason"


def expect_sequence(sequence: int, *, delete: bool = False) -> bytes:
    """The header block of a conditional write: the subject's last sequence must be this.

    Built directly rather than through ``encode_headers``: it is on every write's hot path.
    """
    first = b"NATS/1.0\r\nKV-Operation: DEL\r\n" if delete else b"NATS/1.0\r\n"
    return first + b"Nats-Expected-Last-Subject-Sequence: %d\r\n\r\n" % sequence


def is_tombstone(headers: Headers | None) -> bool:
    """Whether a stored KV message marks its key as absent.

    ``KV-Operation: DEL|PURGE`` is a delete; 2.11+ expiry markers carry ``Nats-Marker-Reason``
    and no ``KV-Operation``, so both must be checked.
    """
    if headers is None:
        return False
    operation = headers.get(KV_OPERATION)
    return operation in ("DEL", "PURGE") or headers.get(MARKER_REASON) is not None


@attrs.frozen
class StoredMessage:
    """The last message stored on a subject."""

    subject: str
    sequence: int
    payload: bytes
    headers: Headers | None

    @property
    def tombstone(self) -> bool:
        """Whether it marks the key as deleted or expired."""
        return is_tombstone(self.headers)


def _json(msg: Msg, what: str) -> dict[str, Any]:
    try:
        data = json.loads(msg.payload)
    except ValueError:
        data = None
    if not isinstance(data, dict):
        raise errors.unreadable_reply(what, msg.payload)
    return data


def _api_error(data: dict[str, Any], what: str) -> ApiError | None:
    error = data.get("error")
    if not isinstance(error, dict):
        return None
    return ApiError(
        what,
        int(error.get("code", 500)),
        int(error.get("err_code", 0)),
        str(error.get("description", "unknown error")),
    )


class JetStream:
    """JetStream requests over one :class:`NatsConnection`."""

    def __init__(self, connection: NatsConnection) -> None:
        self.connection = connection
        self._server = server_endpoint(connection.options.host, connection.options.port)

    async def _request(
        self, operation: str, subject: str, payload: bytes = b"", headers: bytes | None = None
    ) -> Msg:
        # One client span per round trip; the subject is not recorded (it names the key).
        with client_span("nats", operation, server=self._server):
            return await self.connection.request(subject, payload, headers=headers)

    def _no_responders(self, what: str) -> StoreError | StoreUnavailable:
        return errors.no_responders(
            self.connection.options.url,
            what,
            # nats-server leaves "jetstream" out of its INFO when it runs without it.
            jetstream_disabled=not self.connection.server_info.get("jetstream"),
        )

    async def api(self, name: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        """Call ``$JS.API.<name>`` and return the JSON reply; raises ApiError if refused."""
        payload = json.dumps(body, separators=(",", ":")).encode() if body is not None else b""
        operation = ".".join(t for t in name.split(".")[:3] if t.isalpha() and t.isupper())
        msg = await self._request(f"JS.API.{operation}", f"$JS.API.{name}", payload)
        if msg.status == 503:
            raise self._no_responders(f"the JetStream API call {name}")
        data = _json(msg, name)
        error = _api_error(data, name)
        if error is not None:
            raise error
        return data

    async def publish(self, subject: str, payload: bytes, headers: bytes | None = None) -> int:
        """Store a message and return its stream sequence.

        Raises WrongLastSequence when an expected-sequence header did not hold, ApiError for
        other refusals, StoreUnavailable when the outcome is unknown.
        """
        msg = await self._request("publish", subject, payload, headers)
        plain = _PLAIN_ACK.fullmatch(msg.payload) if msg.headers is None else None
        if plain is not None:
            return int(plain[1])
        if msg.status == 503:
            raise self._no_responders(f"a write to {subject}")
        data = _json(msg, f"a write to {subject}")
        error = _api_error(data, f"write to {subject}")
        if error is not None:
            raise errors.write_refusal(error, subject)
        sequence = data.get("seq")
        if not isinstance(sequence, int) or sequence <= 0:
            raise errors.ack_without_sequence(subject)
        return sequence

    async def last_message(
        self, stream: str, subject: str, *, direct: bool
    ) -> StoredMessage | None:
        """The last message stored on ``subject`` (tombstones included), or None."""
        if direct:
            return await self._direct_get(stream, subject)
        return await self._msg_get(stream, subject)

    async def _direct_get(self, stream: str, subject: str) -> StoredMessage | None:
        msg = await self._request("JS.API.DIRECT.GET", f"$JS.API.DIRECT.GET.{stream}.{subject}")
        status = msg.status
        if status == 404:
            return None
        if status == 503:
            raise self._no_responders(f"a read of {subject}")
        if status is not None or msg.headers is None:
            description = msg.headers.description if msg.headers is not None else "no headers"
            raise errors.read_failed(subject, status, description)
        sequence = msg.headers.get("Nats-Sequence")
        if sequence is None or not sequence.isdigit():
            raise errors.read_without_sequence(subject)
        return StoredMessage(subject, int(sequence), msg.payload, msg.headers)

    async def _msg_get(self, stream: str, subject: str) -> StoredMessage | None:
        try:
            data = await self.api(f"STREAM.MSG.GET.{stream}", {"last_by_subj": subject})
        except ApiError as exc:
            if exc.err_code == errors.ERR_NO_MESSAGE:
                return None
            raise exc.translate() from None
        message = data.get("message")
        if not isinstance(message, dict) or not isinstance(message.get("seq"), int):
            raise errors.read_without_message(subject, data)
        try:
            payload = base64.b64decode(message.get("data") or "", validate=True)
            raw_headers = base64.b64decode(message.get("hdrs") or "", validate=True)
            headers = parse_headers(raw_headers) if raw_headers else None
        except (binascii.Error, ProtocolError) as exc:
            raise errors.read_corrupt(subject, exc) from None
        return StoredMessage(subject, message["seq"], payload, headers)

    async def delete_consumer_soon(self, stream: str, consumer: str) -> None:
        """Ask the server to delete a consumer, without waiting (best effort, never raises).

        Abandoned consumers are also removed by the server after their inactive threshold;
        this just frees them at once.
        """
        await self.connection.publish_if_connected(f"$JS.API.CONSUMER.DELETE.{stream}.{consumer}")
