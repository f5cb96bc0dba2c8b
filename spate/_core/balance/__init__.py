"""Load-aware balancing: which running splits move, by measured load (docs/balancing.md).

- :mod:`.meter` — a split's smoothed load (:class:`LoadMeter`) and when it is trusted.
- :mod:`.model` — the round's inputs and outputs, and the config with its defaults' reasons.
- :mod:`.planner` — :func:`plan_balance_round`, the rules and the greedy that applies them;
  :func:`judge_loads`, each worker's load and mean as a round judges them (``spate status``).
- :mod:`.means` — each worker's mean (rule 2): a share per domain by capacity, around splits
  too heavy to share.
- :mod:`.requests` — which hot splits a round asks to split (rule 5), and the memory of pieces.
- :mod:`.candidates` — a donor's movable splits by affinity, and the searches in them.
- :mod:`.reading` — the fleet as one round reads it: each worker's load, mean and band, the
  potential every move lowers, the splits a donor may give.
- :mod:`.band_moves` — the round's greedy (rules 3 and 4): hottest donor to coldest receiver.
- :mod:`.exchange` — rule 4's exchanges: a donor's split for a lighter one of the receiver's.
- :mod:`.rescue` — rules 7 and 8: a worker no move within the bands helps is rescued.

Pure: no Trio, no I/O, no clock of its own.

How the leader calls it (:mod:`spate._core.leader.balance_rounds`, which hands the round's
:class:`~spate._core.leader.balance_rounds.RoundOutcome` back to the leadership to apply):

- every ``balance_interval``, with a round number that only grows. :class:`BalanceState` lives
  in the leader's memory, so after a failover a split the old leader just moved could move
  again at once: the leader runs no round until a full cooldown after its leadership began, by
  when every predecessor's cooldown has run out;
- workers from presence: ``lanes`` = the advertised ``max_in_flight``, ``capacity``, locality,
  ``joined_at`` (the leader's clock when it first saw the worker);
- splits from the assignment and the load summaries the owners carry on their renewals: a
  split's new owner measures it afresh (untrusted for a minute), so the leader keeps the last
  trusted load across a move until the new owner's is trusted (:mod:`.loads`), or the receiver
  would read as colder than it is;
- the moves become graceful revocations naming the target as the new assignee; the next
  state's ``moved`` is what placement holds (``held``) for the cooldown;
- placement's own steps weigh a split by the same load this module balances by
  (:mod:`spate._core.placement.split_load`), so the next membership change does not undo the
  moves made by load.
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
from spate._core.balance.planner import judge_loads, plan_balance_round

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
    "judge_loads",
    "plan_balance_round",
    "trust_window",
]
