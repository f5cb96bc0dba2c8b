"""The ticker schedule: when the heartbeat, the reconcile listing and the replan come round.

The runtime owns the timers (Trio sleeps; the simulator's scheduler), but not their periods:
those are rules, and both runtimes must keep them alike or a simulated run would not show what
production does.

- The **heartbeat** comes every third of the lease (a lease key renewed then survives two
  missed beats), jittered per round by a hash of the process's seed into [0.8, 1.2) of that:
  workers started together would otherwise renew in lockstep and hit the store in bursts.
- The **reconcile** listing is the backstop for missed events, every
  ``Config.reconcile_interval``. When expiry does not reach watchers (NATS before 2.11), the
  listing is the only way a dead worker's expired leases are noticed, so it runs at least once
  per lease: otherwise failover would take the reconcile interval instead of a lease.
- The **replan** tick comes every ``Config.replan_interval`` (an open plan is asked again).
"""

from __future__ import annotations

from spate._config import Config
from spate._core.protocol import jitter

__all__ = ["heartbeat_delay", "reconcile_interval"]


def heartbeat_delay(seed: int, round_: int, lease: float) -> float:
    """Seconds until heartbeat number ``round_ + 1`` (counted from 0) of a process."""
    return jitter(seed, round_, lease / 3)


def reconcile_interval(config: Config, *, expiry_reaches_watchers: bool) -> float:
    """Seconds between reconcile listings, on a store that does or does not report expiries."""
    interval = config.reconcile_interval
    if not expiry_reaches_watchers and config.lease_duration is not None:
        interval = min(interval, config.lease_duration)
    return interval
