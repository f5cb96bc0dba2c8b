"""What an etcd store connects to and how: parsed from an ``etcd://`` URL, validated once.

URL grammar (documented in ``docs/stores/etcd.md``)::

    etcd://[user:password@]host[:port][,host[:port]...][/namespace][?param=value&...]
    etcd+http://...      the same as etcd://
    etcd+https://...     TLS (params ca=, cert=, key=)

Parameters: ``namespace`` (or the path), ``ttl`` (seconds, a whole number from 2 to
9,000,000,000, etcd's lease limits; omitted:
adopt the namespace's recorded TTL, or 30 s for a new namespace), ``ca``, ``cert``, ``key``
(PEM files), ``timeout`` (seconds per request, default 5), ``max_request_bytes`` (the
server's ``--max-request-bytes``, default 1.5 MiB).

Several comma-separated members of one cluster may be given; the store fails over between
them (see ``_endpoints.py``).
"""

from __future__ import annotations

import math
import re
import ssl
from collections.abc import Callable, Iterable
from typing import TypeVar
from urllib.parse import parse_qs, unquote, urlsplit

import attrs

from spate import ConfigError
from spate._quote import quote, shorten
from spate.store import MAX_KEY_LENGTH, Keyspace
from spate_stores import _namespace
from spate_stores.etcd import _errors as errors
from spate_stores.etcd._endpoints import parse_host_list

__all__ = [
    "DEFAULT_EPHEMERAL_TTL",
    "DEFAULT_MAX_REQUEST_BYTES",
    "DEFAULT_TIMEOUT",
    "TXN_OVERHEAD",
    "EtcdConfig",
    "KeyLayout",
]

DEFAULT_EPHEMERAL_TTL = 30
"""TTL in seconds of a new namespace's ephemeral keyspace when the URL gives none."""
DEFAULT_TIMEOUT = 5.0
"""Seconds a unary request may take before it raises StoreUnavailable."""
DEFAULT_MAX_REQUEST_BYTES = 1536 * 1024
"""etcd's default ``--max-request-bytes`` (1.5 MiB)."""
MIN_TTL = 2
"""etcd grants no lease shorter than about 1.5 s (it silently rounds up to 2 s)."""
MAX_TTL = 9_000_000_000
"""etcd's ``MaxLeaseTTL``: a longer etcd lease is refused ("too large lease TTL")."""
DEFAULT_PORT = 2379

_NAMESPACE_RE = re.compile(r"[A-Za-z0-9._-]+(/[A-Za-z0-9._-]+)*")
_MAX_NAMESPACE_LENGTH = 200
_SCHEMES = {"etcd": "http", "etcd+http": "http", "etcd+https": "https"}
_PARAMS = {"namespace", "ttl", "ca", "cert", "key", "timeout", "max_request_bytes"}
_T = TypeVar("_T")
_N = TypeVar("_N")
TXN_OVERHEAD = 512
"""Room for the txn around a value: the key twice (compare and put), the etcd lease, and the
protobuf framing, so a value of max_value_size always fits the server's request limit."""


def _check_namespace(namespace: str) -> str:
    if namespace and (
        not _NAMESPACE_RE.fullmatch(namespace) or len(namespace) > _MAX_NAMESPACE_LENGTH
    ):
        raise ConfigError(
            f"invalid etcd namespace {quote(namespace)}: use up to {_MAX_NAMESPACE_LENGTH} "
            "characters of [A-Za-z0-9._-], optionally in '/'-separated segments"
        )
    return namespace


def _check_ttl(ttl: float | None) -> float | None:
    if ttl is None:
        return None
    if math.isfinite(ttl) and not MIN_TTL <= ttl <= MAX_TTL:
        raise _namespace.ttl_out_of_range(
            "etcd", ttl, MIN_TTL, MAX_TTL, "its leases' shortest and longest TTLs"
        )
    if not (math.isfinite(ttl) and ttl == int(ttl)):
        raise ConfigError(
            f"etcd ephemeral ttl must be a whole number of seconds from {MIN_TTL} to "
            f"{MAX_TTL} (etcd leases have whole-second TTLs), not {ttl!r}"
        )
    return float(ttl)


