"""NATS JetStream KV as a spate store, over a small Trio-native NATS client.

``open_store`` opens it from a URL::

    nats://[user:password@ | token@]host[:port][/namespace][?ttl=30&timeout=5&ca=ca.pem]
    nats://host:4222/namespace?nkey=user.nk | ?creds=user.creds | ?cert=c.pem&key=k.pem

with ``tls://`` (or ``nats+tls://``) for TLS and ``nats+ws://`` / ``nats+wss://`` for
WebSocket. Each namespace gets two KV buckets (``spate_durable_<ns>``,
``spate_ephemeral_<ns>``); the ephemeral bucket's ``max_age`` is the TTL. Works with
nats-server 2.9 (expiry is silent there, and the store's capabilities say so) and 2.11+
(expiry markers reach watchers). See ``docs/stores/nats.md`` for semantics and security.

The client underneath is layered so each part is testable alone: a sans-IO protocol parser
(``_protocol``), transports (``_transport``), the connection with reconnection
(``_connection``), the JetStream subset (``_jetstream``, ``_bucket``), watches as ordered
push consumers (``_watch``) and the store itself (``_store``).
"""

from spate._module_metadata import fixup_module_metadata as _fixup_module_metadata
from spate_stores.nats._connection import NatsConnection
from spate_stores.nats._options import ConnectOptions, StoreOptions, parse_url
from spate_stores.nats._store import NatsStore, store_from_url

__all__ = [
    "ConnectOptions",
    "NatsConnection",
    "NatsStore",
    "StoreOptions",
    "parse_url",
    "store_from_url",
]

# Its names report this module as their home (in reprs, tracebacks, pickles), as spate's do.
_fixup_module_metadata(__name__, globals(), __all__)
