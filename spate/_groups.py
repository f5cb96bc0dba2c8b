"""Keep Trio's ExceptionGroups away from callers: an error comes out as itself."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import trio

__all__ = ["single_error"]


def _leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in _leaves(inner)]
    return [exc]


@contextmanager
def single_error() -> Iterator[None]:
    """Re-raise a nursery's ExceptionGroup as its one meaningful exception.

    Cancelled leaves that merely accompany a real error are dropped (they are the echo of
    the nursery cancelling its other tasks); a group of only Cancelled re-raises one
    Cancelled; a group with several distinct errors stays a group, since hiding any of them
    would lose information.
    """
    try:
        yield
    except BaseExceptionGroup as group:
        leaves = _leaves(group)
        real: list[BaseException] = []
        for leaf in leaves:
            # One stop error reaches every task waiting on the coordinator (the same object,
            # or a copy with the same message): it is one error, not several.
            if not isinstance(leaf, trio.Cancelled) and not any(
                leaf is seen or (type(leaf) is type(seen) and str(leaf) == str(seen))
                for seen in real
            ):
                real.append(leaf)
        if len(real) == 1:
            raise real[0] from group.__cause__
        if not real:
            raise leaves[0] from None
        raise
