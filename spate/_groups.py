"""Keep Trio's ExceptionGroups away from callers: an error comes out as itself."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import trio

__all__ = ["meaningful_leaf", "single_error"]


def _leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in _leaves(inner)]
    return [exc]


def meaningful_leaf(group: BaseExceptionGroup[BaseException]) -> BaseException | None:
    """The one real error in ``group``, or None when there is none or several.

    Cancelled leaves are dropped (a nursery cancelling its other tasks leaves them behind),
    and one stop error that reached several waiting tasks (the same object, or a copy with
    the same message) counts once.
    """
    real: list[BaseException] = []
    for leaf in _leaves(group):
        if not isinstance(leaf, trio.Cancelled) and not any(
            leaf is seen or (type(leaf) is type(seen) and str(leaf) == str(seen)) for seen in real
        ):
            real.append(leaf)
    return real[0] if len(real) == 1 else None


@contextmanager
def single_error() -> Iterator[None]:
    """Re-raise a nursery's ExceptionGroup as its one meaningful exception.

    See :func:`meaningful_leaf`; a group of only Cancelled re-raises one Cancelled, and a
    group with several distinct errors stays a group, since hiding any of them would lose
    information.
    """
    try:
        yield
    except BaseExceptionGroup as group:
        leaf = meaningful_leaf(group)
        if leaf is not None:
            raise leaf from group.__cause__
        leaves = _leaves(group)
        if all(isinstance(x, trio.Cancelled) for x in leaves):
            raise leaves[0] from None
        raise
