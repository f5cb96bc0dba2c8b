"""Run the conformance suite against a store URL (what ``spate conformance --store URL`` does)."""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from urllib.parse import parse_qsl, urlencode, urlsplit

import pytest
import trio
import trio.testing

from spate.store import Store
from spate_testing.conformance._support import StoreFactory

__all__ = ["run_conformance", "url_store_factory"]

_TEST_MODULE = '''\
"""The store conformance suite against the URL given to run_conformance."""

import pytest

from spate_testing.conformance import StoreConformance


class TestStoreConformance(StoreConformance):
    @pytest.fixture
    def store_factory(self, spate_conformance_factory):
        return spate_conformance_factory

    @pytest.fixture
    def spate_clock(self, spate_conformance_clock):
        return spate_conformance_clock
'''


def with_namespace(url: str, namespace: str) -> str:
    """``url`` with its ``namespace=`` query parameter set to ``namespace``.

    A namespace already in the query becomes a prefix (``job`` + ``spate-conformance`` gives
    ``job-spate-conformance``), so a shared server's tenants stay apart.
    """
    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True)
    existing = next((v for k, v in reversed(query) if k == "namespace" and v), "")
    query = [(k, v) for k, v in query if k != "namespace"]
    query.append(("namespace", f"{existing}-{namespace}" if existing else namespace))
    # Keep everything before the query verbatim: urlunsplit would turn memory:// into memory:.
    head = url.split("#", 1)[0].split("?", 1)[0]
    fragment = f"#{parts.fragment}" if parts.fragment else ""
    return f"{head}?{urlencode(query)}{fragment}"


def url_store_factory(url: str) -> StoreFactory:
    """A :data:`StoreFactory` opening a new client of ``url`` per call, via ``open_store``."""
    from spate_stores import open_store

    def factory(namespace: str) -> AbstractAsyncContextManager[Store]:
        return open_store(with_namespace(url, namespace))

    return factory


def _clock_for(url: str) -> trio.abc.Clock | None:
    # memory:// measures TTLs on the Trio clock, so virtual time makes its TTL tests instant;
    # every other store expires on a server's real clock.
    if urlsplit(url).scheme.lower() == "memory":
        return trio.testing.MockClock(autojump_threshold=0)
    return None


class _ConformancePlugin:
    """Hands the URL's factory and clock to the generated test module."""

    def __init__(self, url: str) -> None:
        self._url = url

    @pytest.fixture
    def spate_conformance_factory(self) -> StoreFactory:
        return url_store_factory(self._url)

    @pytest.fixture
    def spate_conformance_clock(self) -> trio.abc.Clock | None:
        return _clock_for(self._url)


def run_conformance(url: str, pytest_args: Sequence[str] = ()) -> int:
    """Run the whole conformance suite against the store ``url`` names; return pytest's exit code.

    Each test opens its clients with :func:`spate_stores.open_store`, setting the URL's
    ``namespace=`` (an existing namespace becomes a prefix). Give real servers a short TTL
    (``?ttl=2``) so the expiry tests finish in seconds; ``memory://`` runs on a virtual clock.
    ``pytest_args`` are passed through (``["-x", "-k", "watch"]``, say).

    Raises :class:`~spate.errors.ConfigError` or :class:`~spate.errors.StoreError` before
    running anything when the URL cannot name a store (unknown scheme, missing extra).
    """
    from spate_stores import store_from_url

    store_from_url(url)  # fail fast, with open_store's own message, on a URL it cannot open
    with tempfile.TemporaryDirectory(prefix="spate-conformance-") as tmp:
        root = Path(tmp)
        (root / "pytest.ini").write_text("[pytest]\n")
        (root / "test_store_conformance.py").write_text(_TEST_MODULE)
        args = [
            str(root),
            "-c",
            str(root / "pytest.ini"),
            "--rootdir",
            str(root),
            "-p",
            "no:cacheprovider",
            *pytest_args,
        ]
        return int(pytest.main(args, plugins=[_ConformancePlugin(url)]))
