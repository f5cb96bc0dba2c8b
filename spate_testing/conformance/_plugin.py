"""pytest plugin (loaded through the ``pytest11`` entry point): clear reports for the suite.

pytest-trio wraps every failure of a Trio test in a one-item ExceptionGroup, and turns a
``pytest.skip(reason)`` into a bare skip without its reason. For tests of
:class:`~spate_testing.conformance.StoreConformance` subclasses this plugin unwraps both, so
adapter authors see the assertion that failed and the capability a skipped test needs. Tests
of other classes are left alone.
"""

from __future__ import annotations

import sys
from collections.abc import Generator

import pytest

__all__ = ["pytest_runtest_call"]


def _leaf(exc: BaseException) -> BaseException:
    """The one exception inside nested single-item groups, else ``exc`` itself."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc


def _original(exc: BaseException) -> BaseException:
    if isinstance(exc, pytest.skip.Exception | pytest.xfail.Exception) and isinstance(
        exc.__context__, BaseExceptionGroup
    ):
        # pytest-trio re-raises a reasonless skip/xfail while handling the group that held
        # the real one: recover it, reason and all.
        leaf = _leaf(exc.__context__)
        if type(leaf) is type(exc):
            return leaf
    return _leaf(exc)


def _is_conformance_test(item: pytest.Item) -> bool:
    suite = sys.modules.get("spate_testing.conformance._suite")
    if suite is None:
        # Never imported, so no test can be one of its subclasses; importing it here would
        # burden every unrelated test run in an environment where spate is installed.
        return False
    cls = getattr(item, "cls", None)
    return isinstance(cls, type) and issubclass(cls, suite.StoreConformance)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, None, None]:
    """Re-raise a conformance test's real failure or skip instead of pytest-trio's wrapping."""
    if not _is_conformance_test(item):
        return (yield)
    try:
        return (yield)
    except BaseException as exc:
        original = _original(exc)
        if original is exc:
            raise
        raise original from None
