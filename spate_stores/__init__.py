"""Store adapters for spate and one URL opener.

``open_store(url)`` opens any supported store from a URL:

==========================  ==============================================  ==============
URL                         store                                           extra
==========================  ==============================================  ==============
``memory://[namespace]``    :class:`spate_stores.memory.MemoryStore`         (none)
``etcd://host:port``        etcd v3 through its HTTP gateway                 ``etcd``
``etcd+https://host:port``  the same over TLS                                ``etcd``
``nats://host:port``        NATS JetStream KV over TCP (``tls://`` for TLS)  ``nats``
``nats+ws://host:port``     the same over WebSocket (``nats+wss://``)         ``nats``
==========================  ==============================================  ==============

Common query parameters: ``namespace=`` (or the URL path) isolates jobs and tenants, and
``ttl=`` sets the ephemeral keyspace's TTL in seconds (the job's lease duration).

Every adapter module exposes ``store_from_url(url, *, read_only=False) -> Store``: a
synchronous constructor that validates the URL and connects nothing; connecting happens when
the store is entered.

``read_only=True`` opens a store that writes nothing of any kind, whatever the URL says:
entering creates nothing (no NATS bucket, no etcd TTL record or lease), checks no TTL (the
namespace's own is adopted, so a namespace made with any TTL reads), and every write or
session is refused with :class:`~spate.StoreError`. A namespace never written reads as empty.
The operator commands that only look (``spate status``) open stores so.
``memory://`` stores of one process share one server while any of them is open, so in-process
workers opening the same URL see the same data.

Other packages add schemes: a distribution registers its adapter's ``store_from_url`` under
the ``spate.stores`` entry-point group, named by its scheme (see docs/writing-a-store-adapter.md).
Such a scheme is looked up only when it is not one of :data:`SUPPORTED_SCHEMES`, so the bundled
schemes cannot be shadowed.
"""

from __future__ import annotations

import importlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import cast
from urllib.parse import urlsplit

from spate import ConfigError, StoreError
from spate._install import install_hint
from spate._module_metadata import fixup_module_metadata
from spate.store import Store
from spate_stores import _entry_points
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
"""Every URL scheme :func:`open_store` understands without a third-party adapter."""


def store_from_url(url: str, *, read_only: bool = False) -> Store:
    """The (not yet opened) store a URL names; enter it to connect.

    A scheme spate does not bundle is looked up among the adapters installed distributions
    register under the ``spate.stores`` entry-point group.
    ``read_only=True``: a store that writes nothing (see the module docstring).

    Raises :class:`~spate.ConfigError` for an unknown scheme (naming the supported
    ones) or a malformed URL, and :class:`~spate.StoreError` when the scheme's extra
    is not installed (naming the extra to install) or a third-party adapter is broken
    (naming its distribution). Credentials never appear in messages.
    """
    try:
        scheme = urlsplit(url).scheme.lower()
    except (ValueError, AttributeError):
        raise ConfigError(f"not a store URL: {redact_url(url)!r}") from None
    if scheme not in _ADAPTERS:
        third_party = _entry_points.adapter_for(scheme, SUPPORTED_SCHEMES) if scheme else None
        if third_party is None:
            known = (*SUPPORTED_SCHEMES, *_entry_points.installed_schemes(SUPPORTED_SCHEMES))
            raise ConfigError(
                f"unsupported store URL {redact_url(url)!r}: the scheme must be one of "
                f"{', '.join(s + '://' for s in known)} (or one an installed adapter "
                f"registers under the {_entry_points.GROUP!r} entry points)"
            )
        return third_party(url, read_only=read_only)
    module_name, extra = _ADAPTERS[scheme]
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        if extra is None:
            raise
        raise StoreError(
            f"{scheme}:// stores need the optional dependencies of the {extra} extra "
            f"({exc.name or module_name} could not be imported); run: {install_hint(extra)}"
        ) from None
    return cast(Store, module.store_from_url(url, read_only=read_only))


@asynccontextmanager
async def open_store(url: str, *, read_only: bool = False) -> AsyncIterator[Store]:
    """Open the store a URL names, yield it, and close it on exit.

    ``read_only=True``: a store that writes nothing (see the module docstring).

    Raises what :func:`store_from_url` raises, and whatever entering the store raises
    (:class:`~spate.StoreUnavailable` when the server cannot be reached).
    """
    store = store_from_url(url, read_only=read_only)
    async with store:
        yield store


fixup_module_metadata(__name__, globals(), __all__)
