"""Every translation of a NATS failure into spate's errors, in one place.

The boundary rule: nothing from the socket, TLS, WebSocket or protocol layers reaches a caller,
and the NATS adapter's other modules never word an error themselves; they call a function here.
Transient trouble is :class:`~spate.StoreUnavailable` (connection down or broken, a
timeout, no JetStream responder, a 5xx refusal, a reply that cannot be read, a stream leader
still replicating); permanent trouble is :class:`~spate.StoreError` saying what to fix
(credentials, TLS trust, permissions, JetStream disabled, a bucket that does not fit, a 4xx
refusal). Messages name the server URL (which never carries credentials, see ``_options.py``)
and never quote a password or token.

The JetStream API refusals that mean something to the contract are classified here too:

* ``10071`` (wrong last sequence) is a lost compare-and-swap: :class:`WrongLastSequence`;
* ``10164`` (a clustered stream's leader still replicating another write to the subject) is
  transient: nothing of this write was stored;
* ``10059`` (stream not found), ``10037`` (no message) and ``10058`` (stream exists) are
  answers, not failures, for the bucket and read code that asks;
* anything else is :meth:`ApiError.translate`: 5xx transient, 4xx permanent.

Oversized values never reach the server: the store refuses them with
:class:`~spate.ValueTooLarge` against the ``max_payload`` the server announced (a server
that enforced less would end the connection with ``-ERR 'Maximum Payload Violation'``, which,
like any fatal ``-ERR`` other than an authorization one, is a broken connection).
"""

from __future__ import annotations

from collections.abc import Sequence

from spate import StoreError, StoreUnavailable, ValueTooLarge
from spate._quote import seconds
from spate_stores import _namespace
from spate_stores.nats._protocol import ProtocolError
from spate_stores.nats._servers import ServerPool
from spate_stores.nats._transport import NotTls, TransportError

__all__ = [
    "AUTH_ERRORS",
    "ERR_CONSUMER_NOT_FOUND",
    "ERR_NO_MESSAGE",
    "ERR_STREAM_EXISTS",
    "ERR_STREAM_NOT_FOUND",
    "ERR_WRONG_LAST_SEQUENCE",
    "ERR_WRONG_LAST_SEQUENCE_IN_FLIGHT",
    "ApiError",
    "HandshakeTimeout",
    "ServerError",
    "TlsVerificationFailed",
    "WrongLastSequence",
    "ack_without_sequence",
    "broke_while_sending",
    "broke_while_waiting",
    "client_certificate_refused",
    "client_certificate_required",
    "closed_while_waiting",
    "connection_down",
    "create_kept_racing",
    "credentials_refused",
    "delete_kept_racing",
    "does_not_speak_tls",
    "durable_bucket_expires",
    "first_connection_failed",
    "foreign_stream",
    "headers_unsupported",
    "history_mismatch",
    "is_fatal_first_failure",
    "no_responders",
    "not_connected",
    "publish_denied",
    "read_corrupt",
    "read_failed",
    "read_without_message",
    "read_without_sequence",
    "reply_timeout",
    "silent_server",
    "store_closed",
    "stream_without_config",
    "ttl_mismatch",
    "unreadable_reply",
    "value_too_large",
    "watch_could_not_resume",
    "watch_may_have_missed_expiries",
    "watch_not_reestablished",
    "watch_store_closed",
    "write_refusal",
]

# -- JetStream API error codes (``err_code`` in an API reply's ``error``) ------------------------

ERR_WRONG_LAST_SEQUENCE = 10071
"""A conditional write's expected last subject sequence did not hold (a lost CAS)."""
ERR_WRONG_LAST_SEQUENCE_IN_FLIGHT = 10164
"""A clustered stream's leader refusing a conditional write because another write to the same
subject is still being replicated ("wrong last sequence", without a number): nothing of this
write was stored, and the subject's last sequence is about to move (or not, if that other
proposal is dropped by a leader change)."""
ERR_STREAM_EXISTS = 10058
"""STREAM.CREATE of a stream that exists with another configuration."""
ERR_STREAM_NOT_FOUND = 10059
"""The stream does not exist."""
ERR_NO_MESSAGE = 10037
"""STREAM.MSG.GET found no message on the subject."""
ERR_CONSUMER_NOT_FOUND = 10014
"""The consumer does not exist."""

