"""What every adapter says about a namespace: one TTL mismatch message, one read-only refusal.

A namespace's ephemeral TTL is fixed when the namespace is first written (etcd records it,
NATS makes its ephemeral bucket's ``max_age`` of it, the memory server binds it). Opening the
namespace with another TTL is refused the same way on every store, saying how to resolve it.
A TTL the store cannot grant is refused before anything is written, naming the store's limits,
so no namespace is ever made with a TTL its leases cannot have.
"""

from __future__ import annotations

from spate import ConfigError, StoreError
from spate._quote import number, seconds

__all__ = ["read_only_refusal", "ttl_mismatch", "ttl_out_of_range"]


def ttl_mismatch(system: str, namespace: str, current: float, wanted: float) -> StoreError:
    """The namespace's TTL is ``current`` seconds and the store was opened with ``wanted``."""
    return StoreError(
        f"{system} namespace {namespace!r} already uses an ephemeral TTL of {seconds(current)}, "
        f"not {seconds(wanted)} (all jobs of a namespace share its lease duration). To resolve "
        f"it, open the store with ttl={number(current)} (or with no ttl, which adopts the "
        "namespace's), or use another namespace, or remove the jobs there with `spate delete "
        "--store URL --job NAME` once nothing runs on them (deleting the last one clears the "
        "namespace's TTL; `spate reset-ttl --store URL` clears it when no job is left)."
    )


def ttl_out_of_range(system: str, ttl: float, low: float, high: float, why: str) -> ConfigError:
    """A TTL of ``ttl`` seconds that ``system`` cannot grant: it takes ``low`` to ``high``."""
    return ConfigError(
        f"ttl={number(ttl)} is outside what {system} grants: an ephemeral TTL must be from "
        f"{seconds(low)} to {seconds(high)} there ({why}); nothing was written"
    )


def read_only_refusal(store: object, doing: str) -> StoreError:
    """A write (or session) asked of a store opened read-only."""
    return StoreError(
        f"{store!r} was opened read-only, so {doing} is refused (nothing was written); "
        "open it without read_only=True to write"
    )
