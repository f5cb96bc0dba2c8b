"""Every translation of an etcd failure into spate's errors, in one place.

Transport failures, gateway error replies, broken or silent streams, refused watches, lost
etcd leases and a namespace whose records do not fit: each has one function here, and the rest of
the adapter raises what these return instead of wording errors itself (mistakes in the caller's
use of the API, like a closed store or a value that is not bytes, stay where they are checked).

The boundary rule: nothing from httpx, trio-websocket, ssl or the socket layer reaches a
caller. Transient trouble (refused, reset, timeout, 5xx, no leader) is StoreUnavailable
naming the endpoint; permanent trouble (credentials, permissions, TLS trust, size limit,
a server that is not an etcd gateway) is StoreError saying what to fix. Messages name the
endpoint and the user, never a password or token.
"""

from __future__ import annotations

import ssl
from collections.abc import Sequence
from urllib.parse import urlsplit

import httpx

from spate import ConfigError, SpateError, StoreError, StoreUnavailable, ValueTooLarge
from spate._quote import seconds
from spate.store import SessionLost
from spate_stores import _namespace
from spate_stores.etcd._wire import ErrorKind, GatewayError

__all__ = [
    "compacted_during_listing",
    "compacted_during_paged_listing",
    "etcd_lease_ttl_mismatch",
    "etcd_lease_unusable",
    "gateway_error",
    "keepalive_timeout",
    "keepalive_unreadable",
    "no_member_accepted_stream",
    "no_member_served",
    "not_http",
    "not_json",
    "refused",
    "session_lost",
    "sign_in_without_token",
    "stream_broken",
    "stream_closed",
    "stream_handshake_timeout",
    "tls_files_unreadable",
    "transport_error",
    "ttl_mismatch",
    "ttl_not_granted",
    "ttl_record_ungrantable",
    "ttl_record_unreadable",
    "ttl_record_unstable",
    "value_too_large",
    "watch_broken",
    "watch_canceled",
    "watch_ended",
    "watch_failed",
    "watch_not_acknowledged",
    "watch_refused",
    "watch_silent",
    "watch_unreadable",
]


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


def _ssl_detail(error: ssl.SSLError, first: str | None = None) -> object:
    # The ssl module sets reason (and verify_message) on the errors it raises; an SSLError
    # made elsewhere may lack them, and a missing attribute must not hide the failure.
    for name in (first, "reason"):
        value = getattr(error, name, None) if name is not None else None
        if value:
            return value
    return error


# What the ssl module reports when the other end answers a ClientHello with something other
# than TLS (an HTTP 400 page, a NATS INFO line) or hangs up on it.
_NOT_TLS_REASONS = frozenset(
    {
        "WRONG_VERSION_NUMBER",
        "UNEXPECTED_EOF_WHILE_READING",
        "RECORD_LAYER_FAILURE",
        "PACKET_LENGTH_TOO_LONG",
        "HTTP_REQUEST",
        "UNKNOWN_PROTOCOL",
        "WRONG_SSL_VERSION",
    }
)


