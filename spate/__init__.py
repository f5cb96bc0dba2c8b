"""spate: share one job's work safely across a fleet of Trio workers.

This module is the table of contents of the public API; everything here is re-exported
from the private modules behind it.
"""

from spate._version import __version__
from spate.errors import (
    ConfigError,
    FatalCoordinationError,
    Fenced,
    PlanError,
    SpateError,
    StoreError,
    StoreUnavailable,
    ValueTooLarge,
)

__all__ = [
    "ConfigError",
    "FatalCoordinationError",
    "Fenced",
    "PlanError",
    "SpateError",
    "StoreError",
    "StoreUnavailable",
    "ValueTooLarge",
    "__version__",
]
