"""The store contract, for store adapter authors (as ``trio.abc`` is trio's).

An adapter is any object that satisfies :class:`Store`, a structural protocol: no base class
is required. What each method must do, sentence by sentence, is in the docstrings of the names
below and in the conformance suite (:mod:`spate_testing.conformance`) that holds every adapter
to them. The errors an adapter raises are :class:`spate.StoreError`,
:class:`spate.StoreUnavailable`, :class:`spate.ValueTooLarge` and :class:`SessionLost`.

Everything here is re-exported from private modules; this module only names it.
"""

from spate._errors import SessionLost as SessionLost
from spate._store import (
    MAX_KEY_LENGTH as MAX_KEY_LENGTH,
)
from spate._store import (
    BatchedWrites as BatchedWrites,
)
from spate._store import (
    Capabilities as Capabilities,
)
from spate._store import (
    Conflict as Conflict,
)
from spate._store import (
    Create as Create,
)
from spate._store import (
    Delete as Delete,
)
from spate._store import (
    Entry as Entry,
)
from spate._store import (
    EphemeralSemantics as EphemeralSemantics,
)
from spate._store import (
    KeySession as KeySession,
)
from spate._store import (
    Keyspace as Keyspace,
)
from spate._store import (
    Put as Put,
)
from spate._store import (
    Remove as Remove,
)
from spate._store import (
    Revision as Revision,
)
from spate._store import (
    Session as Session,
)
from spate._store import (
    SnapshotDone as SnapshotDone,
)
from spate._store import (
    Store as Store,
)
from spate._store import (
    Swap as Swap,
)
from spate._store import (
    WatchEvent as WatchEvent,
)
from spate._store import (
    Won as Won,
)
from spate._store import (
    Write as Write,
)
from spate._store import (
    WriteResult as WriteResult,
)
from spate._store import (
    batched as batched,
)
from spate._store import (
    check_session as check_session,
)
from spate._store import (
    check_writes as check_writes,
)
from spate._store import (
    max_batch_of as max_batch_of,
)
from spate._store import (
    validate_key as validate_key,
)
from spate._store import (
    validate_page_size as validate_page_size,
)
from spate._store import (
    validate_prefix as validate_prefix,
)

__all__ = [
    "MAX_KEY_LENGTH",
    "BatchedWrites",
    "Capabilities",
    "Conflict",
    "Create",
    "Delete",
    "Entry",
    "EphemeralSemantics",
    "KeySession",
    "Keyspace",
    "Put",
    "Remove",
    "Revision",
    "Session",
    "SessionLost",
    "SnapshotDone",
    "Store",
    "Swap",
    "WatchEvent",
    "Won",
    "Write",
    "WriteResult",
    "batched",
    "check_session",
    "check_writes",
    "max_batch_of",
    "validate_key",
    "validate_page_size",
    "validate_prefix",
]
