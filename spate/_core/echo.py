"""The echo rule: a watch event of the machine's own write is dropped before it is an input.

A store tells every watcher of every write, the writer included. The machine folds its own
writes as soon as their replies come back (a commit's new revision, a lease's), so by the time
the echo arrives the view holds that revision already. Recognised by revision alone, before
anything is decoded, the echo costs no input and no step: a commit's echo must not wake the
loop, or every commit would cost a rule sweep on top of its write.
"""

from __future__ import annotations

from spate._core.view.view import View
from spate._store import Delete, Keyspace, Put

__all__ = ["is_echo"]


def is_echo(view: View, keyspace: Keyspace, event: Put | Delete) -> bool:
    """Whether ``event`` brings nothing ``view`` has not folded (an own write's echo, or older).

    Only a put is judged here; a delete goes on to the machine, whose fold weighs its revision.
    """
    if isinstance(event, Put):
        entry = event.entry
        return view.already_seen(keyspace, entry.key, entry.revision)
    return False