def _not_tls_cause(exc: BaseException) -> ssl.SSLError | None:
    """The ssl error in ``exc``'s chain saying the server answered the handshake without TLS."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, ssl.SSLEOFError) or (
            isinstance(current, ssl.SSLError)
            and getattr(current, "reason", None) in _NOT_TLS_REASONS
        ):
            return current
        current = current.__cause__ or current.__context__
    return None


def _does_not_speak_tls(endpoint: str, cause: ssl.SSLError) -> StoreError | StoreUnavailable:
    """An https endpoint whose server answered the TLS handshake in plain text (or hung up).

    An answer that is not TLS is certain, and no retry mends it: StoreError. A server that
    hangs up on the handshake (what etcd serving plain HTTP does) may also be a TLS server
    dropping a connection, so that one stays retryable.
    """
    where = urlsplit(endpoint).netloc or endpoint
    advice = (
        ": if it serves plain HTTP, use an etcd:// URL instead of etcd+https://; otherwise "
        "check the host and port"
    )
    if isinstance(cause, ssl.SSLEOFError):
        return StoreUnavailable(
            f"the server at {where} does not speak TLS: it hung up on the TLS handshake "
            f"({_ssl_detail(cause)}){advice} (a TLS server dropping the connection does the "
            "same, so this may be retried)"
        )
    return StoreError(
        f"the server at {where} does not speak TLS: it answered the TLS handshake with "
        f"something else ({_ssl_detail(cause)}){advice}"
    )


def transport_error(
    endpoint: str, exc: BaseException, *, doing: str, read: bool = False
) -> SpateError:
    """The store error for a transport exception raised while ``doing`` something.

    ``read``: the request changes nothing (a range), so its message does not suggest it may
    have been applied.
    """
    plain = _not_tls_cause(exc)
    if plain is not None and endpoint.startswith("https:") and _is_connect_error(exc):
        return _does_not_speak_tls(endpoint, plain)
    unknown = (
        "it changed nothing (a read); retry"
        if read
        else "the operation may or may not have been applied"
    )
    tls = _ssl_cause(exc)
    if isinstance(tls, ssl.SSLCertVerificationError):
        return StoreError(
            f"the TLS certificate of etcd at {endpoint} could not be verified "
            f"({_ssl_detail(tls, 'verify_message')}); pass the CA that signed it with ca=..."
        )
    if tls is not None:
        return StoreError(
            f"the TLS handshake with etcd at {endpoint} failed ({_ssl_detail(tls)}); check "
            "ca=, and cert=/key= if the server requires client certificates"
        )
    if isinstance(exc, httpx.TimeoutException | TimeoutError):
        return StoreUnavailable(
            f"etcd at {endpoint} did not answer in time while {doing}; {unknown}"
        )
    if isinstance(exc, httpx.ConnectError | ConnectionRefusedError):
        return StoreUnavailable(
            f"cannot connect to etcd at {endpoint} while {doing} ({_describe(exc)}); "
            "check that it is running and reachable"
        )
    return StoreUnavailable(
        f"the connection to etcd at {endpoint} failed while {doing} ({_describe(exc)}); {unknown}"
    )


def _is_connect_error(exc: BaseException) -> bool:
    # The handshake is part of connecting: a TLS error later on is a broken connection.
    return isinstance(exc, httpx.ConnectError | ssl.SSLError | ConnectionError) or isinstance(
        exc.__cause__ or exc.__context__, httpx.ConnectError | ssl.SSLError
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


# -- members and streams -------------------------------------------------------------------


def no_member_served(doing: str, tried: Sequence[str], last: Exception) -> StoreUnavailable:
    """Every member failed a request that could be resent."""
    return StoreUnavailable(
        f"no etcd endpoint could serve the request while {doing} (tried {', '.join(tried)}); "
        f"the last said: {last}"
    )


def no_member_accepted_stream(what: str, tried: Sequence[str], last: Exception) -> StoreUnavailable:
    """No member accepted a WebSocket stream."""
    return StoreUnavailable(
        f"no etcd endpoint accepted the {what} stream (tried {', '.join(tried)}); "
        f"the last said: {last}"
    )


def stream_handshake_timeout(endpoint: str, what: str, timeout: float) -> StoreUnavailable:
    """A WebSocket stream whose handshake did not finish in time."""
    return StoreUnavailable(
        f"etcd at {endpoint} did not complete the {what} WebSocket handshake within "
        f"{seconds(timeout)}; check that it is reachable (and its TLS settings)"
    )


def stream_closed(
    endpoint: str, what: str, code: int | None, reason: str | None
) -> StoreUnavailable:
    """A WebSocket stream the server closed (``code`` None: no close code was sent)."""
    why = f"code {code}" if code is not None else "no close code"
    if code is not None and reason:
        why += f", {reason}"
    return StoreUnavailable(
        f"the {what} stream to etcd at {endpoint} closed ({why}); open it again"
    )


def stream_broken(endpoint: str, what: str, exc: BaseException) -> StoreUnavailable:
    """A WebSocket stream that broke under the transport (always transient: open it again)."""
    error = transport_error(endpoint, exc, doing=f"using the {what} stream")
    if isinstance(error, StoreUnavailable):
        return error
    return StoreUnavailable(str(error))


def not_json(origin: str) -> StoreError:
    """A reply that is not a JSON object: ``origin`` is probably no etcd gateway."""
    return StoreError(
        f"{origin} answered with something other than a JSON object; is it an etcd v3 gateway?"
    )


def not_http(endpoint: str, said: bytes) -> StoreError:
    """An endpoint whose port speaks something other than HTTP (``said``: its first line)."""
    hint = " (a NATS server's client port)" if said.startswith(b"INFO ") else ""
    return StoreError(
        f"{endpoint} is not an etcd gateway: it does not speak HTTP, it says {said[:40]!r}"
        f"{hint}; check the host and port of the etcd URL (etcd serves clients on 2379 by "
        "default)"
    )


def sign_in_without_token(endpoint: str) -> StoreError:
    """A sign-in answered without a token."""
    return StoreError(f"etcd at {endpoint} answered a sign-in without a token")


def tls_files_unreadable(
    endpoint: str, ca: str | None, cert: str | None, key: str | None, exc: Exception
) -> StoreError:
    """The configured TLS files could not be loaded."""
    return StoreError(
        f"cannot load the TLS files for etcd at {endpoint} "
        f"(ca={ca!r}, cert={cert!r}, key={key!r}): {exc}; check the paths "
        "and that they hold PEM data"
    )


# -- the store's contract ------------------------------------------------------------------


def refused(endpoint: str, doing: str, message: str) -> StoreError:
    """An error reply the operation has no meaning for."""
    return StoreError(f"etcd at {endpoint} refused a request while {doing}: {message}")


def value_too_large(key: str, size: int, limit: int) -> ValueTooLarge:
    """A value that would exceed the server's request limit (never sent)."""
    return ValueTooLarge(key, size, limit)