AUTH_ERRORS = ("authorization violation", "authentication", "user authentication expired")
"""How the server's ``-ERR`` messages about credentials begin (lower-cased)."""


class ApiError(Exception):
    """JetStream refused a request; ``err_code`` is its stable error number."""

    def __init__(self, what: str, code: int, err_code: int, description: str) -> None:
        super().__init__(f"{what}: {description} (code {code}, err_code {err_code})")
        self.code = code
        self.err_code = err_code
        self.description = description

    def translate(self) -> StoreError | StoreUnavailable:
        """The contract's error for an unexpected refusal: 5xx transient, 4xx permanent."""
        if self.code >= 500:
            return StoreUnavailable(f"JetStream is unavailable ({self}); retry later")
        return StoreError(f"JetStream refused the request ({self})")


class WrongLastSequence(Exception):
    """A conditional publish lost: the subject's last sequence was not the expected one."""

    def __init__(self, last: int | None) -> None:
        super().__init__(f"wrong last sequence: {last}")
        self.last = last


class TlsVerificationFailed(TransportError):
    """The server's TLS certificate did not verify (a permanent misconfiguration)."""


class HandshakeTimeout(TransportError):
    """No connection and NATS handshake within the timeout (a hung server, or no NATS there)."""


class ServerError(Exception):
    """The server sent a fatal ``-ERR`` (it closes the connection after it)."""

    def __init__(self, message: str) -> None:
        super().__init__(f"server error: {message}")
        self.message = message

    @property
    def is_auth(self) -> bool:
        """Whether the server refused the credentials (no other server would accept them)."""
        return self.message.lower().startswith(AUTH_ERRORS)


def write_refusal(error: ApiError, subject: str) -> Exception:
    """What a refused conditional write raises: a lost CAS, a transient refusal, or ``error``.

    ``error`` itself (an :class:`ApiError`) is for refusals the contract has no meaning for;
    the store translates it with :meth:`ApiError.translate`.
    """
    if error.err_code == ERR_WRONG_LAST_SEQUENCE:
        _, _, last = error.description.rpartition(" ")
        return WrongLastSequence(int(last) if last.isdigit() else None)
    if error.err_code == ERR_WRONG_LAST_SEQUENCE_IN_FLIGHT:
        # Not a lost compare-and-swap yet: the write in flight may be this client's own
        # earlier attempt (its reply lost), which a Lost here would misreport as a rival's.
        # Transient: retrying after it settles gives the real answer.
        return StoreUnavailable(
            f"JetStream refused a write to {subject} while another write to the same "
            "key was still being replicated (wrong last sequence, err_code "
            f"{ERR_WRONG_LAST_SEQUENCE_IN_FLIGHT}); nothing was written, retry"
        )
    return error


# -- the connection ----------------------------------------------------------------------------


def is_fatal_first_failure(reason: Exception) -> bool:
    """Whether a failed first connection is a misconfiguration no other server would fix."""
    return (isinstance(reason, ServerError) and reason.is_auth) or isinstance(
        reason, TlsVerificationFailed | NotTls | StoreError
    )


def first_connection_failed(
    url: str,
    reason: Exception,
    tried: Sequence[tuple[str, int]],
    *,
    check: str = "the user and password or token in the store URL",
) -> Exception:
    """The error of a store whose first connection failed on every server ``tried``.

    ``check`` says which credentials to look at if the server refused them.
    """
    if isinstance(reason, ServerError) and reason.is_auth:
        return StoreError(f"{url} refused the credentials ({reason.message}); check {check}.")
    if isinstance(reason, TlsVerificationFailed):
        return StoreError(
            f"the TLS certificate of {url} did not verify ({reason}); pass the CA bundle "
            "that signed it as ?ca=/path/to/ca.pem, or fix the server's certificate."
        )
    if isinstance(reason, StoreError):
        return reason
    if isinstance(reason, NotTls):
        return does_not_speak_tls(reason.host, reason.port, reason, websocket=True)
    if isinstance(reason, ProtocolError):
        return StoreError(
            f"{url} does not speak the NATS client protocol ({reason}); check the scheme "
            "and port (TCP clients use 4222, WebSocket clients the websocket port)."
        )
    if len(tried) > 1:
        return StoreUnavailable(
            f"cannot connect to any NATS server of {url} (tried {ServerPool.describe(tried)}; "
            f"the last: {reason}). Check that nats-server is running there (with -js for "
            "JetStream) and reachable; the caller may retry."
        )
    return StoreUnavailable(
        f"cannot connect to NATS at {url}: {reason}. Check that nats-server is running "
        "there (with -js for JetStream) and reachable; the caller may retry."
    )


