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

Every adapter module exposes ``store_from_url(url) -> Store``: a synchronous constructor that
validates the URL and connects nothing; connecting happens when the store is entered.
``memory://`` stores of one process share one server while any of them is open, so in-process
workers opening the same URL see the same data.
"""

from __future__ import annotations

import importlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import cast
from urllib.parse import urlsplit

from spate import ConfigError, StoreError
from spate.store import Store
from spate_stores._redact import redact_url

__all__ = ["SUPPORTED_SCHEMES", "open_store", "redact_url", "store_from_url"]

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


def store_from_url(url: str) -> Store:
    """The (not yet opened) store a URL names; enter it to connect.

    Raises :class:`~spate.ConfigError` for an unknown scheme (naming the supported
    ones) or a malformed URL, and :class:`~spate.StoreError` when the scheme's extra
    is not installed (naming the extra to install). Credentials never appear in messages.
    """
    try:
        scheme = urlsplit(url).scheme.lower()
    except (ValueError, AttributeError):
        raise ConfigError(f"not a store URL: {redact_url(url)!r}") from None
    if scheme not in _ADAPTERS:
        raise ConfigError(
            f"unsupported store URL {redact_url(url)!r}: the scheme must be one of "
            f"{', '.join(s + '://' for s in SUPPORTED_SCHEMES)}"
        )
    module_name, extra = _ADAPTERS[scheme]
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        if extra is None:
            raise
        raise StoreError(
            f"{scheme}:// stores need the optional dependencies of spate[{extra}] "
            f"({exc.name or module_name} could not be imported); "
            f"run: pip install 'spate[{extra}]'"
        ) from None
    return cast(Store, module.store_from_url(url))


@asynccontextmanager
async def open_store(url: str) -> AsyncIterator[Store]:
    """Open the store a URL names, yield it, and close it on exit.

    Raises what :func:`store_from_url` raises, and whatever entering the store raises
    (:class:`~spate.StoreUnavailable` when the server cannot be reached).
    """
    store = store_from_url(url)
    async with store:
        yield store