def compacted_during_listing(endpoint: str) -> StoreUnavailable:
    """Every attempt to page through a listing lost its revision to compaction."""
    return StoreUnavailable(
        f"etcd at {endpoint} compacted its history faster than a listing "
        "could page through it; retry"
    )


def compacted_during_paged_listing(endpoint: str, revision: int, pages: int) -> StoreUnavailable:
    """A paged listing's revision was compacted after some of its pages were handed out."""
    return StoreUnavailable(
        f"etcd at {endpoint} compacted revision {revision} away while a paged listing was "
        f"reading at it, after {pages} pages were handed out; those pages cannot be taken "
        "back, so the listing cannot continue: list again"
    )


def ttl_record_unreadable(namespace: str, value: bytes, key: str) -> StoreError:
    """The namespace's TTL record does not hold a number."""
    return StoreError(
        f"etcd namespace {namespace!r} has an unreadable TTL record "
        f"({value[:40]!r}); delete the key {key!r} to reset it"
    )


def ttl_mismatch(namespace: str, recorded: int, wanted: int) -> StoreError:
    """The namespace already uses another ephemeral TTL (the message every store gives)."""
    return _namespace.ttl_mismatch("etcd", namespace, recorded, wanted)


def ttl_record_unstable(namespace: str) -> StoreUnavailable:
    """The namespace's TTL record changed under every attempt to read or write it."""
    return StoreUnavailable(f"the TTL record of etcd namespace {namespace!r} kept changing; retry")


# -- etcd leases -------------------------------------------------------------------------------


def session_lost(endpoint: str, ttl: int) -> SessionLost:
    """A session whose etcd lease is gone (no keepalive confirmed for a TTL, or dropped by etcd)."""
    return SessionLost(
        f"the etcd session lease on {endpoint} is lost (no keepalive "
        f"confirmed for {seconds(ttl)}, or etcd dropped it); its keys are gone and "
        "nothing was written; open a new session"
    )


def etcd_lease_unusable(endpoint: str, reply: object) -> StoreError:
    """An etcd lease grant without an id or a TTL."""
    return StoreError(f"etcd at {endpoint} granted no usable lease: {reply}")


def etcd_lease_ttl_mismatch(endpoint: str, granted: int, wanted: int) -> StoreError:
    """An etcd lease granted with another TTL than asked (the server's limits)."""
    return StoreError(
        f"etcd at {endpoint} granted a {seconds(granted)} lease for a requested "
        f"{seconds(wanted)} (its lease TTL limits); open the namespace with a ttl etcd "
        "grants as asked"
    )


def ttl_not_granted(endpoint: str, wanted: int, granted: int, namespace: str) -> ConfigError:
    """A new namespace's TTL that this etcd server does not grant as asked (nothing recorded)."""
    why = (
        "its shortest lease is 1.5 election timeouts, so this server was started with a "
        "longer --election-timeout than the default"
        if granted > wanted
        else "its lease limits"
    )
    return ConfigError(
        f"etcd at {endpoint} grants a lease of {seconds(granted)} when asked for "
        f"ttl={wanted} ({why}), so namespace {namespace!r} cannot use that TTL; nothing was "
        f"written. Open it with ttl={granted} or more"
    )


