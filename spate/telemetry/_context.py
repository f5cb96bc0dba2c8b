"""Carrying a trace context to the task that performs a write.

API calls (a handler's ``SplitHandle.commit``) run their writes inline, in the caller's own
task, so their ``spate.commit`` span is a child of the handler's span without any help. The
coordinator's background writes run in its I/O tasks, started from its loop; they would inherit
the loop's context, so the task that performs one enters the context its flow was started with
(:func:`attached`): none for writes nobody asked for (renewals, elections, the leader's
publishing), which start traces of their own. Inheriting the loop's context would hang every
renewal of a worker's lifetime under one span of whoever opened the coordinator.
:func:`capture` takes a context to hand over that way.
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
