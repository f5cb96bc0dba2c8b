"""The etcd v3 JSON gateway's wire format, without I/O.

Every request body the adapter sends is built here, from one schema, because the gateway
silently ignores unknown fields (a typo such as ``valu`` stores an empty value, ``ttl``
instead of ``TTL`` grants the minimum etcd lease). Every reply is read here too, with protobuf-JSON
defaults applied: the gateway omits fields holding their default value (``succeeded`` of a
lost txn, ``kvs`` of an empty range, the ``TTL`` of a dead etcd lease, an event's ``PUT`` type).
"""

from __future__ import annotations

import base64
import enum
import json
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

__all__ = [
    "ErrorKind",
    "EventKind",
    "GatewayError",
    "Json",
    "Kv",
    "MalformedReply",
    "RawEvent",
    "WatchMessage",
    "b64",
    "classify_error",
    "delete_range",
    "deleted_count",
    "each_succeeded",
    "etcd_lease_grant",
    "etcd_lease_id",
    "etcd_lease_keepalive",
    "etcd_lease_revoke",
    "etcd_lease_ttl",
    "header_revision",
    "parse_kvs",
    "parse_stream_result",
    "parse_watch_message",
    "prefix_end",
    "range_request",
    "txn_create",
    "txn_delete",
    "txn_delete_existing",
    "txn_each",
    "txn_put_if",
    "txn_succeeded",
    "unb64",
    "watch_create",
    "watch_progress",
]

Json = dict[str, Any]


class MalformedReply(ValueError):
    """A reply or stream message that does not have the gateway's shape."""


def b64(data: bytes) -> str:
    """Standard base64 with padding (the gateway rejects the URL-safe alphabet)."""
    return base64.b64encode(data).decode("ascii")


def unb64(text: str) -> bytes:
    """Decode a gateway bytes field."""
    return base64.b64decode(text, validate=True)


def prefix_end(prefix: bytes) -> bytes:
    """The ``range_end`` that selects every key starting with ``prefix``."""
    end = bytearray(prefix)
    while end:
        if end[-1] < 0xFF:
            end[-1] += 1
            return bytes(end)
        end.pop()
    return b"\x00"  # every key (etcd's convention for "no upper bound")


def _int(value: object, default: int = 0) -> int:
    # int64 fields are JSON strings in replies; absent means the protobuf default.
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise MalformedReply(f"expected an integer field, got {value!r}")
    return int(value)


# -- requests --------------------------------------------------------------------------


def range_request(
    key: bytes, *, range_end: bytes | None = None, limit: int = 0, revision: int = 0
) -> Json:
    """A ``/v3/kv/range`` body: one key, or ``[key, range_end)`` sorted by key."""
    body: Json = {"key": b64(key)}
    if range_end is not None:
        body["range_end"] = b64(range_end)
    if limit:
        body["limit"] = str(limit)
    if revision:
        body["revision"] = str(revision)
    return body


def _put(key: bytes, value: bytes, etcd_lease: int) -> Json:
    put: Json = {"key": b64(key), "value": b64(value)}
    if etcd_lease:
        put["lease"] = str(etcd_lease)
    return {"request_put": put}


def txn_create(key: bytes, value: bytes, *, etcd_lease: int = 0) -> Json:
    """A ``/v3/kv/txn`` body: put ``key`` only if it does not exist (create_revision == 0)."""
    return {
        "compare": [
            {"key": b64(key), "target": "CREATE", "result": "EQUAL", "create_revision": "0"}
        ],
        "success": [_put(key, value, etcd_lease)],
    }


def txn_put_if(key: bytes, value: bytes, expected: int, *, etcd_lease: int = 0) -> Json:
    """A ``/v3/kv/txn`` body: put ``key`` only if its mod_revision is ``expected``.

    ``expected`` must be > 0: ``MOD == 0`` holds for a missing key, which would turn a CAS
    on a deleted key into a create.
    """
    if expected <= 0:
        raise ValueError("a compare-and-swap needs a revision > 0")
    return {
        "compare": [
            {"key": b64(key), "target": "MOD", "result": "EQUAL", "mod_revision": str(expected)}
        ],
        "success": [_put(key, value, etcd_lease)],
    }


def txn_delete(key: bytes, expected: int) -> Json:
    """A ``/v3/kv/txn`` body: delete ``key`` only if its mod_revision is ``expected`` (> 0)."""
    if expected <= 0:
        raise ValueError("a guarded delete needs a revision > 0")
    return {
        "compare": [
            {"key": b64(key), "target": "MOD", "result": "EQUAL", "mod_revision": str(expected)}
        ],
        "success": [{"request_delete_range": {"key": b64(key)}}],
    }


def txn_delete_existing(key: bytes) -> Json:
    """A ``/v3/kv/txn`` body: delete ``key`` if it exists (succeeded tells whether it did)."""
    return {
        "compare": [
            {"key": b64(key), "target": "CREATE", "result": "GREATER", "create_revision": "0"}
        ],
        "success": [{"request_delete_range": {"key": b64(key)}}],
    }


