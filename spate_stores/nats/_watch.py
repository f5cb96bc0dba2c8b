"""Watch and list through ordered push consumers that recover from gaps.

A watch is an ephemeral JetStream push consumer on the bucket, filtered to the prefix,
delivering the last message of every key first (``last_per_subject``) and then every new one.
Each delivery's reply subject carries its stream sequence (the revision), its consumer
sequence and how many messages are still pending, which is all a client needs to:

* end the snapshot when ``pending`` reaches 0 (or at once when the consumer starts with
  nothing pending), emitting it sorted by key and followed by SnapshotDone;
* notice a gap (the consumer sequence skips), a heartbeat that disagrees with what we saw,
  missed heartbeats (a consumer deleted server-side says nothing, heartbeats just stop) or a
  lost connection, and then recreate the consumer from the last stream sequence seen on a
  fresh inbox, deleting the old consumer;
* answer flow-control requests when the messages before them have been consumed.

A paged listing (``page_size``) is the snapshot phase alone, handed out as it arrives: a page
closes when it holds ``page_size`` keys, or when the snapshot ends, and the listing stops there.
The client holds one page at a time; while the caller holds a page nothing is read, so flow
control stalls the server instead of the subscription growing. Pages come in stream order, each
sorted by key; a key rewritten after its page closed comes again, at its new, greater revision.

Recreating from a sequence is exact while every message written since the last moment we were
in sync is still in the stream. In the durable bucket that is always so (tombstones never
expire); in the ephemeral bucket messages and markers age out after the TTL, so a watch
resumes only within ``resume_window`` of its last sync and otherwise raises StoreUnavailable,
which makes the caller re-watch from a fresh snapshot instead of missing a Delete.
"""

from __future__ import annotations

import collections
import logging
from typing import Any

import trio

from spate import StoreError, StoreUnavailable
from spate._quote import seconds
from spate.store import Delete, Entry, Put, SnapshotDone, WatchEvent
from spate_stores.nats import _errors as errors
from spate_stores.nats._bucket import Bucket
from spate_stores.nats._connection import ConnectionLost, NatsConnection, Subscription
from spate_stores.nats._errors import ApiError
from spate_stores.nats._jetstream import JetStream, is_tombstone
from spate_stores.nats._keys import decode_key, key_filter, prefix_filter
from spate_stores.nats._protocol import Msg

__all__ = ["KeyWatch", "parse_ack_subject"]

log = logging.getLogger("spate.nats")

_NS = 1_000_000_000
# Recreations in a row without hearing from the new consumer before the watch gives up.
_MAX_FRUITLESS_RESETS = 3
# Push consumers whose client vanished are removed by the server after this long.
_INACTIVE_THRESHOLD = 30.0


def parse_ack_subject(reply: str) -> tuple[int, int, int] | None:
    """``(stream_seq, consumer_seq, pending)`` from a JetStream delivery's reply subject.

    Handles the classic 9-token form ``$JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.
    <ts>.<pending>`` and the 12+-token form with domain and account hash in front.
    """
    tokens = reply.split(".")
    if len(tokens) < 9 or tokens[0] != "$JS" or tokens[1] != "ACK":
        return None
    if len(tokens) == 9:
        fields = (tokens[5], tokens[6], tokens[8])
    elif len(tokens) >= 12:
        fields = (tokens[7], tokens[8], tokens[10])
    else:
        return None
    if not all(f.isdigit() for f in fields):
        return None
    return int(fields[0]), int(fields[1]), int(fields[2])