def silent_server(
    url: str, host: str, port: int, transport: str, said: bytes | None, reason: Exception
) -> Exception:
    """A first connection that got no NATS handshake in time, given what the port ``said``.

    ``said`` is the line :func:`~spate_stores.nats._transport.first_words` heard on a
    connection of its own: a NATS greeting at a WebSocket URL, or an HTTP status line at a
    TCP URL, is a wrong port for certain (StoreError); silence may be a hung server too, so
    that stays retryable and names both.
    """
    where = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    if said is not None and said.startswith(b"INFO ") and transport == "ws":
        return StoreError(
            f"{where} is a NATS TCP client port, not a WebSocket listener (it greets with "
            f"{said[:40]!r}…): use a nats:// URL for it, or the port of the server's "
            "websocket block for nats+ws://."
        )
    if said is not None and said.startswith(b"HTTP/") and transport == "tcp":
        return StoreError(
            f"{where} is not a NATS client port: it answers HTTP ({said.decode(errors='replace')})"
            ", as etcd, nats-server's monitoring port or a WebSocket listener do. Check the "
            "port (NATS clients use 4222 by default; a WebSocket listener takes a nats+ws:// "
            "URL)."
        )
    return StoreUnavailable(
        f"cannot connect to NATS at {url}: {reason}. Either nats-server is not running there "
        "(or is hung), or the port serves something other than NATS: check the host and port "
        "(TCP clients use 4222, WebSocket clients the websocket port) and that the server is "
        "reachable; the caller may retry."
    )


def does_not_speak_tls(
    host: str, port: int, reason: Exception, *, websocket: bool = False
) -> StoreError:
    """A ``tls://`` URL (or ``ca=``) against a server whose INFO offers no TLS.

    ``websocket``: a ``nats+wss://`` URL against a WebSocket listener without TLS.
    """
    where = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    if websocket:
        return StoreError(
            f"the WebSocket listener at {where} does not speak TLS ({reason}): use a "
            "nats+ws:// URL for a plain WebSocket (its websocket block says no_tls: true), or "
            "configure TLS in the server's websocket block."
        )
    return StoreError(
        f"the server at {where} does not speak TLS (its INFO offers none; {reason}): use a "
        "nats:// URL without ca= for a plain connection, or configure TLS on the server "
        "(a tls {} block)."
    )


def credentials_refused(
    url: str, message: str, *, check: str = "the user and password or token in the store URL"
) -> StoreError:
    """A server refusing the credentials on a reconnection (requests fail fast until fixed)."""
    return StoreError(f"{url} now refuses the credentials ({message}); check {check}.")


def client_certificate_required(where: str) -> StoreError:
    """A server that verifies client certificates (``verify: true``), and none configured."""
    return StoreError(
        f"the server at {where} requires a TLS client certificate (its tls block has verify: "
        "true) and the store URL gives none: add cert=/path/client.pem&key=/path/client-key.pem"
    )


def client_certificate_refused(where: str, reason: Exception) -> StoreError:
    """The server ended the TLS session over the client certificate (untrusted, expired...)."""
    return StoreError(
        f"the server at {where} refused the TLS client certificate ({reason}): check that "
        "cert= is signed by a CA in the server's tls ca_file, is not expired, and allows "
        "client authentication"
    )


