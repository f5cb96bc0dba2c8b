"""Folding a large batch of records without paying for repeated full garbage collections.

Folding a watch snapshot of a large job builds hundreds of thousands of small objects in one
synchronous call. CPython's cyclic collector is triggered by allocation counts, so it runs
again and again during such a call, and each full collection walks the whole heap: at 100,000
splits that was about a quarter of a joining worker's CPU. None of those objects is garbage yet, so
none of those collections frees anything.

:func:`collector_paused` pauses the collector around one such call and restores it after.
The call is synchronous and runs on the Trio thread, so nothing else of the application runs
in that thread meanwhile; other threads only see collection deferred for the fold's duration
(well under a second per 100,000 records). Small batches are folded as they are.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["BULK", "collector_paused"]

BULK = 10_000
"""Records in one fold from which the collector is paused around it."""


@contextmanager
def collector_paused(records: int) -> Iterator[None]:
    """Pause the cyclic garbage collector for a fold of ``records`` records, if it is bulky."""
    if records < BULK or not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