def delete_range(key: bytes) -> Json:
    """A ``/v3/kv/deleterange`` body for one key."""
    return {"key": b64(key)}


def etcd_lease_grant(ttl: int) -> Json:
    """A ``/v3/lease/grant`` body (note the upper-case ``TTL``)."""
    return {"TTL": str(ttl)}


def etcd_lease_keepalive(etcd_lease: int) -> Json:
    """A keepalive request (one WebSocket message, or a one-shot POST body)."""
    return {"ID": str(etcd_lease)}


def etcd_lease_revoke(etcd_lease: int) -> Json:
    """A ``/v3/lease/revoke`` body."""
    return {"ID": str(etcd_lease)}


def watch_create(key: bytes, range_end: bytes | None, start_revision: int) -> Json:
    """A watch ``create_request`` for ``[key, range_end)`` from ``start_revision``.

    With no ``range_end`` the watch covers the one key ``key``.
    """
    request: Json = {"key": b64(key)}
    if range_end is not None:
        request["range_end"] = b64(range_end)
    request["start_revision"] = str(start_revision)
    return {"create_request": request}


def watch_progress() -> Json:
    """A ``progress_request``: the server answers with a header-only message."""
    return {"progress_request": {}}


# -- replies ---------------------------------------------------------------------------


@attrs.frozen
class Kv:
    """One key-value of a reply: raw key, value and mod_revision."""

    key: bytes
    value: bytes
    mod_revision: int
    etcd_lease: int = 0


def txn_each(txns: Sequence[Json]) -> Json:
    """A ``/v3/kv/txn`` body running each of ``txns`` on its own, all at one revision.

    The outer txn compares nothing; each inner one is a ``request_txn`` with its own compare,
    so each lands or loses independently (nested txns: etcd 3.3 and later).
    """
    return {"success": [{"request_txn": txn} for txn in txns]}


def each_succeeded(reply: Mapping[str, Any], count: int) -> list[bool] | None:
    """Whether each inner txn of a :func:`txn_each` reply held; None if the reply is not one."""
    responses = reply.get("responses", [])
    if not isinstance(responses, list) or len(responses) != count:
        return None
    held = []
    for response in responses:
        inner = response.get("response_txn") if isinstance(response, dict) else None
        if not isinstance(inner, dict):
            return None
        held.append(txn_succeeded(inner))
    return held


def header_revision(reply: Mapping[str, Any]) -> int:
    """The store revision a reply was served at."""
    return _int(reply.get("header", {}).get("revision"))


def _kv(raw: Mapping[str, Any]) -> Kv:
    return Kv(
        key=unb64(raw.get("key", "")),
        value=unb64(raw.get("value", "")),
        mod_revision=_int(raw.get("mod_revision")),
        etcd_lease=_int(raw.get("lease")),
    )


def parse_kvs(reply: Mapping[str, Any]) -> tuple[list[Kv], bool]:
    """The key-values of a range reply and whether more pages follow."""
    return [_kv(raw) for raw in reply.get("kvs", [])], bool(reply.get("more", False))


def txn_succeeded(reply: Mapping[str, Any]) -> bool:
    """Whether a txn's compare held (a lost txn has no ``succeeded`` field at all)."""
    return bool(reply.get("succeeded", False))


def deleted_count(reply: Mapping[str, Any]) -> int:
    """How many keys a delete_range removed."""
    return _int(reply.get("deleted"))


def etcd_lease_id(reply: Mapping[str, Any]) -> int:
    """The ``ID`` of an etcd lease grant reply."""
    return _int(reply.get("ID"))


def etcd_lease_ttl(reply: Mapping[str, Any]) -> int:
    """The ``TTL`` of a grant or keepalive reply; 0 (absent) means the etcd lease is gone."""
    return _int(reply.get("TTL"))


class EventKind(enum.Enum):
    """The two kinds of watch event."""

    PUT = "PUT"
    DELETE = "DELETE"


@attrs.frozen
class RawEvent:
    """One raw watch event: the key and the revision it happened at (and the value)."""

    kind: EventKind
    kv: Kv


@attrs.frozen
class WatchMessage:
    """One decoded watch stream message."""

    created: bool = False
    canceled: bool = False
    compact_revision: int = 0
    cancel_reason: str = ""
    events: tuple[RawEvent, ...] = ()
    error: str = ""
    """An in-stream error (the stream ends after it)."""


