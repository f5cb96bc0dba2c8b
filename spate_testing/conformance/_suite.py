"""The conformance suite as one test class that adapter authors subclass."""

from __future__ import annotations

import pytest
import trio

from spate_testing.conformance._batched import BatchedConformance
from spate_testing.conformance._cas import CasConformance
from spate_testing.conformance._concurrency import ConcurrencyConformance
from spate_testing.conformance._data import DataConformance
from spate_testing.conformance._exact_watch import ExactWatchConformance
from spate_testing.conformance._expiry import ExpiryConformance
from spate_testing.conformance._pages import PagesConformance
from spate_testing.conformance._session import SessionConformance
from spate_testing.conformance._watch import WatchConformance

__all__ = ["StoreConformance"]


class StoreConformance(
    CasConformance,
    BatchedConformance,
    DataConformance,
    PagesConformance,
    ConcurrencyConformance,
    ExpiryConformance,
    SessionConformance,
    WatchConformance,
    ExactWatchConformance,
):
    """Every rule of the store contract (:mod:`spate.store`) as a pytest test.

    Subclass it in a test module whose class name starts with ``Test`` and provide a
    ``store_factory`` fixture returning a :data:`~spate_testing.conformance.StoreFactory`:
    a callable taking a namespace and returning an async context manager of a *new client*
    of the store under test. Clients made with the same namespace within one test must share
    data (the suite closes one and watches from another); different namespaces must be
    isolated. The suite uses the namespaces ``"spate-conformance"`` and
    ``"spate-conformance-other"`` and a fresh random key prefix in every test, so it can run
    repeatedly against one long-lived server.

    Override ``spate_clock`` to return a :class:`trio.testing.MockClock` when the store
    measures time on the Trio clock (as MemoryStore does): the TTL tests then finish
    instantly. Against a real server keep the default (the real clock) and open the store
    with a short ephemeral TTL (two seconds, say): the TTL tests wait one or two TTLs.

    Tests that do not apply to a store are skipped, naming the capability it declares
    (per-key versus session expiry, whether expiry reaches watchers, whether it sends
    compare-and-swaps together). Provide a
    ``partitioned_store_factory`` fixture (clients behind a link the test can cut, such as
    :mod:`spate_testing.blackhole`'s proxy) to run the partition test too.
    """

    pytestmark = pytest.mark.trio

    @pytest.fixture
    def spate_clock(self) -> trio.abc.Clock | None:
        """The clock the tests run on; None means the real clock."""
        return None
