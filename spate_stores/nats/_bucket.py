"""Creating a keyspace's KV bucket if absent and verifying it if present.

A bucket's stream sequence numbers are its keys' revisions. Each key keeps its last
:data:`HISTORY` messages: with history 1, JetStream removes a key's previous message the moment
a new one is stored, and a watcher whose consumer is a moment behind then never receives the
overwritten revision (measured: about half of all 40-write bursts lost one). A short history
gives lagging consumers room; reads and CAS only ever look at the last message. The ephemeral
bucket's ``max_age`` is the TTL: a key's newest message is the one that ages last, so a key
expires TTL after its last write. On nats-server 2.11+ the bucket also gets subject delete
markers, so an expiry leaves a marker that watchers receive; 2.9 silently ignores that setting,
which is how its absence is detected (from the configuration the server echoes back).
"""

from __future__ import annotations

import math
from typing import Any

import attrs

from spate.store import Keyspace
from spate_stores.nats import _errors as errors
from spate_stores.nats._errors import ERR_STREAM_EXISTS, ERR_STREAM_NOT_FOUND, ApiError
from spate_stores.nats._jetstream import JetStream

__all__ = ["HISTORY", "Bucket", "ensure_bucket", "find_bucket"]

HISTORY = 5
"""Messages kept per key: a watcher may fall this many minus one writes of one key behind
without missing any (beyond that it sees the later ones only; its view is still right)."""

_NS = 1_000_000_000
# max_age is compared with this tolerance: servers echo it back in nanoseconds exactly, but a
# bucket created by another client from a float TTL may round differently.
_TTL_TOLERANCE_NS = 1_000_000
_MARKERS_SINCE = (2, 11)


@attrs.frozen
class Bucket:
    """One KV bucket as the store uses it."""

    name: str
    """The bucket name (``nats kv ls`` shows it)."""
    stream: str
    """Its stream, ``KV_<name>``."""
    subject_prefix: str
    """``$KV.<name>.``: a key's subject is this plus the encoded key."""
    direct: bool
    """Whether direct gets are allowed (else reads use STREAM.MSG.GET)."""
    expiry_markers: bool
    """Whether expiries leave markers that reach watchers (2.11+ ephemeral buckets)."""
    max_age: float = 0.0
    """Seconds an entry lives after its last write (the ephemeral bucket's TTL; 0: forever)."""


def _desired_config(
    name: str, keyspace: Keyspace, ttl: float, namespace: str, markers: bool, replicas: int
) -> dict[str, Any]:
    config: dict[str, Any] = {
        "name": f"KV_{name}",
        "description": f"spate {keyspace.value} keyspace of namespace {namespace!r}",
        "subjects": [f"$KV.{name}.>"],
        "retention": "limits",
        "max_msgs_per_subject": HISTORY,
        "max_msgs": -1,
        "max_bytes": -1,
        "max_msg_size": -1,
        "discard": "new",
        "storage": "file",
        "num_replicas": replicas,
        "deny_delete": True,
        "allow_rollup_hdrs": True,
        "allow_direct": True,
        "max_age": 0,
    }
    if keyspace is Keyspace.EPHEMERAL:
        config["max_age"] = round(ttl * _NS)
        if markers:
            config.update(_marker_fields(ttl))
    return config


def _verify(
    config: dict[str, Any], desired: dict[str, Any], keyspace: Keyspace, ttl: float, namespace: str
) -> None:
    name = desired["name"][3:]
    if config.get("subjects") != desired["subjects"]:
        raise errors.foreign_stream(desired["name"], config.get("subjects"), desired["subjects"])
    if config.get("max_msgs_per_subject") != HISTORY:
        raise errors.history_mismatch(name, config.get("max_msgs_per_subject"), HISTORY)
    max_age = int(config.get("max_age") or 0)
    if keyspace is Keyspace.DURABLE and max_age != 0:
        raise errors.durable_bucket_expires(name, max_age / _NS)
    if keyspace is Keyspace.EPHEMERAL and abs(max_age - desired["max_age"]) > _TTL_TOLERANCE_NS:
        raise errors.ttl_mismatch(namespace, max_age / _NS, ttl)


