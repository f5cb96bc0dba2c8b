"""Project-wide test configuration."""

from __future__ import annotations

from collections.abc import Generator

import pytest


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, None, None]:
    # pytest-trio (with trio >= 0.25) wraps every failure in a one-item ExceptionGroup, which
    # hides the real error and breaks pytest.raises/xfail; unwrap single-leaf groups.
    try:
        return (yield)
    except BaseExceptionGroup as group:
        exc: BaseException = group
        while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
            exc = exc.exceptions[0]
        if exc is group:
            raise
        raise exc from None
