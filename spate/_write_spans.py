"""The one door every guarded store write of the protocol goes through.

Claims, renewals, commits, failures, releases, quarantines, elections, leader renewals, plan
and spec seeding, assignment publishing and clean-up, presence: each is one call to
:func:`write`, which

- opens an OpenTelemetry span ``spate.<operation>`` (tracer ``"spate"``) carrying the job,
  instance, split, epoch, keyspace, expected and new revision, the outcome
  (``won``/``lost``/``error``) and ``db.system``; a lost compare-and-swap or an error sets the
  span's status and adds an event;
- reports the outcome and its duration to the :class:`~spate.MetricsHooks`.

Keeping this the only place that calls ``create``/``update``/``delete`` on a store is what
lets a test prove that no write escapes telemetry. Store adapters add client spans beneath.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Literal, Protocol

import attrs
import trio
from opentelemetry import trace
from opentelemetry.trace import Span, Status, StatusCode

from spate._errors import StoreError, StoreUnavailable
from spate._metrics import MetricsHooks
from spate._store import Conflict, Keyspace, Session, Won, WriteResult
from spate.telemetry._provider import tracing

__all__ = ["Scope", "WriteKind", "Writer", "span", "tracing", "write"]

WriteKind = Literal["create", "update", "delete"]
"""The three guarded store writes."""

_tracer = trace.get_tracer("spate")


class Writer(Protocol):
    """What a fenced write is performed on: a store, or the runtime's group commit before one."""

    async def create(
        self, keyspace: Keyspace, key: str, value: bytes, *, session: Session | None = None
    ) -> WriteResult:
        """As :meth:`spate.store.Store.create`."""
        ...

    async def update(
        self,
        keyspace: Keyspace,
        key: str,
        value: bytes,
        expected: int,
        *,
        session: Session | None = None,
    ) -> WriteResult:
        """As :meth:`spate.store.Store.update`."""
        ...

    async def delete(
        self, keyspace: Keyspace, key: str, expected: int | None = None
    ) -> WriteResult:
        """As :meth:`spate.store.Store.delete`."""
        ...


@attrs.frozen
class Scope:
    """Who is writing: the job and instance every span carries, and where outcomes go."""

    job: str
    instance: str
    system: str
    metrics: MetricsHooks = attrs.field(factory=MetricsHooks)
    session: Callable[[], Session | None] = attrs.field(default=lambda: None)
    """The coordinator's current store session, named by every ephemeral create and update."""
    base: dict[str, str | int] = attrs.field(
        init=False,
        eq=False,
        repr=False,
        default=attrs.Factory(
            lambda self: {
                "spate.job": self.job,
                "spate.instance": self.instance,
                "db.system": self.system,
            },
            takes_self=True,
        ),
    )
    """The attributes every span of this scope starts with (built once, copied per span)."""


@contextmanager
def span(
    scope: Scope, operation: str, *, records_errors: bool = True, **attributes: str | int
) -> Iterator[Span]:
    """A ``spate.<operation>`` span for work that is not a single write (the startup probe).

    ``records_errors=False`` leaves an escaping exception to the caller to record (as
    :func:`write` does, once, with its outcome).
    """
    with _tracer.start_as_current_span(
        f"spate.{operation}",
        attributes={**scope.base, **attributes},
        record_exception=records_errors,
        set_status_on_exception=records_errors,
    ) as current:
        yield current


async def write(
    store: Writer,
    scope: Scope,
    operation: str,
    kind: WriteKind,
    keyspace: Keyspace,
    key: str,
    value: bytes = b"",
    *,
    expected: int | None = None,
    split: str | None = None,
    epoch: int | None = None,
    traced: bool | None = None,
) -> WriteResult:
    """Perform one guarded write inside its span and report its outcome.

    ``kind`` picks ``create(key, value)``, ``update(key, value, expected)`` or
    ``delete(key, expected)``; an ephemeral create or update names the scope's session.
    ``traced`` is :func:`tracing` when the caller already asked (a batch asks once for all
    its writes); None asks now. Store errors propagate unchanged after being recorded.
    """
    if kind == "update" and expected is None:
        raise ValueError("an update needs the expected revision")
    session = scope.session() if keyspace is Keyspace.EPHEMERAL else None
    started = trio.current_time()
    if not (tracing() if traced is None else traced):
        # Nothing records spans (no SDK installed): skip building one, which would cost
        # more than a write to the memory store. The outcome is still counted.
        try:
            result = await _perform(store, kind, keyspace, key, value, expected, session)
        except (StoreError, StoreUnavailable, trio.Cancelled):
            scope.metrics.write(operation, "error", trio.current_time() - started)
            raise
        elapsed = trio.current_time() - started
        scope.metrics.write(operation, "won" if isinstance(result, Won) else "lost", elapsed)
        return result
    # The span is started and made current directly (not through span(): each layer of
    # context managers between here and the SDK cost about as much as a memory-store write).
    attributes: dict[str, str | int] = {
        **scope.base,
        "spate.keyspace": keyspace.value,
        "spate.key": key,
    }
    if split is not None:
        attributes["spate.split"] = split
    if epoch is not None:
        attributes["spate.epoch"] = epoch
    if expected is not None:
        attributes["spate.expected_revision"] = expected
    current = _tracer.start_span(
        _span_name(operation),
        attributes=attributes,
        record_exception=False,
        set_status_on_exception=False,
    )
    with trace.use_span(
        current, end_on_exit=True, record_exception=False, set_status_on_exception=False
    ):
        try:
            result = await _perform(store, kind, keyspace, key, value, expected, session)
        except (StoreError, StoreUnavailable, trio.Cancelled) as exc:
            _record_error(current, exc)
            scope.metrics.write(operation, "error", trio.current_time() - started)
            raise
        if isinstance(result, Won):
            current.set_attributes({"spate.new_revision": result.revision, "spate.outcome": "won"})
            scope.metrics.write(operation, "won", trio.current_time() - started)
        else:
            assert isinstance(result, Conflict)
            current.set_attribute("spate.outcome", "lost")
            current.set_status(Status(StatusCode.ERROR, "condition did not hold"))
            current.add_event("spate.cas_lost", {"spate.key": key})
            scope.metrics.write(operation, "lost", trio.current_time() - started)
        return result


_names: dict[str, str] = {}


def _span_name(operation: str) -> str:
    """``spate.<operation>``, built once per operation."""
    name = _names.get(operation)
    if name is None:
        name = _names[operation] = f"spate.{operation}"
    return name


def _perform(
    store: Writer,
    kind: WriteKind,
    keyspace: Keyspace,
    key: str,
    value: bytes,
    expected: int | None,
    session: Session | None,
) -> Awaitable[WriteResult]:
    # Returns the store's own awaitable (not a coroutine of its own): one frame less on
    # every write.
    if kind == "create":
        if session is None:
            return store.create(keyspace, key, value)
        return store.create(keyspace, key, value, session=session)
    if kind == "update":
        assert expected is not None
        if session is None:
            return store.update(keyspace, key, value, expected)
        return store.update(keyspace, key, value, expected, session=session)
    return store.delete(keyspace, key, expected)


def _record_error(current: Span, exc: BaseException) -> None:
    current.set_attribute("spate.outcome", "error")
    if isinstance(exc, trio.Cancelled):
        # Cancelled mid-flight: the write may or may not have landed.
        current.set_status(Status(StatusCode.ERROR, "cancelled; outcome unknown"))
        current.add_event("spate.cancelled")
        return
    current.set_status(Status(StatusCode.ERROR, str(exc)))
    current.record_exception(exc)
