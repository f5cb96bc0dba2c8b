"""How an error message quotes what it refuses, and how it writes a number of seconds.

A job name, split id or namespace that fails validation may be anything, a megabyte of it
included; a message that printed it whole would bury its own explanation. :func:`quote` quotes
at most :data:`QUOTE_LIMIT` characters of it and says how long it was.

A duration in a message is written by :func:`seconds` (``1.67 s``, never
``1.6666666666666667 s``; ``1000000000000 s``, never ``1e+12 s``), and a number the message
tells the reader to type back (``ttl=...``) by :func:`number`, which round-trips exactly and
survives a URL's query string (``1e+12`` would read as ``1e 12`` there).
"""

from __future__ import annotations

import math

__all__ = ["QUOTE_LIMIT", "number", "quote", "seconds", "shorten"]

QUOTE_LIMIT = 100
"""The most characters of a refused value an error message quotes."""


def shorten(text: str, limit: int = QUOTE_LIMIT) -> str:
    """``text`` itself when short, else its first ``limit`` characters and ``…``."""
    return text if len(text) <= limit else f"{text[:limit]}…"


def quote(value: object, limit: int = QUOTE_LIMIT) -> str:
    """``repr(value)`` for a message, cut to ``limit`` characters and saying its length.

    ``quote("x" * 5000)`` is ``'xxx…xxx'… (5000 characters)`` with 100 of them shown.
    """
    if isinstance(value, str):
        if len(value) <= limit:
            return repr(value)
        return f"{shorten(value, limit)!r} ({len(value)} characters)"
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text)} characters)"


def seconds(value: float) -> str:
    """A duration for a message: ``30 s``, ``1.67 s``, ``0.05 s``, ``9000000000 s``.

    Whole numbers are written out in full; others keep three significant digits (at most
    one decimal from 100 s up), which is all a reader needs of a timeout or a TTL.
    """
    return f"{_short(value)} s"


def _short(value: float) -> str:
    if not math.isfinite(value):
        return str(value)
    if abs(value) >= 1e16:
        return f"{value:.3g}"
    if value == int(value):
        return str(int(value))
    if abs(value) >= 100:
        return f"{value:.1f}"
    return f"{value:.3g}"


def number(value: float) -> str:
    """``value`` as a reader would type it back: ``30``, ``2.5``, ``1000000000000``.

    Exact (a float's shortest repr when it is not whole) and, below 10**16, free of
    exponents and ``+``.
    """
    if not (math.isfinite(value) and abs(value) < 1e16):
        return repr(float(value))
    if value == int(value):
        return str(int(value))
    text = repr(float(value))
    return f"{value:.20f}".rstrip("0").rstrip(".") if "e" in text else text
