"""How an error message quotes what it refuses: a bad name is shown, but never at length.

A job name, split id or namespace that fails validation may be anything, a megabyte of it
included; a message that echoed it whole would bury its own explanation. :func:`echo` quotes
at most :data:`ECHO_LIMIT` characters of it and says how long it was.
"""

from __future__ import annotations

__all__ = ["ECHO_LIMIT", "echo", "shorten"]

ECHO_LIMIT = 100
"""The most characters of a refused value an error message quotes."""


def shorten(text: str, limit: int = ECHO_LIMIT) -> str:
    """``text`` itself when short, else its first ``limit`` characters and ``…``."""
    return text if len(text) <= limit else f"{text[:limit]}…"


def echo(value: object, limit: int = ECHO_LIMIT) -> str:
    """``repr(value)`` for a message, cut to ``limit`` characters and saying its length.

    ``echo("x" * 5000)`` is ``'xxx…xxx'… (5000 characters)`` with 100 of them shown.
    """
    if isinstance(value, str):
        if len(value) <= limit:
            return repr(value)
        return f"{shorten(value, limit)!r} ({len(value)} characters)"
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text)} characters)"
