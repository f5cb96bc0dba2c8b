"""Carrying a caller's trace context to the task that performs its write.

The coordinator's store writes run in its own I/O tasks, started by its control loop, so they
would inherit the loop's context, not the caller's. An API call (a handler's
``SplitHandle.commit``) therefore captures the caller's context with :func:`capture` and the
task that performs the write enters it with :func:`attached`: the write's ``spate.commit``
span becomes a child of the handler's own span, in one trace.

Writes nobody asked for (renewals, elections, the leader's publishing) carry no context and
start traces of their own; inheriting the loop's context would hang every renewal of a
worker's lifetime under one span of whoever opened the coordinator.
"""

from __future__ import annotations

from opentelemetry import context as otel_context
from opentelemetry.context import Context

__all__ = ["Context", "attached", "capture"]


def capture() -> Context:
    """The calling task's current OpenTelemetry context (cheap: a contextvar read)."""
    return otel_context.get_current()


class attached:  # lower case: used like a function, `with attached(context):`
    """Make ``carried`` current for the block (None: an empty context, so spans start a trace).

    A class rather than a generator: it wraps every store call of the coordinator, and most
    calls need no change of context, which this way costs a fraction of a microsecond.
    """

    __slots__ = ("_carried", "_token")

    def __init__(self, carried: Context | None) -> None:
        self._carried = carried
        self._token: object = None

    def __enter__(self) -> None:
        current = otel_context.get_current()
        carried = self._carried
        if carried is current or (carried is None and not current):
            return
        self._token = otel_context.attach(carried if carried is not None else Context())

    def __exit__(self, *exc_info: object) -> None:
        if self._token is not None:
            token, self._token = self._token, None
            otel_context.detach(token)  # type: ignore[arg-type]