def headers_unsupported(url: str) -> StoreError:
    """A server without message headers (before 2.2): JetStream KV cannot work."""
    return StoreError(
        f"the NATS server at {url} does not support message headers; "
        "JetStream KV needs nats-server 2.2 or later (spate is tested on 2.9+)."
    )


def closed_while_waiting(url: str, subject: str = "") -> StoreUnavailable:
    """The store was closed while a request (on ``subject``) waited for its reply."""
    return StoreUnavailable(
        f"the store's connection to {url} was closed while a request waited "
        f"for its reply; {_outcome(subject)}"
    )


def broke_while_waiting(url: str, reason: Exception, subject: str = "") -> StoreUnavailable:
    """The connection broke while a request (on ``subject``) waited for its reply."""
    return StoreUnavailable(
        f"the connection to NATS at {url} broke ({reason}) while waiting for "
        f"a reply; {_outcome(subject)}"
    )


def connection_down(url: str, last_loss: str) -> StoreUnavailable:
    """A send attempted while the connection is down: nothing was sent."""
    return StoreUnavailable(
        f"the connection to NATS at {url} is down ({last_loss}); nothing was sent"
    )


def broke_while_sending(url: str, exc: Exception) -> StoreUnavailable:
    """The connection broke during a send."""
    return StoreUnavailable(f"the connection to NATS at {url} broke while sending ({exc})")


def store_closed(url: str) -> StoreError:
    """A request on a closed store."""
    return StoreError(f"the NATS store for {url} is closed")


def not_connected(url: str, last_loss: str) -> StoreUnavailable:
    """No connection came back within a request's timeout."""
    return StoreUnavailable(
        f"not connected to NATS at {url} ({last_loss}); still "
        "reconnecting in the background, retry later"
    )


def reply_timeout(url: str, subject: str, timeout: float) -> StoreUnavailable:
    """No reply to a request within its timeout."""
    return StoreUnavailable(
        f"no reply from NATS at {url} to a request on {subject} within {seconds(timeout)}; "
        f"{_outcome(subject)}"
    )


_READ_SUBJECTS = (".INFO", ".DIRECT.GET.", ".MSG.GET.", ".STREAM.NAMES", ".STREAM.LIST")


def _outcome(subject: str) -> str:
    """What an unanswered request on ``subject`` may have done.

    A read (stream info, a get) changed nothing: saying it "may have been applied" would send
    an operator looking for a write nobody made.
    """
    if any(part in subject for part in _READ_SUBJECTS):
        return "it changed nothing (a read); retry"
    return "it may or may not have been applied"


def publish_denied(url: str, subject: str, message: str) -> StoreError:
    """``-ERR 'Permissions Violation for Publish to "<subject>"'`` for a request's subject."""
    return StoreError(
        f"the NATS account used for {url} may not publish to {subject} "
        f"({message}); grant it the JetStream API and $KV subjects."
    )


# -- JetStream replies -------------------------------------------------------------------------


def no_responders(
    url: str, what: str, *, jetstream_disabled: bool
) -> StoreError | StoreUnavailable:
    """A ``503`` (no responders) reply to ``what``: JetStream disabled, or a stream unavailable."""
    if jetstream_disabled:
        return StoreError(
            f"JetStream is not enabled on the NATS server at {url}, and spate keeps its "
            "records in JetStream key-value buckets: start nats-server with -js (JetStream), "
            "or give its config a jetstream {} block."
        )
    return StoreUnavailable(
        f"nothing answered {what} on {url} (no JetStream responder: "
        "the stream may be missing or electing a leader); nothing was applied"
    )


def unreadable_reply(what: str, payload: bytes) -> StoreUnavailable:
    """A JetStream reply that is not a JSON object."""
    return StoreUnavailable(f"JetStream sent an unreadable reply to {what}: {payload[:80]!r}")


def ack_without_sequence(subject: str) -> StoreUnavailable:
    """A write acknowledgement without a usable sequence."""
    return StoreUnavailable(f"JetStream acknowledged a write to {subject} without a sequence")


def read_failed(subject: str, status: int | None, description: str) -> StoreUnavailable:
    """A direct get answered with an unexpected status."""
    return StoreUnavailable(f"a read of {subject} failed: status {status} {description}")


