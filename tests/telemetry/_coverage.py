"""Proving that every guarded write is inside its spate span.

:class:`RecordingStore` wraps a store and notes, for each create/update/delete it receives,
the span current at that moment. :func:`uncovered` then holds every noted write against the
finished spans: it must have happened directly inside a ``spate.<operation>`` span that names
the same key and keyspace, carries the job, instance, store system and an outcome, the
expected revision it was conditioned on, the new revision when it won, and the split and
epoch when it wrote a split's record or lease. A write made around
:func:`spate._write_spans.write`
shows up as a write with no spate span (or inside someone else's).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable
from contextlib import AbstractAsyncContextManager
from typing import Any

import attrs
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import Span

from spate.store import Capabilities, Entry, Keyspace, Revision, Store, WatchEvent, WriteResult

PROBE = "spate.probe"
"""The startup self-test: one span around several writes on the instance's ``_probe.`` keys."""


@attrs.frozen
class Noted:
    """One guarded write as the store received it."""

    kind: str
    keyspace: Keyspace
    key: str
    expected: int | None
    span: Span
    store: str


class RecordingStore:
    """Delegates to ``inner``; notes the current span of every guarded write."""

    def __init__(self, inner: Store, log: list[Noted], name: str = "") -> None:
        self.inner = inner
        self.log = log
        self.name = name

    @property
    def capabilities(self) -> Capabilities:
        return self.inner.capabilities

    @property
    def ephemeral_ttl(self) -> float:
        return self.inner.ephemeral_ttl

    async def __aenter__(self) -> RecordingStore:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        return None

    def session(self) -> Any:
        return self.inner.session()

    def _note(self, kind: str, keyspace: Keyspace, key: str, expected: int | None) -> None:
        self.log.append(Noted(kind, keyspace, key, expected, trace.get_current_span(), self.name))

    async def get(self, keyspace: Keyspace, key: str) -> Entry | None:
        return await self.inner.get(keyspace, key)

    async def list(self, keyspace: Keyspace, prefix: str) -> list[Entry]:
        return await self.inner.list(keyspace, prefix)

    def list_pages(self, keyspace: Keyspace, prefix: str, *, page_size: int) -> Any:
        return self.inner.list_pages(keyspace, prefix, page_size=page_size)

    async def create(self, keyspace: Keyspace, key: str, value: bytes, **named: Any) -> WriteResult:
        self._note("create", keyspace, key, None)
        return await self.inner.create(keyspace, key, value, **named)

    async def update(
        self, keyspace: Keyspace, key: str, value: bytes, expected: Revision, **named: Any
    ) -> WriteResult:
        self._note("update", keyspace, key, expected)
        return await self.inner.update(keyspace, key, value, expected, **named)

    async def delete(
        self, keyspace: Keyspace, key: str, expected: Revision | None = None
    ) -> WriteResult:
        self._note("delete", keyspace, key, expected)
        return await self.inner.delete(keyspace, key, expected)

    def watch(
        self, keyspace: Keyspace, prefix: str, *, exact: bool = False
    ) -> AbstractAsyncContextManager[AsyncIterator[WatchEvent]]:
        return self.inner.watch(keyspace, prefix, exact=exact)


def uncovered(noted: Iterable[Noted], finished: Iterable[ReadableSpan]) -> list[str]:
    """Every noted write that was not properly inside its own spate span, explained."""
    spans = {s.context.span_id: s for s in finished if s.context is not None}
    problems: list[str] = []
    seen: dict[int, Noted] = {}
    for write in noted:
        where = f"{write.kind} {write.keyspace.value}:{write.key} (store {write.store or '?'})"
        context = write.span.get_span_context()
        if not context.is_valid:
            problems.append(f"{where}: no span was current")
            continue
        span = spans.get(context.span_id)
        if span is None:
            problems.append(f"{where}: its current span was never finished/exported")
            continue
        if not span.name.startswith("spate."):
            problems.append(f"{where}: inside {span.name!r}, not a spate span")
            continue
        attributes: dict[str, Any] = dict(span.attributes or {})
        missing = [k for k in ("spate.job", "spate.instance", "db.system") if k not in attributes]
        if missing:
            problems.append(f"{where}: span {span.name} lacks {missing}")
        if span.name == PROBE:
            if "._probe." not in write.key:
                problems.append(f"{where}: a non-probe write inside {PROBE}")
            continue
        if context.span_id in seen:
            problems.append(f"{where}: shares span {span.name} with another write")
        seen[context.span_id] = write
        problems.extend(f"{where}: {p}" for p in _attribute_problems(write, span.name, attributes))
    return problems


def _attribute_problems(write: Noted, name: str, attributes: dict[str, Any]) -> list[str]:
    problems: list[str] = []
    if attributes.get("spate.keyspace") != write.keyspace.value:
        problems.append(f"{name} says keyspace {attributes.get('spate.keyspace')!r}")
    if attributes.get("spate.key") != write.key:
        problems.append(f"{name} says key {attributes.get('spate.key')!r}")
    outcome = attributes.get("spate.outcome")
    if outcome not in ("won", "lost", "error"):
        problems.append(f"{name} has no outcome ({outcome!r})")
    if write.expected is not None and attributes.get("spate.expected_revision") != write.expected:
        problems.append(
            f"{name} says expected revision {attributes.get('spate.expected_revision')!r}, "
            f"the store was asked for {write.expected}"
        )
    if outcome == "won" and not isinstance(attributes.get("spate.new_revision"), int):
        problems.append(f"{name} won without a new revision")
    if ".split." in write.key:
        split = write.key.rsplit(".split.", 1)[1]
        if attributes.get("spate.split") != split:
            problems.append(f"{name} says split {attributes.get('spate.split')!r}")
        if not isinstance(attributes.get("spate.epoch"), int):
            problems.append(f"{name} wrote split {split} without an epoch")
    return problems