class KeyWatch:
    """The event stream of one watch (or one listing: :meth:`snapshot`, :meth:`next_page`).

    It follows every key under ``prefix``, or with ``exact`` the one key ``prefix``. With
    ``page_size`` it is a paged listing, read with :meth:`next_page` only.
    """

    def __init__(
        self,
        connection: NatsConnection,
        js: JetStream,
        bucket: Bucket,
        prefix: str,
        *,
        heartbeat: float,
        resume_window: float | None,
        timeout: float,
        exact: bool = False,
        page_size: int | None = None,
    ) -> None:
        self._conn = connection
        self._js = js
        self._bucket = bucket
        self._prefix = prefix
        if exact:
            # One subject, no wildcard: the server sends this key's messages and no other's.
            filter_suffix, self._filtered_by_server = key_filter(prefix), True
        else:
            filter_suffix, self._filtered_by_server = prefix_filter(prefix)
        self._filter = bucket.subject_prefix + filter_suffix
        self._heartbeat = heartbeat
        self._resume_window = resume_window
        self._timeout = timeout
        self._events: collections.deque[WatchEvent] = collections.deque()
        self._snapshot: dict[str, Entry] | None = {}
        # A paged listing: the page being built is _snapshot; closed pages wait in _pages.
        self._page_size = page_size
        self._pages: collections.deque[list[Entry]] = collections.deque()
        self._present: dict[str, int] = {}
        self._last_stream_seq = 0
        self._last_consumer_seq = 0
        self._sub: Subscription | None = None
        self._consumer: str | None = None
        self._synced_at = trio.current_time()
        self._fruitless_resets = 0
        self._broken: StoreUnavailable | StoreError | None = None
        self._closed = False
        self.resets = 0
        """How many times the consumer was recreated (for tests and telemetry)."""
        self.flow_control_replies = 0
        """How many flow-control requests were answered (for tests and telemetry)."""

    # -- lifecycle -------------------------------------------------------------------------

    @property
    def consumer_name(self) -> str | None:
        """The server-side name of the current consumer (None while it is being replaced)."""
        return self._consumer

    async def start(self) -> None:
        """Create the first consumer (raises StoreUnavailable/StoreError if it cannot)."""
        await self._create_consumer()

    async def aclose(self) -> None:
        """Stop: unsubscribe and delete the consumer (best effort, never raises)."""
        self._closed = True
        await self._drop_consumer()

    async def _drop_consumer(self) -> None:
        sub, consumer = self._sub, self._consumer
        self._sub = self._consumer = None
        with trio.CancelScope(shield=True), trio.move_on_after(1.0):
            if sub is not None:
                await self._conn.unsubscribe(sub)
            if consumer is not None:
                await self._js.delete_consumer_soon(self._bucket.stream, consumer)

    async def _create_consumer(self) -> None:
        config: dict[str, Any] = {
            "ack_policy": "none",
            "max_deliver": 1,
            "filter_subject": self._filter,
            "replay_policy": "instant",
            "flow_control": True,
            "idle_heartbeat": round(self._heartbeat * _NS),
            "inactive_threshold": round(_INACTIVE_THRESHOLD * _NS),
            "headers_only": False,
            "num_replicas": 1,
            "mem_storage": True,
        }
        if self._last_stream_seq == 0 or self._page_size is not None:
            # A paged listing starts over even after a reset: by_start_sequence would also
            # replay the history (HISTORY) of keys it has not reached yet, superseded
            # revisions and keys deleted before the listing, and a page handed out cannot
            # be taken back when the newer message arrives. Deliveries at or below the last
            # stream sequence seen are dropped in _handle, so each key still comes once.
            config["deliver_policy"] = "last_per_subject"
        else:
            config["deliver_policy"] = "by_start_sequence"
            config["opt_start_seq"] = self._last_stream_seq + 1
        inbox = self._conn.new_inbox()
        config["deliver_subject"] = inbox
        # Subscribe before creating: the first deliveries may beat the API reply.
        sub = await self._conn.subscribe(inbox)
        stream = self._bucket.stream
        try:
            reply = await self._js.api(
                f"CONSUMER.CREATE.{stream}", {"stream_name": stream, "config": config}
            )
        except ApiError as exc:
            await self._conn.unsubscribe(sub)
            raise exc.translate() from None
        except BaseException:
            await self._conn.unsubscribe(sub)
            raise
        self._sub = sub
        self._consumer = str(reply.get("name", ""))
        self._last_consumer_seq = 0
        if int(reply.get("num_pending", 1)) == 0:
            self._synced_at = trio.current_time()
            if self._snapshot is not None:
                self._finish_snapshot()

    # -- iteration -------------------------------------------------------------------------

    def __aiter__(self) -> KeyWatch:
        return self

    async def __anext__(self) -> WatchEvent:
        """The next event; raises StoreUnavailable once the watch cannot continue."""
        while not self._events:
            await self._step_or_break()
        return self._events.popleft()

    async def _step_or_break(self) -> None:
        """One step; an error breaks the watch for good (its consumer is dropped)."""
        if self._broken is not None:
            raise self._broken
        try:
            await self._step()
        except (StoreUnavailable, StoreError) as exc:
            self._broken = exc
            await self._drop_consumer()
            raise

    async def snapshot(self) -> list[Entry]:
        """Run until the snapshot is complete and return it (a listing)."""
        while self._snapshot is not None:
            await self._step()
        return [event.entry for event in self._events if isinstance(event, Put)]

    async def next_page(self) -> list[Entry] | None:
        """The next page of a paged listing, or None once the snapshot has been handed out.

        Raises StoreUnavailable (or StoreError) once the listing cannot continue; the
        consumer is dropped then.
        """
        assert self._page_size is not None, "next_page is for paged listings"
        while not self._pages:
            if self._snapshot is None and self._broken is None:
                return None
            await self._step_or_break()
        return self._pages.popleft()

    async def _step(self) -> None:
        sub = self._sub
        if sub is None:
            await self._reset("the previous consumer could not be replaced")
            return
        # Heartbeats come every `heartbeat` seconds of silence; missing two (plus slack for
        # a busy loop) means the consumer is gone, which the server never announces.
        patience = 2 * self._heartbeat + 1.0
        item: Msg | ConnectionLost | None = None
        try:
            # A delivery already queued (a burst of echoes) needs no timeout scope: a scope
            # per message cost as much as handling the message.
            item = sub.receive.receive_nowait()
        except trio.WouldBlock:
            with trio.move_on_after(patience):
                try:
                    item = await sub.receive.receive()
                except (trio.EndOfChannel, trio.ClosedResourceError):
                    raise errors.watch_store_closed() from None
            if item is not None:
                # Woken by a delivery: often the echo of a write whose reply came in the same
                # read, its writer woken in the same pass. One more pass lets the writer go
                # first, so the echo's handling is not part of its latency.
                await trio.lowlevel.cancel_shielded_checkpoint()
        except (trio.EndOfChannel, trio.ClosedResourceError):
            raise errors.watch_store_closed() from None
        else:
            await trio.lowlevel.checkpoint()  # a watch never starves the tasks around it
        if item is None:
            await self._reset(f"no delivery or heartbeat for {seconds(patience)}")
        elif isinstance(item, ConnectionLost):
            await self._reset(f"the connection broke ({item.reason})")
        else:
            await self._handle(item)

    async def _handle(self, msg: Msg) -> None:
        headers = msg.headers
        status = msg.status
        if status == 100 and headers is not None:
            if msg.reply:
                # A flow-control request: everything before it has been consumed by now.
                self.flow_control_replies += 1
                await self._conn.publish_if_connected(msg.reply)
                return
            stalled = headers.get("Nats-Consumer-Stalled")
            if stalled:
                await self._conn.publish_if_connected(stalled)
            last = headers.get("Nats-Last-Consumer")
            if last is not None and last.isdigit() and int(last) != self._last_consumer_seq:
                await self._reset(
                    f"a heartbeat says {last} messages were delivered, we saw "
                    f"{self._last_consumer_seq}"
                )
                return
            self._fruitless_resets = 0
            if stalled:
                # Not idle: the server is holding messages back until we answer flow control
                # (a paged listing whose caller holds a page reads nothing meanwhile), so
                # this says nothing about the snapshot being complete.
                return
            self._synced_at = trio.current_time()
            if self._snapshot is not None:
                # Idle means nothing is pending, even when the pending counts of deliveries
                # racing with writes never showed 0.
                self._finish_snapshot()
            return
        if status is not None:
            description = headers.description if headers is not None else ""
            await self._reset(f"the consumer sent status {status} {description}".rstrip())
            return
        position = parse_ack_subject(msg.reply or "")
        if position is None:
            await self._reset(f"a delivery without a JetStream reply subject ({msg.reply!r})")
            return
        stream_seq, consumer_seq, pending = position
        if consumer_seq != self._last_consumer_seq + 1:
            await self._reset(
                f"a gap in deliveries (consumer sequence {consumer_seq} after "
                f"{self._last_consumer_seq})"
            )
            return
        self._last_consumer_seq = consumer_seq
        self._fruitless_resets = 0
        if stream_seq > self._last_stream_seq:
            self._last_stream_seq = stream_seq
            self._apply(msg, stream_seq)
        if pending == 0:
            self._synced_at = trio.current_time()
            if self._snapshot is not None:
                self._finish_snapshot()

    def _apply(self, msg: Msg, revision: int) -> None:
        key = decode_key(msg.subject[len(self._bucket.subject_prefix) :])
        if not self._filtered_by_server and not key.startswith(self._prefix):
            return
        tombstone = is_tombstone(msg.headers)
        if self._snapshot is not None:
            if tombstone:
                # A paged listing drops it from the page being built only; a key already
                # handed out may be deleted meanwhile (the contract allows it).
                self._snapshot.pop(key, None)
            else:
                # Deliveries come in stream order: a later one of a key is its newer revision.
                self._snapshot[key] = Entry(key, msg.payload, revision)
                if self._page_size is not None and len(self._snapshot) >= self._page_size:
                    self._close_page()
            return
        if tombstone:
            # Only keys this watch reported: an old tombstone aging out leaves a marker too.
            if self._present.pop(key, None) is not None:
                self._events.append(Delete(key, revision))
            return
        known = self._present.get(key)
        if known is None or revision > known:
            self._present[key] = revision
            self._events.append(Put(Entry(key, msg.payload, revision)))

    def _close_page(self) -> None:
        page, self._snapshot = self._snapshot or {}, {}
        if page:
            self._pages.append([page[key] for key in sorted(page)])

    def _finish_snapshot(self) -> None:
        if self._page_size is not None:
            # The short last page, if any; the listing ends here (no live phase).
            self._close_page()
            self._snapshot = None
            return
        snapshot = self._snapshot or {}
        self._snapshot = None
        for key in sorted(snapshot):
            entry = snapshot[key]
            self._present[key] = entry.revision
            self._events.append(Put(entry))
        self._events.append(SnapshotDone())

    async def _reset(self, reason: str) -> None:
        """Replace the consumer, resuming after the last stream sequence seen."""
        self.resets += 1
        self._fruitless_resets += 1
        log.info("NATS watch of %s: %s; recreating its consumer", self._filter, reason)
        await self._drop_consumer()
        if self._fruitless_resets > _MAX_FRUITLESS_RESETS:
            raise errors.watch_not_reestablished(self._filter, reason)
        deadline = trio.current_time() + self._timeout
        if self._resume_window is not None:
            deadline = min(deadline, self._synced_at + self._resume_window)
        try:
            await self._conn.wait_connected(deadline)
        except StoreUnavailable:
            raise errors.watch_could_not_resume(self._filter, reason) from None
        if self._resume_window is not None and (
            trio.current_time() > self._synced_at + self._resume_window
        ):
            raise errors.watch_may_have_missed_expiries(self._filter, reason)
        await self._create_consumer()
