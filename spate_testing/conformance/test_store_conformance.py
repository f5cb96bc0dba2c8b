"""The conformance suite as a test module: ``pytest --pyargs spate_testing.conformance`` runs it.

Against the store URL in ``SPATE_CONFORMANCE_URL``, or the memory store when it is unset, so
the command a store author tries first runs the whole suite and passes out of the box::

    pytest --pyargs spate_testing.conformance                        # memory://
    SPATE_CONFORMANCE_URL='etcd://127.0.0.1:2379?ttl=2' pytest --pyargs spate_testing.conformance

``spate conformance --store URL`` (:func:`~spate_testing.conformance.run_conformance`) runs
this same class in its own pytest process, and masks a password in the URL wherever the
report would show it; run directly, pytest's tracebacks may show the URL as given.
"""

from __future__ import annotations

import os

import pytest
import trio

from spate_testing.conformance._runner import URL_VARIABLE, clock_for_url, url_store_factory
from spate_testing.conformance._suite import StoreConformance
from spate_testing.conformance._support import StoreFactory

__all__ = ["DEFAULT_URL", "TestStoreConformance"]

DEFAULT_URL = "memory://"
"""The store the suite runs against when ``SPATE_CONFORMANCE_URL`` names none."""


def _url() -> str:
    return os.environ.get(URL_VARIABLE) or DEFAULT_URL


class TestStoreConformance(StoreConformance):
    """Every rule of the store contract, against the store ``SPATE_CONFORMANCE_URL`` names."""

    @pytest.fixture
    def store_factory(self) -> StoreFactory:
        """New clients of the URL's store, one per namespace asked for."""
        return url_store_factory(_url())

    @pytest.fixture
    def spate_clock(self) -> trio.abc.Clock | None:
        """A virtual clock for ``memory://`` (its TTLs run on Trio's clock), else the real one."""
        return clock_for_url(_url())
