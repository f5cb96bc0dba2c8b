"""A new leader honours its predecessor's balance cooldowns (docs/balancing.md).

The rounds' state (which split moved in which round) lives in the leader's memory, so a new
leader starts with none: without the rule, a split the old leader just moved could move again
in the new leader's first round. The rule (``spate._core.leader.balance_rounds``): a new leader runs
no balance round until a full cooldown (``cooldown_rounds`` x ``balance_interval``) after its
leadership began; the job's first leader (generation 1) has no predecessor and begins one
interval in.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import cast

from spate._config import Config
from spate._core.balance import BalanceConfig
from spate._core.host import Host
from spate._core.leader.balance_rounds import LoadBalancer, balance_config
from spate._core.records import PresenceRecord, ProgressRecord, SpecRecord, SplitLoad
from spate._core.view.split_table import SplitState

INTERVAL = 60.0
COOLDOWN = BalanceConfig().cooldown_rounds * INTERVAL


class World:
    """The view a leader balances from: who holds which split, and the loads they report."""

    def __init__(self) -> None:
        self.config = Config(balance_interval=INTERVAL, max_moved_load=0.5, max_in_flight=8)
        self.view = SimpleNamespace(presence={}, splits={})
        self.moved: list[str] = []
        self.host = SimpleNamespace(
            config=self.config,
            view=self.view,
            metrics=SimpleNamespace(balance=lambda report: None),
            placement_changes=SimpleNamespace(
                split_moved=lambda split: None, splits_moved=lambda splits: None
            ),
        )

    def hold(self, placement: dict[str, tuple[str, ...]], loads: dict[str, float]) -> None:
        """``placement``: worker -> its splits; ``loads``: the trusted ones' loads (the rest
        are measured but not trusted yet)."""
        self.view.presence = {
            worker: PresenceRecord(
                nonce=worker,
                max_in_flight=8,
                loads=tuple(SplitLoad(split=s, rate=loads[s]) for s in splits if s in loads),
                untrusted=sum(1 for s in splits if s not in loads),
            )
            for worker, splits in placement.items()
        }
        self.view.splits = {
            split: SplitState(
                progress=ProgressRecord(id=split, epoch=1, owner=worker),
                progress_rev=1,
                spec=SpecRecord(id=split),
            )
            for worker, splits in placement.items()
            for split in splits
        }

    def leader(self) -> LoadBalancer:
        return LoadBalancer(cast(Host, self.host))

    def run(self, leader: LoadBalancer, until: float) -> list[tuple[float, str]]:
        """Step ``leader`` at each deadline up to ``until``; the (time, split) of its moves."""
        moves: list[tuple[float, str]] = []
        while (at := leader.next_deadline()) is not None and at <= until:
            outcome = leader.step(at)
            if outcome is not None:
                moves.extend((at, m.split) for m in outcome.decision.moves)
        return moves


# x is the one trusted split: whoever holds it holds three untrusted splits besides, and so is
# hot, while the other holds one. Each round that may move x moves it to the other.
BEFORE = {"a": ("x", "u1", "u2", "u3"), "b": ("u4",)}
AFTER = {"a": ("u1",), "b": ("x", "u2", "u3", "u4")}
LOADS = {"x": 1.0}


def test_a_new_leader_does_not_move_a_split_within_the_old_leaders_cooldown() -> None:
    world = World()
    world.hold(BEFORE, LOADS)
    old = world.leader()
    old.began_leading(0.0, first=True)
    assert world.run(old, INTERVAL) == [(INTERVAL, "x")]  # the first round moves x to b
    old.stop()  # the old leader fails over right after it
    world.hold(AFTER, LOADS)  # x landed on b, which is now the hot one
    new = world.leader()
    began = INTERVAL + 1.0
    new.began_leading(began)
    moves = world.run(new, began + 2 * COOLDOWN)
    assert moves  # it does move x back once the cooldown allows
    assert all(at - INTERVAL >= COOLDOWN for at, _ in moves), moves
    # its first round comes a full cooldown after its leadership began
    assert moves[0][0] == began + COOLDOWN


def test_the_jobs_first_leader_begins_one_interval_in() -> None:
    world = World()
    world.hold(BEFORE, LOADS)
    first, successor = world.leader(), world.leader()
    first.began_leading(10.0, first=True)
    successor.began_leading(10.0)
    assert first.next_deadline() == 10.0 + INTERVAL
    assert successor.next_deadline() == 10.0 + COOLDOWN


def test_the_recorders_cooldown_is_the_rounds() -> None:
    # The simulator's recorder reads the same knobs the rounds run with.
    config = balance_config(Config(balance_interval=2.0, max_moved_load=0.25))
    assert (config.cooldown_rounds * config.balance_interval, config.max_moved_load) == (6.0, 0.25)
