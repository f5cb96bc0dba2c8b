"""Freezing a server process, and knowing it is frozen before going on."""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

__all__ = ["freeze"]

FROZEN_WITHIN = 5.0
"""Seconds to wait for the kernel to stop every thread of a SIGSTOPped process."""


def freeze(process: subprocess.Popen[bytes]) -> None:
    """SIGSTOP ``process`` and return once it is stopped.

    The signal only marks the process; its threads stop as each is next scheduled, which on
    a loaded machine can be after the next request arrived (and was answered). Where
    ``/proc`` tells (Linux), wait until the process state is "stopped".
    """
    process.send_signal(signal.SIGSTOP)
    stat = Path(f"/proc/{process.pid}/stat")
    deadline = time.monotonic() + FROZEN_WITHIN
    while time.monotonic() < deadline:
        try:
            # The state is the field after the parenthesised command name.
            state = stat.read_text().rpartition(")")[2].split()[0]
        except (OSError, IndexError):
            return  # no /proc here (or the process is gone): nothing more to learn
        if state in ("T", "t"):
            return
        time.sleep(0.005)
