"""Translate transport failures and gateway error replies into spate's two store errors.

The boundary rule: nothing from httpx, trio-websocket, ssl or the socket layer reaches a
caller. Transient trouble (refused, reset, timeout, 5xx, no leader) is StoreUnavailable
naming the endpoint; permanent trouble (credentials, permissions, TLS trust, size limit,
a server that is not an etcd gateway) is StoreError saying what to fix. Messages name the
endpoint and the user, never a password or token.
"""

from __future__ import annotations

import ssl
from typing import Protocol

import httpx

from spate.errors import SpateError, StoreError, StoreUnavailable
from spate_stores.etcd._config import EtcdConfig
from spate_stores.etcd._wire import ErrorKind, GatewayError, WatchMessage

__all__ = ["gateway_error", "transport_error", "watch_cancelled_error"]


def _ssl_cause(exc: BaseException) -> ssl.SSLError | None:
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, ssl.SSLError) and not isinstance(
            current, ssl.SSLEOFError | ssl.SSLZeroReturnError
        ):
            return current
        current = current.__cause__ or current.__context__
    return None


def transport_error(endpoint: str, exc: BaseException, *, doing: str) -> SpateError:
    """The store error for a transport exception raised while ``doing`` something."""
    tls = _ssl_cause(exc)
    if isinstance(tls, ssl.SSLCertVerificationError):
        return StoreError(
            f"the TLS certificate of etcd at {endpoint} could not be verified "
            f"({tls.verify_message or tls.reason}); pass the CA that signed it with ca=..."
        )
    if tls is not None:
        return StoreError(
            f"the TLS handshake with etcd at {endpoint} failed ({tls.reason or tls}); check "
            "ca=, and cert=/key= if the server requires client certificates"
        )
    if isinstance(exc, httpx.TimeoutException | TimeoutError):
        return StoreUnavailable(
            f"etcd at {endpoint} did not answer in time while {doing}; the operation may or "
            "may not have been applied"
        )
    if isinstance(exc, httpx.ConnectError | ConnectionRefusedError):
        return StoreUnavailable(
            f"cannot connect to etcd at {endpoint} while {doing} ({_describe(exc)}); "
            "check that it is running and reachable"
        )
    return StoreUnavailable(
        f"the connection to etcd at {endpoint} failed while {doing} ({_describe(exc)}); "
        "the operation may or may not have been applied"
    )


def _describe(exc: BaseException) -> str:
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        text = str(current)
        if text:
            return f"{type(current).__name__}: {text}"
        current = current.__cause__ or current.__context__
    return type(exc).__name__


def gateway_error(
    endpoint: str, error: GatewayError, *, doing: str, user: str | None, limit: int
) -> SpateError:
    """The store error for a classified error reply."""
    kind = error.kind
    detail = f"{error.message} (HTTP {error.status}, code {error.code})"
    if kind is ErrorKind.UNAVAILABLE:
        return StoreUnavailable(
            f"etcd at {endpoint} is unavailable while {doing}: {detail}; retry later"
        )
    if kind is ErrorKind.INVALID_TOKEN:
        return StoreError(
            f"etcd at {endpoint} rejected the auth token while {doing} even after signing in "
            f"again as {user!r}: {detail}"
        )
    if kind is ErrorKind.AUTH_FAILED:
        return StoreError(
            f"etcd at {endpoint} rejected the user name or password of user {user!r}; fix the "
            "credentials in the store URL (etcd://user:password@host:port)"
        )
    if kind is ErrorKind.AUTH_REQUIRED:
        return StoreError(
            f"etcd at {endpoint} has authentication enabled; put a user name and password "
            "in the store URL (etcd://user:password@host:port)"
        )
    if kind is ErrorKind.PERMISSION_DENIED:
        return StoreError(
            f"etcd at {endpoint} denied user {user!r} permission while {doing}; grant the "
            "user read-write on the namespace's prefix (spate/<namespace>:)"
        )
    if kind is ErrorKind.TOO_LARGE:
        return StoreError(
            f"etcd at {endpoint} refused a request as too large while {doing} ({detail}); "
            f"the store assumed a server request limit of {limit} bytes: set "
            "max_request_bytes= in the URL to the server's --max-request-bytes"
        )
    if kind is ErrorKind.CERT_COMMON_NAME:
        return StoreError(
            f"etcd at {endpoint} refuses gateway requests whose client certificate has a "
            "common name while authentication is enabled; use a client certificate without "
            "a CN (identify with user:password instead)"
        )
    if kind is ErrorKind.NOT_GATEWAY:
        return StoreError(
            f"{endpoint} does not answer like an etcd v3 JSON gateway while {doing} "
            f"({detail}); check the host and port (etcd 3.4 or later)"
        )
    return StoreError(f"etcd at {endpoint} refused a request while {doing}: {detail}")


def watch_cancelled_error(
    gateway: _HasEndpoint, message: WatchMessage, start_revision: int
) -> SpateError:
    """The error for a watch etcd canceled instead of creating (compacted, refused)."""
    reason = message.cancel_reason.lower()
    if message.compact_revision or "compacted" in reason:
        return StoreUnavailable(
            f"etcd at {gateway.endpoint} compacted its history past revision {start_revision} "
            f"(compact revision {message.compact_revision}) before the watch started; "
            "watch again (it lists afresh)"
        )
    for needle, kind in (
        ("permission denied", ErrorKind.PERMISSION_DENIED),
        ("user name is empty", ErrorKind.AUTH_REQUIRED),
        ("invalid auth token", ErrorKind.INVALID_TOKEN),
    ):
        if needle in reason:
            return gateway_error(
                gateway.endpoint,
                GatewayError(kind, 200, None, message.cancel_reason),
                doing="starting a watch",
                user=gateway.config.username,
                limit=gateway.config.max_request_bytes,
            )
    return StoreUnavailable(
        f"etcd at {gateway.endpoint} canceled a new watch: {message.cancel_reason or 'no reason'}"
    )


class _HasEndpoint(Protocol):
    """The gateway, as far as the error wording needs it (no import of the gateway here)."""

    @property
    def endpoint(self) -> str: ...

    @property
    def config(self) -> EtcdConfig: ...