async def ensure_bucket(
    js: JetStream,
    name: str,
    keyspace: Keyspace,
    ttl: float,
    namespace: str,
    replicas: int = 1,
    *,
    adopt_ttl: bool = False,
) -> Bucket:
    """Create the bucket if it is missing, verify it if present, and describe it.

    With ``adopt_ttl``, an existing ephemeral bucket's TTL is taken whatever ``ttl`` says
    (the URL named none). Raises StoreError when an existing bucket cannot serve this
    keyspace (another TTL, more history, foreign subjects), StoreUnavailable when JetStream
    does not answer.
    """
    stream = f"KV_{name}"
    markers_supported = js.connection.server_version >= _MARKERS_SINCE
    config = await _stream_config(js, stream)
    if adopt_ttl and config is not None and keyspace is Keyspace.EPHEMERAL:
        ttl = int(config.get("max_age") or 0) / _NS or ttl
    desired = _desired_config(name, keyspace, ttl, namespace, markers_supported, replicas)
    if config is None:
        try:
            config = (await js.api(f"STREAM.CREATE.{stream}", desired))["config"]
        except ApiError as exc:
            if exc.err_code != ERR_STREAM_EXISTS:
                raise exc.translate() from None
            # Another client created it first, with a different configuration.
            config = await _stream_config(js, stream)
            if config is None:
                raise exc.translate() from None
    assert config is not None
    _verify(config, desired, keyspace, ttl, namespace)
    markers = bool(config.get("subject_delete_marker_ttl"))
    if keyspace is Keyspace.EPHEMERAL and markers_supported and not markers:
        # Made by a server before 2.11 (or another client): add markers so expiry reaches
        # watchers now that the server can.
        try:
            updated = await js.api(f"STREAM.UPDATE.{stream}", {**config, **_marker_fields(ttl)})
            markers = bool(updated["config"].get("subject_delete_marker_ttl"))
        except ApiError:
            markers = False
    return _describe(name, keyspace, config, markers)


async def find_bucket(js: JetStream, name: str, keyspace: Keyspace) -> Bucket | None:
    """The bucket if it exists (as it is: nothing verified, created or changed), else None.

    What a read-only store uses: reading a namespace must work whatever TTL it was made
    with, and must not create its buckets.
    """
    config = await _stream_config(js, f"KV_{name}")
    if config is None:
        return None
    return _describe(name, keyspace, config, bool(config.get("subject_delete_marker_ttl")))


def _describe(name: str, keyspace: Keyspace, config: dict[str, Any], markers: bool) -> Bucket:
    return Bucket(
        name=name,
        stream=f"KV_{name}",
        subject_prefix=f"$KV.{name}.",
        direct=bool(config.get("allow_direct")),
        expiry_markers=keyspace is Keyspace.EPHEMERAL and markers,
        max_age=int(config.get("max_age") or 0) / _NS,
    )


def _marker_fields(ttl: float) -> dict[str, Any]:
    # Markers must outlive a watcher's reconnection window, so they live as long as the TTL
    # (in whole seconds, the server's granularity).
    return {"subject_delete_marker_ttl": max(1, math.ceil(ttl)) * _NS, "allow_msg_ttl": True}


async def _stream_config(js: JetStream, stream: str) -> dict[str, Any] | None:
    try:
        info = await js.api(f"STREAM.INFO.{stream}")
    except ApiError as exc:
        if exc.err_code == ERR_STREAM_NOT_FOUND:
            return None
        raise exc.translate() from None
    config = info.get("config")
    if not isinstance(config, dict):
        raise errors.stream_without_config(stream)
    return config