def _number(
    query: dict[str, str], name: str, default: _N, kind: Callable[[str], _T], what: str
) -> _T | _N:
    """Query parameter ``name`` read by ``kind``; a ConfigError naming it when it is not."""
    if name not in query:
        return default
    try:
        return kind(query[name])
    except ValueError:
        raise ConfigError(f"{name} must be {what}, got {shorten(query[name])!r}") from None


def _as_tuple(endpoints: Iterable[str]) -> tuple[str, ...]:
    return tuple(endpoints)


@attrs.frozen(repr=False)
class EtcdConfig:
    """Validated connection settings of an :class:`~spate_stores.etcd.EtcdStore`.

    The password never appears in ``repr``, logs or error messages.
    """

    endpoint: str = attrs.field(default="http://127.0.0.1:2379")
    """``http://host:port`` or ``https://host:port`` (no credentials, no path): the first member."""
    namespace: str = attrs.field(default="", converter=_check_namespace)
    """Isolates jobs and tenants: every key lives under this namespace's prefix."""
    ephemeral_ttl: float | None = attrs.field(default=None, converter=_check_ttl)
    """Seconds; None adopts the namespace's recorded TTL (or the default for a new one)."""
    username: str | None = None
    """etcd user name, when the server has authentication enabled."""
    password: str | None = None
    """That user's password."""
    ca: str | None = None
    """PEM file of the CA that signed the server's certificate (TLS only)."""
    cert: str | None = None
    """PEM file of the client certificate (TLS client-certificate auth)."""
    key: str | None = None
    """PEM file of the client certificate's private key."""
    timeout: float = DEFAULT_TIMEOUT
    """Seconds a unary request (and a stream's connect) may take."""
    max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES
    """The server's request size limit; values are limited to this minus txn overhead."""
    endpoints: tuple[str, ...] = attrs.field(converter=_as_tuple)
    """Every member the store may talk to (``endpoint`` first); defaults to ``(endpoint,)``."""

    @endpoints.default
    def _endpoints_default(self) -> tuple[str, ...]:
        return (self.endpoint,)

    def __attrs_post_init__(self) -> None:
        if not self.endpoints or self.endpoints[0] != self.endpoint:
            raise ConfigError("endpoints must start with endpoint (the first member)")
        if len(set(self.endpoints)) != len(self.endpoints):
            raise ConfigError(f"the etcd endpoint list names a member twice: {self.endpoints}")
        for endpoint in self.endpoints:
            parts = urlsplit(endpoint)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise ConfigError(f"etcd endpoint must be http(s)://host:port, not {endpoint!r}")
            if parts.scheme != urlsplit(self.endpoint).scheme:
                raise ConfigError("every etcd endpoint must use the same scheme (http or https)")
        if parts.scheme == "http" and (self.ca or self.cert or self.key):
            raise ConfigError(
                "ca=, cert= and key= need TLS: use an etcd+https:// URL (https:// endpoint)"
            )
        if (self.cert is None) != (self.key is None):
            raise ConfigError("a client certificate needs both cert= and key=")
        if (self.username is None) != (self.password is None):
            raise ConfigError("etcd credentials need both a user name and a password")
        if not (math.isfinite(self.timeout) and self.timeout > 0):
            raise ConfigError(f"timeout must be a positive number of seconds, not {self.timeout}")
        if self.max_request_bytes < 64 * 1024:
            raise ConfigError(
                f"max_request_bytes={self.max_request_bytes} is too small; etcd's default is "
                f"{DEFAULT_MAX_REQUEST_BYTES}"
            )

    def __repr__(self) -> str:
        user = f", username={self.username!r}, password='***'" if self.username else ""
        where = (
            f"endpoint={self.endpoint!r}"
            if len(self.endpoints) == 1
            else f"endpoints={self.endpoints!r}"
        )
        return f"EtcdConfig({where}, namespace={self.namespace!r}{user})"

    @property
    def tls(self) -> bool:
        """Whether the endpoint is https."""
        return self.endpoint.startswith("https:")

    @classmethod
    def from_url(cls, url: str) -> EtcdConfig:
        """Parse an ``etcd://``, ``etcd+http://`` or ``etcd+https://`` URL.

        Raises :class:`~spate.ConfigError` naming what is wrong (credentials are
        never echoed).
        """
        try:
            parts = urlsplit(url)
        except ValueError:
            raise ConfigError(
                "malformed etcd URL: expected etcd://[user:password@]host:port[,host:port...]"
                "[/namespace]"
            ) from None
        scheme = _SCHEMES.get(parts.scheme.lower())
        if scheme is None or not parts.netloc:
            raise ConfigError(
                "an etcd URL looks like etcd://[user:password@]host:port[,host:port...]"
                "[/namespace][?ttl=...] (etcd+https:// for TLS)"
            )
        # urlsplit cannot read a host list (it takes "2379,h2:2379" for a port), so the
        # authority is split here: credentials before the last '@', then the hosts.
        userinfo, at, hosts = parts.netloc.rpartition("@")
        username = password = None
        if at:
            user_text, colon, password_text = userinfo.partition(":")
            username = unquote(user_text)
            password = unquote(password_text) if colon else None
        members = parse_host_list(hosts, DEFAULT_PORT, "etcd")
        endpoints = tuple(f"{scheme}://{host}:{port}" for host, port in members)
        query: dict[str, str] = {}
        for name, values in parse_qs(parts.query, keep_blank_values=True).items():
            if name not in _PARAMS:
                raise ConfigError(
                    f"unknown etcd URL parameter {quote(name)}; known: {', '.join(sorted(_PARAMS))}"
                )
            query[name] = values[-1]
        path_namespace = unquote(parts.path).strip("/")
        namespace = query.get("namespace", path_namespace)
        if path_namespace and namespace != path_namespace:
            raise ConfigError(
                f"the URL path names namespace {quote(path_namespace)} but namespace= says "
                f"{quote(namespace)}; give one"
            )
        ttl = _number(query, "ttl", None, float, "a number of seconds")
        timeout = _number(query, "timeout", DEFAULT_TIMEOUT, float, "a number of seconds")
        max_request = _number(
            query, "max_request_bytes", DEFAULT_MAX_REQUEST_BYTES, int, "a whole number of bytes"
        )
        return cls(
            endpoint=endpoints[0],
            endpoints=endpoints,
            namespace=namespace,
            ephemeral_ttl=ttl,
            username=username,
            password=password,
            ca=query.get("ca"),
            cert=query.get("cert"),
            key=query.get("key"),
            timeout=timeout,
            max_request_bytes=max_request,
        )

    def ssl_context(self) -> ssl.SSLContext | None:
        """The TLS context for an https endpoint (None for http).

        Raises :class:`~spate.StoreError` when a certificate file cannot be loaded.
        """
        if not self.tls:
            return None
        try:
            context = ssl.create_default_context(cafile=self.ca)
            if self.cert is not None:
                context.load_cert_chain(self.cert, self.key)
        except (OSError, ssl.SSLError) as exc:
            raise errors.tls_files_unreadable(
                self.endpoint, self.ca, self.cert, self.key, exc
            ) from None
        return context


