"""Store adapters for spate and one URL opener.

``open_store(url)`` opens any supported store from a URL:

==========================  ==============================================  ==============
URL                         store                                           extra
==========================  ==============================================  ==============
``memory://[namespace]``    :class:`spate_stores.memory.MemoryStore`         (none)
``etcd://host:port``        etcd v3 through its HTTP gateway                 ``spate[etcd]``
``etcd+https://host:port``  the same over TLS                                ``spate[etcd]``
``nats://host:port``        NATS JetStream KV over TCP (``tls://`` for TLS)  ``spate[nats]``
``nats+ws://host:port``     the same over WebSocket (``nats+wss://``)         ``spate[nats]``
==========================  ==============================================  ==============

Common query parameters: ``namespace=`` (or the URL path) isolates jobs and tenants, and
``ttl=`` sets the ephemeral keyspace's TTL in seconds (the job's lease duration).
"""

from __future__ import annotations

import importlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from urllib.parse import parse_qs, urlsplit

from spate.errors import ConfigError, StoreError
from spate.store import Store

__all__ = ["SUPPORTED_SCHEMES", "open_store"]

# scheme -> (module that implements it, the extra that installs its dependencies)
_ADAPTERS: dict[str, tuple[str, str | None]] = {
    "memory": ("spate_stores.memory", None),
    "etcd": ("spate_stores.etcd", "etcd"),
    "etcd+http": ("spate_stores.etcd", "etcd"),
    "etcd+https": ("spate_stores.etcd", "etcd"),
    "nats": ("spate_stores.nats", "nats"),
    "tls": ("spate_stores.nats", "nats"),
    "nats+tls": ("spate_stores.nats", "nats"),
    "nats+ws": ("spate_stores.nats", "nats"),
    "nats+wss": ("spate_stores.nats", "nats"),
}
SUPPORTED_SCHEMES = tuple(_ADAPTERS)
"""Every URL scheme :func:`open_store` understands."""


def _redact(url: str) -> str:
    parts = urlsplit(url)
    if parts.password is None and parts.username is None:
        return url
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    return parts._replace(netloc=f"***@{host}").geturl()


def _memory_from_url(url: str) -> Store:
    from spate_stores.memory import MemoryStore

    parts = urlsplit(url)
    query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
    unknown = set(query) - {"namespace", "ttl", "max_value_size"}
    if unknown:
        raise ConfigError(
            f"unknown parameter(s) {sorted(unknown)} in {url!r}; memory:// takes "
            "namespace, ttl and max_value_size"
        )
    namespace = query.get("namespace") or (parts.netloc + parts.path).strip("/")
    kwargs: dict[str, float | int] = {}
    try:
        if "ttl" in query:
            kwargs["ephemeral_ttl"] = float(query["ttl"])
        if "max_value_size" in query:
            kwargs["max_value_size"] = int(query["max_value_size"])
    except ValueError:
        raise ConfigError(
            f"ttl must be a number of seconds and max_value_size an int in {url!r}"
        ) from None
    return MemoryStore(namespace=namespace, **kwargs)  # type: ignore[arg-type]


@asynccontextmanager
async def open_store(url: str) -> AsyncIterator[Store]:
    """Open the store a URL names, yield it, and close it on exit.

    Raises :class:`~spate.errors.ConfigError` for an unknown scheme (naming the supported
    ones) or a malformed URL, and :class:`~spate.errors.StoreError` when the scheme's extra
    is not installed (naming the extra to install).
    """
    scheme = urlsplit(url).scheme.lower()
    if scheme not in _ADAPTERS:
        raise ConfigError(
            f"unsupported store URL {_redact(url)!r}: the scheme must be one of "
            f"{', '.join(s + '://' for s in SUPPORTED_SCHEMES)}"
        )
    module_name, extra = _ADAPTERS[scheme]
    if module_name == "spate_stores.memory":
        store = _memory_from_url(url)
    else:
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            raise StoreError(
                f"{scheme}:// needs the optional dependencies of spate[{extra}] "
                f"({exc.name or exc} is not installed); run: pip install 'spate[{extra}]'"
            ) from None
        store = module.store_from_url(url)
    async with store:
        yield store
