"""Whether spans would be recorded: asked on every guarded write and every store round trip.

Until an SDK tracer provider is installed, the OpenTelemetry API hands out a proxy whose spans
record nothing, and building spans then costs more than a memory-store write; so callers ask
first and skip them. Asking the API itself looks the environment up each time it has no
provider (about 0.8 µs, a tenth of a memory-store write): once it has answered "none yet", the
global it sets on installing one is read directly until it is. Were that private name ever
gone from the API, reading it answers "maybe" and the API is asked as before.
"""

from __future__ import annotations

from opentelemetry import trace

__all__ = ["tracing"]


def tracing() -> bool:
    """Whether spans would be recorded: an SDK tracer provider is installed.

    The global provider is set at most once, so once one is found it is remembered; a no-op
    provider never records.
    """
    global _installed, _asked
    if _installed is None:
        if _asked and getattr(trace, "_TRACER_PROVIDER", _MAYBE) is None:
            return False
        provider = trace.get_tracer_provider()
        if isinstance(provider, trace.ProxyTracerProvider):
            _asked = True
            return False  # none yet: one may be installed later, so look again next time
        _installed = not isinstance(provider, trace.NoOpTracerProvider)
    return _installed


_installed: bool | None = None
"""Whether the global tracer provider, once set, records (None: not set yet)."""

_asked = False
"""Whether the API has answered that no provider is set (so its global may be read)."""

_MAYBE = object()
