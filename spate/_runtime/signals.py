"""SIGINT and SIGTERM as a graceful leave: what ``run_worker(..., handle_signals=True)`` does.

A process manager stops a worker with SIGTERM (Kubernetes, systemd, ``docker stop``), a person
with Ctrl-C (SIGINT). Left to Python, the first kills the process at once and the second
raises ``KeyboardInterrupt`` wherever the program happens to be; either way the worker's
splits wait out their leases. Handled here, the first of either starts the same graceful
leave a cancellation does (hand every split back, step down, wait, bounded, until the splits
are held elsewhere) and ``run_worker`` then returns :class:`Left`, so the program ends
normally (exit status 0). A second signal during the leave cuts it short: the worker stops at
once and whatever was not handed back yet moves when its leases expire.
"""

from __future__ import annotations

import logging
import signal
import threading

import attrs
import trio

from spate._errors import ConfigError

__all__ = ["LeaveRequest", "Left", "check_signals_can_be_handled", "watch_signals"]

logger = logging.getLogger("spate.worker")

SIGNALS = (signal.SIGINT, signal.SIGTERM)
"""The signals that mean "stop this worker": Ctrl-C and a process manager's stop."""


@attrs.frozen
class Left:
    """What ``run_worker(..., handle_signals=True)`` returns when a signal ended it.

    The job is not over (that is a verdict's business): this worker left it, and the rest of
    the fleet carries on with its splits.
    """

    signal: str
    """The signal that started the leave: ``"SIGINT"`` or ``"SIGTERM"``."""
    graceful: bool
    """True unless a second signal cut the leave short (its splits then wait out their
    leases); a graceful leave still ends at ``leave_deadline``, as a cancelled one does."""


@attrs.define(eq=False)
class LeaveRequest:
    """Why and how the worker is leaving, shared by whoever asks it to and the leave itself."""

    event: trio.Event = attrs.Factory(trio.Event)
    """Set when the worker should leave (a cancellation or a signal)."""
    signal: str | None = None
    """The first signal received, if a signal started the leave."""
    cut_short: bool = False
    """A second signal ended the leave at once."""

    def left(self) -> Left | None:
        """The :class:`Left` to return, if a signal ended the worker."""
        if self.signal is None:
            return None
        return Left(signal=self.signal, graceful=not self.cut_short)


def check_signals_can_be_handled() -> None:
    """Raise ConfigError unless this is the main thread (Python delivers signals only there)."""
    if threading.current_thread() is not threading.main_thread():
        raise ConfigError(
            "run_worker(handle_signals=True) must run in the main thread: Python delivers "
            "signals only to the main thread, so this worker would never see SIGINT or "
            "SIGTERM. Run trio.run in the main thread, or pass handle_signals=False and cancel "
            "run_worker yourself to make it leave gracefully"
        )


async def watch_signals(
    request: LeaveRequest,
    work: trio.CancelScope,
    *,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Turn SIGINT and SIGTERM into a graceful leave, a second one into leaving at once.

    ``work`` is the scope the worker runs in: shielded once the worker holds anything (then
    the leave is asked for through ``request``); before that there is nothing to hand back,
    and cancelling it simply stops the startup. Started with ``nursery.start``: the signals
    are ours once it has started. Runs until cancelled.
    """
    with trio.open_signal_receiver(*SIGNALS) as received:
        task_status.started()
        async for number in received:
            name = signal.Signals(number).name
            if request.signal is None:
                request.signal = name
                logger.warning(
                    "%s received: leaving gracefully (handing splits back); send it again to "
                    "leave at once",
                    name,
                )
                request.event.set()
                if not work.shield:
                    work.cancel()  # still starting: nothing is held, so stop right here
            else:
                logger.warning(
                    "%s received again: leaving at once; splits not handed back yet move to "
                    "other workers when their leases expire",
                    name,
                )
                request.cut_short = True
                work.cancel()
