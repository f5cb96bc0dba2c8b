"""The etcd adapter's error mapping, pinned in one table (no server needed).

``spate_stores/etcd/_errors.py`` owns every translation of an etcd failure into spate's errors;
these tests pin what each failure becomes (the exception type and the words a user acts on),
and that no other module of the adapter words a transient failure itself.
"""

from __future__ import annotations

import ssl
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from spate import ConfigError, StoreError, StoreUnavailable, ValueTooLarge
from spate.store import SessionLost
from spate_stores.etcd import _errors as errors
from spate_stores.etcd._wire import ErrorKind, GatewayError

EP = "http://127.0.0.1:2379"


@pytest.mark.parametrize(
    ("exc", "kind", "words"),
    [
        (httpx.ConnectTimeout("slow"), StoreUnavailable, "did not answer in time"),
        (TimeoutError(), StoreUnavailable, "did not answer in time"),
        (httpx.ConnectError("refused"), StoreUnavailable, "cannot connect to etcd at"),
        (ConnectionRefusedError(111, "refused"), StoreUnavailable, "cannot connect to etcd at"),
        (httpx.ReadError("reset"), StoreUnavailable, "may or may not have been applied"),
        (
            ssl.SSLCertVerificationError(1, "certificate verify failed"),
            StoreError,
            "could not be verified",
        ),
        (ssl.SSLError(1, "handshake failure"), StoreError, "TLS handshake with etcd"),
    ],
)
def test_transport_failures(exc: BaseException, kind: type[Exception], words: str) -> None:
    error = errors.transport_error(EP, exc, doing="reading")
    assert type(error) is kind
    assert words in str(error)
    assert EP in str(error)


@pytest.mark.parametrize(
    ("kind", "error_type", "words"),
    [
        (ErrorKind.UNAVAILABLE, StoreUnavailable, "is unavailable while reading"),
        (ErrorKind.INVALID_TOKEN, StoreError, "rejected the auth token"),
        (ErrorKind.AUTH_FAILED, StoreError, "rejected the user name or password of user 'u'"),
        (ErrorKind.AUTH_REQUIRED, StoreError, "has authentication enabled"),
        (ErrorKind.PERMISSION_DENIED, StoreError, "denied user 'u' permission"),
        (ErrorKind.TOO_LARGE, StoreError, "max_request_bytes="),
        (ErrorKind.CERT_COMMON_NAME, StoreError, "client certificate without a CN"),
        (ErrorKind.NOT_GATEWAY, StoreError, "does not answer like an etcd v3 JSON gateway"),
        (ErrorKind.OTHER, StoreError, "refused a request while reading"),
    ],
)
def test_gateway_error_replies(kind: ErrorKind, error_type: type[Exception], words: str) -> None:
    error = errors.gateway_error(
        EP, GatewayError(kind, 400, 3, "boom"), doing="reading", user="u", limit=1024
    )
    assert type(error) is error_type
    assert words in str(error)


@pytest.mark.parametrize(
    ("reason", "compact", "kind", "words"),
    [
        ("", 7, StoreUnavailable, "compacted its history past revision 5"),
        ("mvcc: required revision has been compacted", 0, StoreUnavailable, "compacted"),
        ("etcdserver: permission denied", 0, StoreError, "denied user 'u' permission"),
        ("etcdserver: user name is empty", 0, StoreError, "has authentication enabled"),
        ("etcdserver: invalid auth token", 0, StoreError, "rejected the auth token"),
        ("something else", 0, StoreUnavailable, "canceled a new watch: something else"),
        ("", 0, StoreUnavailable, "canceled a new watch: no reason"),
    ],
)
def test_a_watch_refused_at_creation(
    reason: str, compact: int, kind: type[Exception], words: str
) -> None:
    error = errors.watch_refused(EP, reason, compact, 5, user="u", limit=1024)
    assert type(error) is kind
    assert words in str(error)


def test_a_broken_stream_is_always_transient() -> None:
    # Even a TLS failure mid-stream: the stream is opened again, not given up on.
    error = errors.stream_broken(EP, "watch", ssl.SSLError(1, "bad record mac"))
    assert type(error) is StoreUnavailable
    assert "TLS handshake" in str(error)
    reset = errors.stream_broken(EP, "watch", httpx.ReadError("reset"))
    assert type(reset) is StoreUnavailable
    assert "while using the watch stream" in str(reset)