def parse_watch_message(text: str | bytes) -> WatchMessage:
    """Decode one ``{"result": ...}`` (or in-stream ``{"error": ...}``) watch line.

    Raises ValueError for anything that is not a watch message.
    """
    data = json.loads(text)
    if not isinstance(data, dict):
        raise MalformedReply("a watch message is a JSON object")
    if "error" in data:
        error = data["error"]
        if isinstance(error, Mapping):
            return WatchMessage(error=str(error.get("message", error)))
        return WatchMessage(error=str(error))
    result = data.get("result")
    if not isinstance(result, Mapping):
        raise MalformedReply("a watch message has a 'result' object")
    events = tuple(
        RawEvent(
            EventKind.DELETE if raw.get("type") == "DELETE" else EventKind.PUT,
            _kv(raw.get("kv", {})),
        )
        for raw in result.get("events", [])
    )
    return WatchMessage(
        created=bool(result.get("created", False)),
        canceled=bool(result.get("canceled", False)),
        compact_revision=_int(result.get("compact_revision")),
        cancel_reason=str(result.get("cancel_reason", "")),
        events=events,
    )


def parse_stream_result(text: str | bytes) -> Json:
    """The ``result`` object of one stream line (etcd lease keepalive); ValueError if absent."""
    data = json.loads(text)
    if isinstance(data, dict) and isinstance(data.get("result"), dict):
        result: Json = data["result"]
        return result
    if isinstance(data, dict) and "error" in data:
        error = data["error"]
        message = error.get("message", error) if isinstance(error, Mapping) else error
        raise MalformedReply(f"stream error: {message}")
    raise MalformedReply("a stream message has a 'result' object")


# -- errors ----------------------------------------------------------------------------


class ErrorKind(enum.Enum):
    """What an error reply means for the adapter (not the gRPC code: it varies by version)."""

    UNAVAILABLE = "unavailable"
    """Transient: no leader, timeout, overloaded, 5xx. StoreUnavailable."""
    INVALID_TOKEN = "invalid-token"
    """The auth token expired or was revoked: authenticate again and retry."""
    AUTH_FAILED = "auth-failed"
    """Wrong user name or password."""
    AUTH_REQUIRED = "auth-required"
    """The server has authentication enabled and the request carried no token."""
    AUTH_NOT_ENABLED = "auth-not-enabled"
    """Credentials were given to a server that does not enable authentication."""
    PERMISSION_DENIED = "permission-denied"
    """The user lacks a permission on the keys."""
    TOO_LARGE = "too-large"
    """The request exceeds the server's request size limit."""
    ETCD_LEASE_NOT_FOUND = "lease-not-found"
    """The etcd lease a write referred to has expired or was revoked."""
    COMPACTED = "compacted"
    """A read at a revision older than the compaction point."""
    CERT_COMMON_NAME = "cert-common-name"
    """The gateway refuses client certificates with a common name when auth is on."""
    NOT_GATEWAY = "not-gateway"
    """The endpoint does not speak the etcd v3 JSON gateway (plain-text 404/405...)."""
    OTHER = "other"
    """Anything else: a bug or an unexpected server; reported as StoreError."""


@attrs.frozen
class GatewayError:
    """A classified error reply."""

    kind: ErrorKind
    status: int
    code: int | None
    message: str


# gRPC status codes the gateway reports in the body's "code" field.
_UNAVAILABLE_CODES = {1, 4, 10, 14}  # Cancelled, DeadlineExceeded, Aborted, Unavailable


def classify_error(status: int, body: bytes) -> GatewayError:
    """Classify a non-200 reply by its gRPC code and message (HTTP statuses vary by version)."""
    text = body.decode("utf-8", errors="replace").strip()
    code: int | None = None
    message = text
    try:
        data = json.loads(text)
    except ValueError:
        data = None
    if isinstance(data, dict):
        raw_code = data.get("code")
        code = raw_code if isinstance(raw_code, int) and not isinstance(raw_code, bool) else None
        message = str(data.get("message") or data.get("error") or text)
    lowered = message.lower()

    def make(kind: ErrorKind) -> GatewayError:
        return GatewayError(kind, status, code, message)

    if code is None:
        if "commonname" in lowered:
            return make(ErrorKind.CERT_COMMON_NAME)
        if status >= 500 or status == 429:
            return make(ErrorKind.UNAVAILABLE)
        return make(ErrorKind.NOT_GATEWAY)
    if "request is too large" in lowered or "larger than max" in lowered:
        return make(ErrorKind.TOO_LARGE)
    if code == 16 or "invalid auth token" in lowered:
        return make(ErrorKind.INVALID_TOKEN)
    if "authentication failed" in lowered:
        return make(ErrorKind.AUTH_FAILED)
    if "user name is empty" in lowered:
        return make(ErrorKind.AUTH_REQUIRED)
    if "authentication is not enabled" in lowered:
        return make(ErrorKind.AUTH_NOT_ENABLED)
    if code == 7 or "permission denied" in lowered:
        return make(ErrorKind.PERMISSION_DENIED)
    if "lease not found" in lowered:
        return make(ErrorKind.ETCD_LEASE_NOT_FOUND)
    if "compacted" in lowered:
        return make(ErrorKind.COMPACTED)
    if code in _UNAVAILABLE_CODES or code == 8 or status >= 500:
        # 8 (ResourceExhausted) without the size message is etcd's "too many requests".
        return make(ErrorKind.UNAVAILABLE)
    return make(ErrorKind.OTHER)
