"""Connection options and the ``nats://`` URL format.

::

    nats://[user:password@ | token@]host[:port][,host[:port]...][/namespace][?param=value&...]

Schemes: ``nats://`` (TCP; TLS when the server requires it or ``ca=`` is given), ``tls://`` and
``nats+tls://`` (TCP, TLS required), ``nats+ws://`` (WebSocket) and ``nats+wss://`` (WebSocket
over TLS). Default ports: 4222 for TCP, 80 for ``ws``, 443 for ``wss``.

Parameters: ``namespace`` (overrides the path), ``ttl`` (seconds, the ephemeral keyspace's TTL,
from 1 to 9,223,372,036; without it an existing namespace's TTL is adopted, and a new one gets
30), ``timeout`` (seconds per request, default 5), ``ca`` (a PEM file of CA certificates to
verify the server with, instead of the system store), ``name`` (the client name the server
shows in its monitoring), ``replicas`` (stream replicas of buckets this store creates: 1, 3 or
5; default 1). User, password and token are percent-decoded.

Credentials beyond user/password and token are files, named by path (a path is no secret, so
the URL can be shown; the files are read at each connection and never quoted): ``nkey`` (an
NKey user seed file), ``creds`` (a ``.creds`` file: user JWT and seed), and ``cert`` with
``key`` (a TLS client certificate and its private key, PEM; they turn TLS on). One kind of
user credentials at a time: user/password, token, ``nkey`` or ``creds`` (a client certificate
goes with any of them). Several comma-separated servers of one cluster may be
given: the client connects to the first that answers, moves on when its server goes away, and also
learns the servers the cluster advertises.
"""

from __future__ import annotations

import math
import ssl
from urllib.parse import parse_qs, unquote, urlsplit

import attrs

from spate import ConfigError, StoreError
from spate._quote import shorten
from spate_stores import _namespace
from spate_stores._hosts import parse_host_list
from spate_stores._redact import looks_like_secret, redact_url

__all__ = [
    "DEFAULT_TIMEOUT",
    "DEFAULT_TTL",
    "MAX_TTL",
    "MIN_TTL",
    "ConnectOptions",
    "StoreOptions",
    "check_ttl",
    "parse_url",
]

DEFAULT_TTL = 30.0
"""Default ephemeral TTL in seconds (the default lease duration)."""
DEFAULT_TIMEOUT = 5.0
"""Default seconds to wait for one request's reply (or for a connection to come back)."""
MIN_TTL = 1.0
"""Shortest TTL: JetStream expiry markers have one-second granularity."""
MAX_TTL = 9_223_372_036.0
"""Longest TTL: a stream's ``max_age`` (and its delete markers' TTL, in whole seconds) is a Go
duration, int64 nanoseconds, so about 292 years; JetStream refuses more as invalid JSON."""

_TRANSPORTS = {
    "nats": ("tcp", False),
    "tls": ("tcp", True),
    "nats+tls": ("tcp", True),
    "nats+ws": ("ws", False),
    "nats+wss": ("ws", True),
}
_DEFAULT_PORTS = {("tcp", False): 4222, ("tcp", True): 4222, ("ws", False): 80, ("ws", True): 443}
_FILE_PARAMS = ("nkey", "creds", "cert", "key")
_PARAMS = {"namespace", "ttl", "timeout", "ca", "name", "replicas", *_FILE_PARAMS}