def ttl_record_ungrantable(namespace: str, recorded: int, low: int, high: int) -> StoreError:
    """The namespace's recorded TTL is one etcd cannot grant (written by an older spate)."""
    return StoreError(
        f"etcd namespace {namespace!r} records an ephemeral TTL of {seconds(recorded)}, which "
        f"etcd cannot grant (its leases last {seconds(low)} to {seconds(high)}), so no lease "
        "can be taken there. Clear the record with `spate reset-ttl --store URL` (once no job "
        "is left there: `spate delete --store URL --job NAME` removes one), then open it with "
        "a ttl in range"
    )


def keepalive_unreadable(exc: Exception) -> StoreUnavailable:
    """A keepalive reply that does not parse."""
    return StoreUnavailable(f"unreadable lease keepalive reply: {exc}")


def keepalive_timeout(endpoint: str, timeout: float) -> StoreUnavailable:
    """No answer to a keepalive within the timeout."""
    return StoreUnavailable(
        f"etcd at {endpoint} did not answer a lease keepalive within {seconds(timeout)}"
    )


# -- watches -------------------------------------------------------------------------------


def watch_ended(endpoint: str | None) -> StoreUnavailable:
    """A watch stream that ended (``endpoint`` None: the resuming watch, which has several)."""
    if endpoint is None:
        return StoreUnavailable("the etcd watch stream ended; watch again")
    return StoreUnavailable(f"the watch stream to etcd at {endpoint} ended; watch again")


def watch_unreadable(endpoint: str, exc: Exception, *, again: bool) -> StoreUnavailable:
    """A watch message that does not parse (``again``: advise watching again)."""
    advice = "; watch again" if again else ""
    return StoreUnavailable(f"etcd at {endpoint} sent an unreadable watch message ({exc}){advice}")


def watch_failed(endpoint: str, error: str) -> StoreUnavailable:
    """A watch creation answered with an error."""
    return StoreUnavailable(f"etcd at {endpoint} failed a watch: {error}")


def watch_not_acknowledged(endpoint: str, timeout: float | None = None) -> StoreUnavailable:
    """A watch creation not acknowledged (at all, or within ``timeout``)."""
    if timeout is None:
        return StoreUnavailable(f"etcd at {endpoint} did not acknowledge a watch")
    return StoreUnavailable(
        f"etcd at {endpoint} did not acknowledge a watch within {seconds(timeout)}"
    )


def watch_refused(
    endpoint: str,
    cancel_reason: str,
    compact_revision: int,
    start_revision: int,
    *,
    user: str | None,
    limit: int,
) -> SpateError:
    """A watch etcd canceled instead of creating (compacted, refused)."""
    reason = cancel_reason.lower()
    if compact_revision or "compacted" in reason:
        return StoreUnavailable(
            f"etcd at {endpoint} compacted its history past revision {start_revision} "
            f"(compact revision {compact_revision}) before the watch started; "
            "watch again (it lists afresh)"
        )
    for needle, kind in (
        ("permission denied", ErrorKind.PERMISSION_DENIED),
        ("user name is empty", ErrorKind.AUTH_REQUIRED),
        ("invalid auth token", ErrorKind.INVALID_TOKEN),
    ):
        if needle in reason:
            return gateway_error(
                endpoint,
                GatewayError(kind, 200, None, cancel_reason),
                doing="starting a watch",
                user=user,
                limit=limit,
            )
    return StoreUnavailable(
        f"etcd at {endpoint} canceled a new watch: {cancel_reason or 'no reason'}"
    )


def watch_silent(endpoint: str, timeout: float, *, again: bool) -> StoreUnavailable:
    """A watch stream that did not answer a progress request."""
    advice = "; watch again" if again else ""
    return StoreUnavailable(
        f"the watch stream to etcd at {endpoint} went silent (no answer to a progress "
        f"request within {seconds(timeout)}){advice}"
    )


def watch_broken(endpoint: str, error: str) -> StoreUnavailable:
    """An open watch that etcd reported an error on."""
    return StoreUnavailable(f"etcd at {endpoint} broke a watch: {error}; watch again")


def watch_canceled(endpoint: str, compact_revision: int, reason: str) -> StoreUnavailable:
    """An open watch etcd canceled (fell behind compaction, or another reason)."""
    if compact_revision:
        return StoreUnavailable(
            f"etcd at {endpoint} canceled a watch that fell behind "
            f"compaction (compact revision {compact_revision}); watch again "
            "(it lists afresh)"
        )
    return StoreUnavailable(
        f"etcd at {endpoint} canceled a watch ({reason or 'no reason given'}); watch again"
    )