def read_without_sequence(subject: str) -> StoreUnavailable:
    """A direct get answered without ``Nats-Sequence``."""
    return StoreUnavailable(f"a read of {subject} came back without Nats-Sequence")


def read_without_message(subject: str, data: object) -> StoreUnavailable:
    """A STREAM.MSG.GET reply without a message."""
    return StoreUnavailable(f"a read of {subject} returned no message: {data!r:.120}")


def read_corrupt(subject: str, exc: Exception) -> StoreUnavailable:
    """A STREAM.MSG.GET reply whose message does not decode."""
    return StoreUnavailable(f"a read of {subject} returned a corrupt message: {exc}")


# -- the store's contract ----------------------------------------------------------------------


def value_too_large(key: str, size: int, limit: int) -> ValueTooLarge:
    """A value that would exceed the server's ``max_payload`` (never sent)."""
    return ValueTooLarge(key, size, limit)


def create_kept_racing(key: str, attempts: int) -> StoreUnavailable:
    """A create that lost every attempt to deletes of the same key."""
    return StoreUnavailable(
        f"create of {key!r} kept racing with deletes of the same key ({attempts} "
        "attempts); nothing was written, retry"
    )


def delete_kept_racing(key: str, attempts: int) -> StoreUnavailable:
    """An unguarded delete that lost every attempt to writes of the same key."""
    return StoreUnavailable(
        f"delete of {key!r} kept racing with writes of the same key ({attempts} "
        "attempts); nothing was deleted, retry"
    )


# -- buckets -----------------------------------------------------------------------------------


def foreign_stream(stream: str, subjects: object, wanted: object) -> StoreError:
    """A stream with the bucket's name that listens on other subjects."""
    return StoreError(
        f"the NATS stream {stream} exists but listens on {subjects}, "
        f"not {wanted}; it was not made by spate. Delete it or use another "
        "namespace."
    )


def history_mismatch(bucket: str, history: object, wanted: int) -> StoreError:
    """A bucket keeping another number of messages per key."""
    return StoreError(
        f"the NATS KV bucket {bucket} keeps history {history} per "
        f"key; spate keeps {wanted}. Delete the bucket or use another namespace."
    )


def durable_bucket_expires(bucket: str, max_age: float) -> StoreError:
    """A durable keyspace's bucket that expires entries (``max_age`` in seconds)."""
    return StoreError(
        f"the NATS KV bucket {bucket} for the durable keyspace expires entries after "
        f"{seconds(max_age)}; durable records must never expire. Delete the bucket or use "
        "another namespace."
    )


def ttl_mismatch(namespace: str, current: float, wanted: float) -> StoreError:
    """The namespace's ephemeral bucket has another TTL (the message every store gives)."""
    return _namespace.ttl_mismatch("NATS", namespace, current, wanted)


def stream_without_config(stream: str) -> StoreError:
    """A STREAM.INFO reply without a configuration."""
    return StoreError(f"the NATS server described stream {stream} without a configuration")


# -- watches -----------------------------------------------------------------------------------


def watch_store_closed() -> StoreUnavailable:
    """The store closed under an open watch."""
    return StoreUnavailable(
        "the NATS store was closed while a watch was open; reopen it and watch again"
    )


def watch_not_reestablished(subjects: str, reason: str) -> StoreUnavailable:
    """A watch whose consumer kept failing to come back."""
    return StoreUnavailable(
        f"the NATS watch of {subjects} could not be re-established ({reason}); watch again"
    )


def watch_could_not_resume(subjects: str, reason: str) -> StoreUnavailable:
    """A broken watch whose connection did not come back in time."""
    return StoreUnavailable(
        f"the NATS watch of {subjects} broke ({reason}) and could not resume in time; watch again"
    )


def watch_may_have_missed_expiries(subjects: str, reason: str) -> StoreUnavailable:
    """An ephemeral watch broken for longer than expired entries stay visible."""
    return StoreUnavailable(
        f"the NATS watch of {subjects} broke ({reason}) for longer than expired "
        "entries stay visible, so it may have missed deletions; watch again"
    )