@attrs.frozen
class KeyLayout:
    """Where a namespace's keys live in etcd.

    ``spate/<namespace>:durable/<key>``, ``spate/<namespace>:ephemeral/<key>`` and
    ``spate/<namespace>:meta/...``. Namespaces never contain ``:``, so no namespace's
    prefix is a prefix of another's (``a`` and ``a/b`` stay apart), and the keyspaces of one
    namespace are disjoint.
    """

    namespace: str

    def prefix(self, keyspace: Keyspace) -> bytes:
        """The etcd key prefix of one keyspace."""
        return f"spate/{self.namespace}:{keyspace.value}/".encode()

    def key(self, keyspace: Keyspace, key: str) -> bytes:
        """The etcd key of a store key."""
        return self.prefix(keyspace) + key.encode()

    def store_key(self, keyspace: Keyspace, raw: bytes) -> str:
        """The store key of an etcd key under ``keyspace``'s prefix."""
        return raw[len(self.prefix(keyspace)) :].decode("utf-8", errors="replace")

    @property
    def ttl_key(self) -> bytes:
        """The durable meta key recording the namespace's ephemeral TTL."""
        return f"spate/{self.namespace}:meta/ephemeral-ttl".encode()

    def max_value_size(self, max_request_bytes: int) -> int:
        """The largest value whose txn (with the longest key) fits ``max_request_bytes``."""
        longest = max(len(self.prefix(ks)) for ks in Keyspace) + MAX_KEY_LENGTH
        return max_request_bytes - 2 * longest - TXN_OVERHEAD
