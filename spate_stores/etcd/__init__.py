"""The etcd store: etcd v3 through its HTTP/JSON gateway (the ``etcd`` extra).

Open it by URL::

    async with open_store("etcd://user:password@etcd.internal:2379/my-job?ttl=10") as store:
        ...

or build one: ``EtcdStore(EtcdConfig(endpoint="https://...", namespace="my-job", ...))``.
URL format, semantics and security notes: ``docs/stores/etcd.md``.
"""

from __future__ import annotations

# The etcd extra's dependencies, imported first so a missing one fails the import of this
# package itself (open_store turns that into the etcd extra's install hint), even when the
# private submodules are already cached.
import httpx  # noqa: F401
import trio_websocket  # noqa: F401

from spate._module_metadata import fixup_module_metadata as _fixup_module_metadata
from spate_stores.etcd._config import (
    DEFAULT_EPHEMERAL_TTL as DEFAULT_EPHEMERAL_TTL,
)
from spate_stores.etcd._config import (
    DEFAULT_MAX_REQUEST_BYTES as DEFAULT_MAX_REQUEST_BYTES,
)
from spate_stores.etcd._config import (
    DEFAULT_TIMEOUT as DEFAULT_TIMEOUT,
)
from spate_stores.etcd._config import EtcdConfig as EtcdConfig
from spate_stores.etcd._store import EXPIRY_SLACK as EXPIRY_SLACK
from spate_stores.etcd._store import EtcdStore as EtcdStore

__all__ = [
    "DEFAULT_EPHEMERAL_TTL",
    "DEFAULT_MAX_REQUEST_BYTES",
    "DEFAULT_TIMEOUT",
    "EXPIRY_SLACK",
    "EtcdConfig",
    "EtcdStore",
    "store_from_url",
]


def store_from_url(url: str, *, read_only: bool = False) -> EtcdStore:
    """An unopened :class:`EtcdStore` for an ``etcd://`` / ``etcd+http(s)://`` URL.

    ``read_only=True`` opens a store that writes nothing (see :class:`EtcdStore`). Raises
    :class:`~spate.ConfigError` for a malformed URL. Connecting happens when the store is
    entered.
    """
    return EtcdStore.from_url(url, read_only=read_only)


# Its names report this module as their home (in reprs, tracebacks, pickles), as spate's do.
_fixup_module_metadata(__name__, globals(), __all__)
