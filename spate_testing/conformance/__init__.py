"""The store conformance suite: hold any store adapter to the store contract.

Run it against your own store from your own tests, the way ``trio.testing`` offers
``check_two_way_stream`` to every stream implementation::

    import pytest
    from spate_testing.conformance import StoreConformance, StoreFactory

    class TestMyStoreConformance(StoreConformance):
        @pytest.fixture
        def store_factory(self) -> StoreFactory:
            return lambda namespace: MyStore(url, namespace=namespace, ephemeral_ttl=2.0)

or run it against a store URL with :func:`run_conformance` (``spate conformance --store URL``).
"""

import pkgutil

import pytest

# The suite's assertions live in this package rather than in a test module; ask pytest to
# rewrite them so a failure shows the values compared (must precede the imports below).
# Every module of the package, so a new one cannot be left out (``_batched`` once was, and its
# failures named neither rule nor values).
pytest.register_assert_rewrite(
    *(f"{__name__}.{module.name}" for module in pkgutil.iter_modules(__path__))
)

from spate._module_metadata import fixup_module_metadata as _fixup_module_metadata  # noqa: E402
from spate_testing.conformance._runner import run_conformance  # noqa: E402
from spate_testing.conformance._session import Link, PartitionedStoreFactory  # noqa: E402
from spate_testing.conformance._suite import StoreConformance  # noqa: E402
from spate_testing.conformance._support import StoreFactory  # noqa: E402

__all__ = [
    "Link",
    "PartitionedStoreFactory",
    "StoreConformance",
    "StoreFactory",
    "run_conformance",
]

# Its names report this module as their home (in reprs, tracebacks, pickles), as spate's do.
_fixup_module_metadata(__name__, globals(), __all__)