@attrs.frozen(repr=False)
class ConnectOptions:
    """How to reach and authenticate to one NATS server."""

    host: str
    port: int
    transport: str = "tcp"
    """``"tcp"`` or ``"ws"``."""
    tls: bool = False
    """Require TLS (TCP: upgrade after INFO; WebSocket: ``wss``)."""
    ca_file: str | None = None
    """PEM bundle of CA certificates that verify the server; None uses the system store."""
    user: str | None = None
    password: str | None = None
    token: str | None = None
    nkey_file: str | None = None
    """An NKey seed file (``nkey=``): the user's seed, which signs the server's nonce."""
    creds_file: str | None = None
    """A ``.creds`` file (``creds=``): the user JWT and its seed (decentralized auth)."""
    cert_file: str | None = None
    """PEM file of the TLS client certificate (``cert=``), for servers that verify clients."""
    key_file: str | None = None
    """PEM file of the client certificate's private key (``key=``)."""
    name: str = "spate"
    """The client name the server shows in its monitoring endpoints."""
    timeout: float = DEFAULT_TIMEOUT
    """Seconds to wait for a connection, a handshake or one request's reply."""
    ping_interval: float = 5.0
    """Seconds between client PINGs; two unanswered PINGs mean the connection is dead."""
    reconnect_wait_max: float = 2.0
    """Longest pause between reconnection attempts (the backoff doubles up to it)."""
    servers: tuple[tuple[str, int], ...] = ()
    """Every configured server as ``(host, port)``, ``(host, port)`` first; empty means just it."""

    @property
    def configured(self) -> tuple[tuple[str, int], ...]:
        """The configured servers (at least ``(host, port)``)."""
        return self.servers or ((self.host, self.port),)

    @property
    def url(self) -> str:
        """The server address with credentials redacted, for messages and logs."""
        scheme = {
            ("tcp", False): "nats",
            ("tcp", True): "tls",
            ("ws", False): "nats+ws",
            ("ws", True): "nats+wss",
        }[(self.transport, self.tls)]
        auth = "***@" if self.user or self.token else ""
        hosts = ",".join(
            f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
            for host, port in self.configured
        )
        return f"{scheme}://{auth}{hosts}"

    def __repr__(self) -> str:
        return f"ConnectOptions({self.url!r})"

    @property
    def credentials_hint(self) -> str:
        """What to check when the server refuses this client's credentials (no secret in it)."""
        if self.creds_file is not None:
            return (
                f"the creds file {self.creds_file} (creds=): the server must trust the account "
                "that signed its user JWT (operator mode), and the JWT must not have expired "
                "or been revoked"
            )
        if self.nkey_file is not None:
            return (
                f"the NKey seed file {self.nkey_file} (nkey=): the server must list its public "
                "key as a user (authorization { users: [ { nkey: U... } ] })"
            )
        if self.user is not None or self.token is not None:
            return "the user and password or token in the store URL"
        return (
            "the store URL: it gives no credentials and the server wants some (user:password@ "
            "or token@, ?nkey=/path/user.nk, ?creds=/path/user.creds)"
        )

    def ssl_context(self) -> ssl.SSLContext:
        """The TLS context: verifies the server, presents the client certificate if any.

        The server is verified against ``ca_file`` or the system store. Raises StoreError
        naming the file when a CA bundle, certificate or key cannot be loaded.
        """
        try:
            context = ssl.create_default_context(cafile=self.ca_file)
        except (OSError, ssl.SSLError) as exc:
            raise StoreError(
                f"cannot load the CA bundle ca={self.ca_file} ({_reason(exc)}); it should be a "
                "PEM file of the CA certificates that signed the server's certificate"
            ) from None
        if self.cert_file is not None:
            try:
                # A password callback, so an encrypted key fails here instead of OpenSSL
                # prompting on the terminal (which would hang a service).
                context.load_cert_chain(self.cert_file, self.key_file, password=_no_password)
            except (OSError, ssl.SSLError) as exc:
                raise StoreError(
                    f"cannot load the TLS client certificate cert={self.cert_file} with "
                    f"key={self.key_file} ({_reason(exc)}); they should be PEM files, the key "
                    "the certificate's own (unencrypted)"
                ) from None
        return context


def _no_password() -> bytes:
    return b""


def _reason(exc: OSError | ssl.SSLError) -> str:
    # An SSLError's text is the library's reason ("[SSL] PEM lib"); an OSError's its strerror.
    if isinstance(exc, ssl.SSLError):
        return exc.reason or str(exc)
    return exc.strerror or str(exc)


@attrs.frozen
class StoreOptions:
    """Everything a NATS store is opened with."""

    connect: ConnectOptions
    namespace: str = ""
    ttl: float = DEFAULT_TTL
    replicas: int = 1
    """Stream replicas for buckets this store creates (existing buckets keep theirs)."""
    adopt_ttl: bool = False
    """The URL named no ttl: an existing namespace's TTL is adopted (``ttl`` is the default
    for a new one), as on etcd."""


def _number(query: dict[str, str], name: str, default: float, url: str) -> float:
    if name not in query:
        return default
    try:
        value = float(query[name])
    except ValueError:
        raise ConfigError(
            f"{name} must be a number of seconds, got {shorten(query[name])!r} (in {url!r})"
        ) from None
    if not (value > 0 and math.isfinite(value)):
        raise ConfigError(
            f"{name} must be a positive number of seconds, got {shorten(query[name])!r} "
            f"(in {url!r})"
        )
    return value