# Every other mapping: (how to make it, the type, words the user acts on). Each function of
# _errors.py must appear here or in a test above (checked below).
TABLE: list[tuple[str, Callable[[], Exception], type[Exception], str]] = [
    ("no_member_served", lambda: errors.no_member_served("reading", ["a", "b"], ValueError("x")),
     StoreUnavailable, "no etcd endpoint could serve the request while reading (tried a, b)"),
    ("no_member_accepted_stream",
     lambda: errors.no_member_accepted_stream("watch", ["a", "b"], ValueError("x")),
     StoreUnavailable, "no etcd endpoint accepted the watch stream (tried a, b)"),
    ("stream_handshake_timeout", lambda: errors.stream_handshake_timeout(EP, "watch", 2.0),
     StoreUnavailable, "did not complete the watch WebSocket handshake within 2 s"),
    ("stream_closed", lambda: errors.stream_closed(EP, "watch", 1011, "going away"),
     StoreUnavailable, "closed (code 1011, going away); open it again"),
    ("stream_closed", lambda: errors.stream_closed(EP, "watch", None, None), StoreUnavailable,
     "closed (no close code)"),
    ("not_json", lambda: errors.not_json(EP), StoreError, "is it an etcd v3 gateway?"),
    ("sign_in_without_token", lambda: errors.sign_in_without_token(EP), StoreError,
     "answered a sign-in without a token"),
    ("tls_files_unreadable",
     lambda: errors.tls_files_unreadable(EP, "/ca.pem", None, None, OSError("missing")),
     StoreError, "cannot load the TLS files"),
    ("refused", lambda: errors.refused(EP, "listing", "bad range"), StoreError,
     "refused a request while listing: bad range"),
    ("value_too_large", lambda: errors.value_too_large("k", 2000, 1000), ValueTooLarge, "k"),
    ("compacted_during_listing", lambda: errors.compacted_during_listing(EP), StoreUnavailable,
     "faster than a listing could page through it; retry"),
    ("compacted_during_paged_listing",
     lambda: errors.compacted_during_paged_listing(EP, 12, 3), StoreUnavailable,
     "compacted revision 12 away while a paged listing was reading at it, after 3 pages"),
    ("ttl_record_unreadable", lambda: errors.ttl_record_unreadable("ns", b"x", "spate/ns:ttl"),
     StoreError, "delete the key 'spate/ns:ttl' to reset it"),
    ("ttl_mismatch", lambda: errors.ttl_mismatch("ns", 30, 10), StoreError,
     "already uses an ephemeral TTL of 30 s, not 10 s (all jobs of a namespace share its lease "
     "duration). To resolve it, open the store with ttl=30"),
    ("ttl_record_unstable", lambda: errors.ttl_record_unstable("ns"), StoreUnavailable,
     "kept changing; retry"),
    ("session_lost", lambda: errors.session_lost(EP, 10), SessionLost,
     "no keepalive confirmed for 10 s"),
    ("etcd_lease_unusable", lambda: errors.etcd_lease_unusable(EP, {"ID": "0"}), StoreError,
     "granted no usable lease"),
    ("etcd_lease_ttl_mismatch", lambda: errors.etcd_lease_ttl_mismatch(EP, 5, 10), StoreError,
     "granted a 5 s lease for a requested 10 s"),
    ("ttl_not_granted", lambda: errors.ttl_not_granted(EP, 2, 8, "ns"), ConfigError,
     "grants a lease of 8 s when asked for ttl=2 (its shortest lease is 1.5 election"),
    ("ttl_record_ungrantable", lambda: errors.ttl_record_ungrantable("ns", 10**12, 2, 9 * 10**9),
     StoreError, "records an ephemeral TTL of 1000000000000 s, which etcd cannot grant"),
    ("not_http", lambda: errors.not_http(EP, b"INFO {}"), StoreError,
     "is not an etcd gateway: it does not speak HTTP, it says b'INFO {}' (a NATS server's"),
    ("keepalive_unreadable", lambda: errors.keepalive_unreadable(ValueError("x")),
     StoreUnavailable, "unreadable lease keepalive reply: x"),
    ("keepalive_timeout", lambda: errors.keepalive_timeout(EP, 2.0), StoreUnavailable,
     "did not answer a lease keepalive within 2 s"),
    ("watch_ended", lambda: errors.watch_ended(EP), StoreUnavailable,
     f"the watch stream to etcd at {EP} ended; watch again"),
    ("watch_ended", lambda: errors.watch_ended(None), StoreUnavailable,
     "the etcd watch stream ended; watch again"),
    ("watch_unreadable", lambda: errors.watch_unreadable(EP, ValueError("x"), again=True),
     StoreUnavailable, "unreadable watch message (x); watch again"),
    ("watch_failed", lambda: errors.watch_failed(EP, "boom"), StoreUnavailable,
     "failed a watch: boom"),
    ("watch_not_acknowledged", lambda: errors.watch_not_acknowledged(EP), StoreUnavailable,
     "did not acknowledge a watch"),
    ("watch_not_acknowledged", lambda: errors.watch_not_acknowledged(EP, 2.0),
     StoreUnavailable, "did not acknowledge a watch within 2 s"),
    ("watch_silent", lambda: errors.watch_silent(EP, 2.0, again=True), StoreUnavailable,
     "went silent (no answer to a progress request within 2 s); watch again"),
    ("watch_broken", lambda: errors.watch_broken(EP, "boom"), StoreUnavailable,
     "broke a watch: boom; watch again"),
    ("watch_canceled", lambda: errors.watch_canceled(EP, 9, ""), StoreUnavailable,
     "fell behind compaction (compact revision 9)"),
    ("watch_canceled", lambda: errors.watch_canceled(EP, 0, ""), StoreUnavailable,
     "canceled a watch (no reason given); watch again"),
]  # fmt: skip


