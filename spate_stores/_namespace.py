"""What every adapter says about a namespace: one TTL mismatch message, one read-only refusal.

A namespace's ephemeral TTL is fixed when the namespace is first written (etcd records it,
NATS makes its ephemeral bucket's ``max_age`` of it, the memory server binds it). Opening the
namespace with another TTL is refused the same way on every store, saying how to resolve it.
"""

from __future__ import annotations

from spate import StoreError

__all__ = ["read_only_refusal", "ttl_mismatch"]


def ttl_mismatch(system: str, namespace: str, current: float, wanted: float) -> StoreError:
    """The namespace's TTL is ``current`` seconds and the store was opened with ``wanted``."""
    return StoreError(
        f"{system} namespace {namespace!r} already uses an ephemeral TTL of {current:g} s, not "
        f"{wanted:g} s (all jobs of a namespace share its lease duration). To resolve it, open "
        f"the store with ttl={current:g} (or with no ttl, which adopts the namespace's), or use "
        "another namespace, or remove the jobs there with `spate delete --store URL --job NAME` "
        "(`spate status --store URL --job NAME` lists them) once nothing runs on them."
    )


def read_only_refusal(store: object, doing: str) -> StoreError:
    """A write (or session) asked of a store opened read-only."""
    return StoreError(
        f"{store!r} was opened read-only, so {doing} is refused (nothing was written); "
        "open it without read_only=True to write"
    )
