"""The NATS adapter's error mapping, pinned in one table (no server needed).

``spate_stores/nats/_errors.py`` owns every translation of a NATS failure into spate's errors;
these tests pin what each failure becomes (the exception type and the words a user acts on),
and that no other module of the adapter words a transient failure itself.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest

from spate import StoreError, StoreUnavailable, ValueTooLarge
from spate_stores.nats import _errors as errors
from spate_stores.nats._errors import (
    ApiError,
    ServerError,
    TlsVerificationFailed,
    WrongLastSequence,
)
from spate_stores.nats._protocol import ProtocolError
from spate_stores.nats._transport import TransportError

URL = "nats://127.0.0.1:4222/ns"


def test_jetstream_error_codes_are_the_servers() -> None:
    # The numbers nats-server sends in err_code (server/errors.json); a typo here would turn a
    # lost CAS into a StoreError.
    assert {
        "wrong last sequence": errors.ERR_WRONG_LAST_SEQUENCE,
        "wrong last sequence, clustered in flight": errors.ERR_WRONG_LAST_SEQUENCE_IN_FLIGHT,
        "stream name already in use": errors.ERR_STREAM_EXISTS,
        "stream not found": errors.ERR_STREAM_NOT_FOUND,
        "no message found": errors.ERR_NO_MESSAGE,
        "consumer not found": errors.ERR_CONSUMER_NOT_FOUND,
    } == {
        "wrong last sequence": 10071,
        "wrong last sequence, clustered in flight": 10164,
        "stream name already in use": 10058,
        "stream not found": 10059,
        "no message found": 10037,
        "consumer not found": 10014,
    }


def test_a_wrong_last_sequence_is_a_lost_cas_with_the_sequence_found() -> None:
    refusal = errors.write_refusal(ApiError("write", 400, 10071, "wrong last sequence: 42"), "s")
    assert isinstance(refusal, WrongLastSequence)
    assert refusal.last == 42
    unnumbered = errors.write_refusal(ApiError("write", 400, 10071, "wrong last sequence"), "s")
    assert isinstance(unnumbered, WrongLastSequence)
    assert unnumbered.last is None


def test_a_write_refused_while_another_replicates_is_transient() -> None:
    refusal = errors.write_refusal(ApiError("write", 400, 10164, "wrong last sequence"), "$KV.b.k")
    assert isinstance(refusal, StoreUnavailable)
    assert "$KV.b.k" in str(refusal)
    assert "10164" in str(refusal)
    assert "nothing was written, retry" in str(refusal)


def test_other_write_refusals_stay_api_errors_for_the_store_to_translate() -> None:
    error = ApiError("write", 400, 10076, "maximum messages per subject exceeded")
    assert errors.write_refusal(error, "s") is error


@pytest.mark.parametrize(
    ("code", "kind", "words"),
    [
        (503, StoreUnavailable, "JetStream is unavailable"),
        (500, StoreUnavailable, "retry later"),
        (400, StoreError, "JetStream refused the request"),
        (404, StoreError, "JetStream refused the request"),
    ],
)
def test_unexpected_refusals_are_transient_on_5xx_and_permanent_on_4xx(
    code: int, kind: type[Exception], words: str
) -> None:
    translated = ApiError("STREAM.INFO.KV_x", code, 10999, "boom").translate()
    assert type(translated) is kind
    assert words in str(translated)
    assert "boom" in str(translated)
    assert f"code {code}, err_code 10999" in str(translated)


@pytest.mark.parametrize(
    ("reason", "tried", "kind", "words"),
    [
        (ServerError("Authorization Violation"), 1, StoreError, "refused the credentials"),
        (TlsVerificationFailed("bad cert"), 1, StoreError, "?ca=/path/to/ca.pem"),
        (ProtocolError("garbage"), 1, StoreError, "does not speak the NATS client protocol"),
        (TransportError("refused"), 1, StoreUnavailable, "cannot connect to NATS at"),
        (TransportError("refused"), 2, StoreUnavailable, "cannot connect to any NATS server"),
        (ServerError("Unknown Protocol Operation"), 1, StoreUnavailable, "cannot connect"),
    ],
)
def test_a_failed_first_connection(
    reason: Exception, tried: int, kind: type[Exception], words: str
) -> None:
    servers = [("127.0.0.1", 4222), ("127.0.0.1", 4223)][:tried]
    failure = errors.first_connection_failed(URL, reason, servers)
    assert type(failure) is kind
    assert words in str(failure)
    assert URL in str(failure)


def test_a_store_error_from_the_handshake_passes_through() -> None:
    original = errors.headers_unsupported(URL)
    assert errors.first_connection_failed(URL, original, [("h", 1)]) is original


@pytest.mark.parametrize(
    ("reason", "fatal"),
    [
        (ServerError("Authorization Violation"), True),
        (ServerError("authentication timeout"), True),
        (ServerError("User Authentication Expired"), True),
        (TlsVerificationFailed("bad cert"), True),
        (StoreError("no headers"), True),
        (ServerError("Maximum Payload Violation"), False),
        (TransportError("connection refused"), False),
        (ProtocolError("garbage"), False),
    ],
)
def test_which_first_failures_skip_the_other_servers(reason: Exception, fatal: bool) -> None:
    assert errors.is_fatal_first_failure(reason) is fatal


def test_no_responders_means_disabled_jetstream_or_an_unavailable_stream() -> None:
    disabled = errors.no_responders(URL, "a write to s", jetstream_disabled=True)
    assert type(disabled) is StoreError
    assert "start nats-server with -js" in str(disabled)
    missing = errors.no_responders(URL, "a write to s", jetstream_disabled=False)
    assert type(missing) is StoreUnavailable
    assert "nothing answered a write to s" in str(missing)
    assert "nothing was applied" in str(missing)


# Every other mapping: (how to make it, the type, words the user acts on). Each function of
# _errors.py must appear here or in a test above (checked below).
TABLE: list[tuple[str, Callable[[], Exception], type[Exception], str]] = [
    ("closed_while_waiting", lambda: errors.closed_while_waiting(URL), StoreUnavailable,
     "may or may not have been applied"),
    ("broke_while_waiting", lambda: errors.broke_while_waiting(URL, TransportError("reset")),
     StoreUnavailable, "broke (reset) while waiting for a reply"),
    ("connection_down", lambda: errors.connection_down(URL, "reset"), StoreUnavailable,
     "is down (reset); nothing was sent"),
    ("broke_while_sending", lambda: errors.broke_while_sending(URL, TransportError("epipe")),
     StoreUnavailable, "broke while sending (epipe)"),
    ("not_connected", lambda: errors.not_connected(URL, "reset"), StoreUnavailable,
     "still reconnecting in the background, retry later"),
    ("reply_timeout", lambda: errors.reply_timeout(URL, "$KV.b.k", 2.5), StoreUnavailable,
     "to a request on $KV.b.k within 2.5 s"),
    ("store_closed", lambda: errors.store_closed(URL), StoreError, "is closed"),
    ("does_not_speak_tls",
     lambda: errors.does_not_speak_tls("h", 443, TransportError("x"), websocket=True),
     StoreError, "the WebSocket listener at h:443 does not speak TLS (x): use a nats+ws:// URL"),
    ("silent_server",
     lambda: errors.silent_server(URL, "h", 80, "ws", b'INFO {"server_id"}', TransportError("t")),
     StoreError, "h:80 is a NATS TCP client port, not a WebSocket listener"),
    ("silent_server",
     lambda: errors.silent_server(URL, "h", 2379, "tcp", b"HTTP/1.1 404", TransportError("t")),
     StoreError, "h:2379 is not a NATS client port: it answers HTTP (HTTP/1.1 404)"),
    ("silent_server",
     lambda: errors.silent_server(URL, "h", 4222, "tcp", None, TransportError("t")),
     StoreUnavailable, "not running there (or is hung), or the port serves something other"),
    ("does_not_speak_tls",
     lambda: errors.does_not_speak_tls("h", 4222, TransportError("WRONG_VERSION_NUMBER")),
     StoreError, "the server at h:4222 does not speak TLS"),
    ("credentials_refused", lambda: errors.credentials_refused(URL, "Authorization Violation"),
     StoreError, "now refuses the credentials (Authorization Violation)"),
    ("client_certificate_required", lambda: errors.client_certificate_required("h:4222"),
     StoreError, "h:4222 requires a TLS client certificate"),
    ("client_certificate_refused",
     lambda: errors.client_certificate_refused("h:4222", TransportError("alert unknown ca")),
     StoreError, "refused the TLS client certificate (alert unknown ca)"),
    ("headers_unsupported", lambda: errors.headers_unsupported(URL), StoreError,
     "nats-server 2.2 or later"),
    ("publish_denied", lambda: errors.publish_denied(URL, "$KV.b.k", "Permissions Violation"),
     StoreError, "may not publish to $KV.b.k"),
    ("unreadable_reply", lambda: errors.unreadable_reply("STREAM.INFO.x", b"<html>"),
     StoreUnavailable, "unreadable reply to STREAM.INFO.x: b'<html>'"),
    ("ack_without_sequence", lambda: errors.ack_without_sequence("$KV.b.k"), StoreUnavailable,
     "without a sequence"),
    ("read_failed", lambda: errors.read_failed("$KV.b.k", 408, "Request Timeout"),
     StoreUnavailable, "status 408 Request Timeout"),
    ("read_without_sequence", lambda: errors.read_without_sequence("$KV.b.k"),
     StoreUnavailable, "without Nats-Sequence"),
    ("read_without_message", lambda: errors.read_without_message("$KV.b.k", {"x": 1}),
     StoreUnavailable, "returned no message"),
    ("read_corrupt", lambda: errors.read_corrupt("$KV.b.k", ValueError("bad base64")),
     StoreUnavailable, "corrupt message: bad base64"),
    ("value_too_large", lambda: errors.value_too_large("k", 2000, 1000), ValueTooLarge, "k"),
    ("create_kept_racing", lambda: errors.create_kept_racing("k", 8), StoreUnavailable,
     "(8 attempts); nothing was written, retry"),
    ("delete_kept_racing", lambda: errors.delete_kept_racing("k", 8), StoreUnavailable,
     "(8 attempts); nothing was deleted, retry"),
    ("foreign_stream", lambda: errors.foreign_stream("KV_b", ["x.>"], ["$KV.b.>"]), StoreError,
     "it was not made by spate"),
    ("history_mismatch", lambda: errors.history_mismatch("b", 1, 5), StoreError,
     "keeps history 1 per key; spate keeps 5"),
    ("durable_bucket_expires", lambda: errors.durable_bucket_expires("b", 60.0), StoreError,
     "expires entries after 60 s"),
    ("ttl_mismatch", lambda: errors.ttl_mismatch("b", 30.0, 10.0), StoreError,
     "NATS namespace 'b' already uses an ephemeral TTL of 30 s, not 10 s"),
    ("stream_without_config", lambda: errors.stream_without_config("KV_b"), StoreError,
     "without a configuration"),
    ("watch_store_closed", errors.watch_store_closed, StoreUnavailable, "watch again"),
    ("watch_not_reestablished", lambda: errors.watch_not_reestablished("$KV.b.>", "gap"),
     StoreUnavailable, "could not be re-established (gap)"),
    ("watch_could_not_resume", lambda: errors.watch_could_not_resume("$KV.b.>", "gap"),
     StoreUnavailable, "could not resume in time"),
    ("watch_may_have_missed_expiries",
     lambda: errors.watch_may_have_missed_expiries("$KV.b.>", "gap"), StoreUnavailable,
     "may have missed deletions"),
]  # fmt: skip


@pytest.mark.parametrize(("name", "make", "kind", "words"), TABLE, ids=[row[0] for row in TABLE])
def test_mapping(
    name: str, make: Callable[[], Exception], kind: type[Exception], words: str
) -> None:
    error = make()
    assert type(error) is kind
    assert words in str(error)


def test_every_mapping_is_pinned() -> None:
    tested_above = {
        "write_refusal",
        "first_connection_failed",
        "is_fatal_first_failure",
        "no_responders",
    }
    functions = {
        name for name in errors.__all__ if name[0].islower() and callable(getattr(errors, name))
    }
    assert functions == {row[0] for row in TABLE} | tested_above


def test_the_adapter_words_no_transient_failure_outside_the_mapping() -> None:
    package = Path(errors.__file__).parent
    for module in sorted(package.glob("*.py")):
        if module.name == "_errors.py":
            continue
        text = module.read_text()
        assert "StoreUnavailable(" not in text, f"{module.name} builds a StoreUnavailable"
        assert "ValueTooLarge(" not in text, f"{module.name} builds a ValueTooLarge"
        # JetStream error codes are named in _errors.py, never written as numbers elsewhere.
        assert not re.search(r"\b10\d{3}\b", text), f"{module.name} has a JetStream error code"