def _credential_files(query: dict[str, str], url: str, in_userinfo: bool) -> dict[str, str | None]:
    """The ``nkey``, ``creds``, ``cert`` and ``key`` paths, checked to make sense together."""
    files: dict[str, str | None] = {name: query.get(name) or None for name in _FILE_PARAMS}
    for name, value in files.items():
        if value is not None and looks_like_secret(value):
            # Not echoed: this is the secret itself, given where its file's path belongs (a
            # secret in a URL shows in `ps` and shell history).
            raise ConfigError(
                f"{name}= takes the path of a file, and was given what looks like a key or JWT "
                "itself: write it to a file readable only by the user running spate and pass "
                "its path (a secret in a URL shows in `ps` and shell history)"
            )
    if files["nkey"] is not None and files["creds"] is not None:
        raise ConfigError(
            f"give nkey= or creds=, not both, in {url!r}: a .creds file holds its own seed"
        )
    if in_userinfo and (files["nkey"] is not None or files["creds"] is not None):
        raise ConfigError(
            f"{url!r} gives both user/password or token credentials and an nkey= or creds= "
            "file; a connection authenticates as one user: keep one of them"
        )
    if (files["cert"] is None) != (files["key"] is None):
        raise ConfigError(
            f"a TLS client certificate needs both cert= and key= (PEM files), in {url!r}"
        )
    return files


def check_ttl(ttl: float) -> float:
    """``ttl`` if JetStream can keep keys that long; else a ConfigError naming the limits."""
    if not MIN_TTL <= ttl <= MAX_TTL:
        raise _namespace.ttl_out_of_range(
            "NATS",
            ttl,
            MIN_TTL,
            MAX_TTL,
            "expiry markers have one-second granularity, and a stream's max_age is a Go "
            "duration of at most about 292 years",
        )
    return ttl


def parse_url(url: str) -> StoreOptions:
    """Parse a NATS store URL (see the module docstring); raises ConfigError if malformed."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    redacted = shorten(redact_url(url))
    if scheme not in _TRANSPORTS:
        raise ConfigError(
            f"{redacted!r} is not a NATS URL: use one of "
            + ", ".join(s + "://" for s in _TRANSPORTS)
        )
    transport, tls = _TRANSPORTS[scheme]
    # urlsplit cannot read a host list (it takes "4222,h2:4222" for a port): split the
    # authority here, credentials before the last '@'.
    userinfo, at, hosts = parts.netloc.rpartition("@")
    try:
        members = parse_host_list(hosts, _DEFAULT_PORTS[(transport, tls)], "nats")
    except ConfigError as exc:
        raise ConfigError(f"invalid host or port in {redacted!r}: {exc}") from None
    servers = tuple((host.strip("[]"), port) for host, port in members)
    host, port = servers[0]
    query: dict[str, str] = {}
    for key, values in parse_qs(parts.query, keep_blank_values=True).items():
        query[key] = values[-1]
    unknown = set(query) - _PARAMS
    if unknown:
        raise ConfigError(
            f"unknown parameter(s) {[shorten(name) for name in sorted(unknown)]} in "
            f"{redacted!r}; NATS URLs take " + ", ".join(sorted(_PARAMS))
        )
    user_text, colon, password_text = userinfo.partition(":")
    user = unquote(user_text) if at and user_text else None
    password = unquote(password_text) if at and colon else None
    token = None
    if user is not None and password is None:
        token, user = user, None
    files = _credential_files(query, redacted, user is not None or token is not None)
    ttl = check_ttl(_number(query, "ttl", DEFAULT_TTL, redacted))
    ca_file = query.get("ca") or None
    connect = ConnectOptions(
        host=host,
        port=port,
        servers=servers if len(servers) > 1 else (),
        transport=transport,
        tls=tls or ca_file is not None or files["cert"] is not None,
        ca_file=ca_file,
        user=user,
        password=password,
        token=token,
        nkey_file=files["nkey"],
        creds_file=files["creds"],
        cert_file=files["cert"],
        key_file=files["key"],
        name=query.get("name") or "spate",
        timeout=_number(query, "timeout", DEFAULT_TIMEOUT, redacted),
    )
    namespace = query["namespace"] if "namespace" in query else unquote(parts.path.strip("/"))
    replicas = query.get("replicas", "1")
    if replicas not in ("1", "3", "5"):
        raise ConfigError(f"replicas must be 1, 3 or 5 in {redacted!r}, not {shorten(replicas)!r}")
    return StoreOptions(
        connect=connect,
        namespace=namespace,
        ttl=ttl,
        replicas=int(replicas),
        adopt_ttl="ttl" not in query,
    )
