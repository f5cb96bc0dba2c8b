"""How spate's namespaces, keyspaces and keys map onto JetStream KV buckets and subjects.

Every keyspace of every namespace is one KV bucket (stream ``KV_<bucket>``, subjects
``$KV.<bucket>.>``), named so the ``nats kv`` command-line tool can inspect it:
``spate_durable`` / ``spate_ephemeral`` for the empty namespace, else
``spate_durable_<namespace>`` / ``spate_ephemeral_<namespace>``, with every namespace character
outside ``[A-Za-z0-9-]`` escaped as ``_XX`` (hex of its UTF-8 bytes). The mapping is injective,
so two namespaces never share a bucket.

A key is a subject suffix. Keys may contain ``.``, which NATS reads as a token separator, and
tokens may not be empty, so an empty token (a key starting or ending with ``.``, or containing
``..``) is written as ``=`` (a character keys never contain). Every other key is its own
subject suffix, readable as-is in ``nats kv`` output.
"""

from __future__ import annotations

from spate import StoreError
from spate._quote import quote
from spate.store import Keyspace

__all__ = [
    "MAX_BUCKET_NAME",
    "bucket_name",
    "decode_key",
    "encode_key",
    "key_filter",
    "prefix_filter",
]

MAX_BUCKET_NAME = 200
"""Longest bucket name we create (JetStream allows 255-byte stream names)."""
_EMPTY_TOKEN = "="
_PLAIN = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-")


def _escape_namespace(namespace: str) -> str:
    return "".join(
        c if c in _PLAIN else "".join(f"_{b:02X}" for b in c.encode()) for c in namespace
    )


def bucket_name(namespace: str, keyspace: Keyspace) -> str:
    """The KV bucket holding ``keyspace`` of ``namespace``.

    Raises StoreError if the namespace is too long to name a bucket.
    """
    name = f"spate_{keyspace.value}"
    if namespace:
        name += "_" + _escape_namespace(namespace)
    if len(name) > MAX_BUCKET_NAME:
        raise StoreError(
            f"namespace {quote(namespace)} is too long for a NATS bucket name (the bucket would be "
            f"{len(name)} characters, over {MAX_BUCKET_NAME}); use a shorter namespace."
        )
    return name


def encode_key(key: str) -> str:
    """The subject suffix of a (valid) key: ``.``-separated tokens, empty tokens as ``=``."""
    if key.startswith(".") or key.endswith(".") or ".." in key:
        return ".".join(token or _EMPTY_TOKEN for token in key.split("."))
    return key


def decode_key(suffix: str) -> str:
    """The key a subject suffix written by :func:`encode_key` stands for."""
    if _EMPTY_TOKEN not in suffix:
        return suffix
    return ".".join("" if token == _EMPTY_TOKEN else token for token in suffix.split("."))


def key_filter(key: str) -> str:
    """The server-side subject filter suffix for exactly one (valid) key.

    It is the key's own subject suffix, with no wildcard: keys never contain ``*`` or ``>``
    and :func:`encode_key` leaves no token empty, so the server matches that one subject and
    sends nothing about ``key`` + anything (``assign.w1`` never receives ``assign.w10``, nor
    ``plan`` receive ``plan.x``).
    """
    return encode_key(key)


def prefix_filter(prefix: str) -> tuple[str, bool]:
    """The server-side subject filter suffix for a key prefix, and whether it is exact.

    NATS wildcards match whole tokens only, so the filter covers the prefix's complete
    tokens (those followed by ``.``) and ``>``; when the prefix ends inside a token (``split``,
    ``job.spl``) the server sends a superset and the caller must also check
    ``key.startswith(prefix)`` (the second value is then False).
    """
    if prefix == "":
        return ">", True
    head, _, tail = prefix.rpartition(".")
    if not head and not prefix.startswith("."):
        # No complete token: only the wildcard for everything.
        return ">", False
    complete = encode_key(head + ".")
    # encode_key of "a.b." gives "a.b.=": drop the encoded empty last token.
    complete = complete[: -len(_EMPTY_TOKEN)]
    return complete + ">", tail == ""
