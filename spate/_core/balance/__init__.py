"""Load-aware balancing: which running splits move, by measured load (issue 35).

- :mod:`.meter` — a split's smoothed load (:class:`LoadMeter`) and when it is trusted.
- :mod:`.model` — the round's inputs and outputs, and the config with its defaults' reasons.
- :mod:`.planner` — :func:`plan_balance_round`, the rules and the greedy that applies them.
- :mod:`.candidates` — a donor's movable splits by affinity, and the searches in them.

Pure: no Trio, no I/O, no clock of its own.
"""

from spate._core.balance.meter import MIN_TRUST_WINDOW, LoadMeter, check_amount, trust_window
from spate._core.balance.model import (
    BalanceConfig,
    BalanceRound,
    BalanceSplit,
    BalanceState,
    BalanceWorker,
    Move,
)
from spate._core.balance.planner import plan_balance_round, weight_units

__all__ = [
    "MIN_TRUST_WINDOW",
    "BalanceConfig",
    "BalanceRound",
    "BalanceSplit",
    "BalanceState",
    "BalanceWorker",
    "LoadMeter",
    "Move",
    "check_amount",
    "plan_balance_round",
    "trust_window",
    "weight_units",
]