@pytest.mark.parametrize(("name", "make", "kind", "words"), TABLE, ids=[row[0] for row in TABLE])
def test_mapping(
    name: str, make: Callable[[], Exception], kind: type[Exception], words: str
) -> None:
    error = make()
    assert type(error) is kind
    assert words in str(error)


def test_every_mapping_is_pinned() -> None:
    tested_above = {"transport_error", "gateway_error", "watch_refused", "stream_broken"}
    assert set(errors.__all__) == {row[0] for row in TABLE} | tested_above


def test_the_adapter_words_no_transient_failure_outside_the_mapping() -> None:
    package = Path(errors.__file__).parent
    for module in sorted(package.glob("*.py")):
        if module.name == "_errors.py":
            continue
        text = module.read_text()
        for constructor in ("StoreUnavailable(", "SessionLost(", "ValueTooLarge("):
            assert constructor not in text, f"{module.name} builds a {constructor[:-1]}"


def _ssl_error(cls: type[ssl.SSLError], reason: str) -> ssl.SSLError:
    error = cls(1, f"[SSL: {reason}] {reason.lower()}")
    error.reason = reason
    return error


def _connect_error_from(cause: BaseException) -> httpx.ConnectError:
    error = httpx.ConnectError(str(cause))
    error.__cause__ = cause
    return error


@pytest.mark.parametrize(
    ("cause", "kind"),
    [
        (_ssl_error(ssl.SSLError, "WRONG_VERSION_NUMBER"), StoreError),
        (_ssl_error(ssl.SSLError, "RECORD_LAYER_FAILURE"), StoreError),
        # etcd serving plain HTTP hangs up on a ClientHello; so may a TLS server under load.
        (_ssl_error(ssl.SSLEOFError, "UNEXPECTED_EOF_WHILE_READING"), StoreUnavailable),
    ],
)
def test_an_https_url_against_a_plain_server_says_it_does_not_speak_tls(
    cause: ssl.SSLError, kind: type[Exception]
) -> None:
    error = errors.transport_error(
        "https://10.0.0.1:2379", _connect_error_from(cause), doing="reading"
    )
    assert type(error) is kind
    assert "the server at 10.0.0.1:2379 does not speak TLS" in str(error)
    assert "use an etcd:// URL" in str(error)


def test_a_plain_url_never_blames_tls() -> None:
    cause = _ssl_error(ssl.SSLEOFError, "UNEXPECTED_EOF_WHILE_READING")
    error = errors.transport_error(EP, _connect_error_from(cause), doing="reading")
    assert "does not speak TLS" not in str(error)
