"""Running seeds: one simulated fleet per scenario, checked.

:func:`run_seed` draws a scenario from a seed, runs it with :func:`run_scenario` and checks
the history. There are two engines:

``"machines"`` (the default)
    :func:`~spate_testing.sim._machines.simulate_machines`: the real coordination machines on
    a discrete-event scheduler of the simulator's own, with a model store. Their clocks and
    nonces are injected, the faults come from seeded generators, and what runs next is
    decided by due time and scheduling order alone, so a run is a pure function of its seed:
    it replays bit for bit, in any process. This is what ``python -m spate_testing.sim``
    runs and what a replay command replays.
``"trio"``
    :func:`~spate_testing.sim._fleet.simulate`: whole ``run_worker`` calls (the Trio runtime,
    the handlers, the memory store behind fault-injecting wrappers) in one Trio run under an
    autojumping ``MockClock``. It exercises everything the machine engine models, for real.
    The scenario, the faults and the nonces are still functions of the seed, but Trio
    shuffles each batch of runnable tasks on purpose and offers no public way to fix that
    order, so two runs of one seed may interleave differently. Nothing of Trio's is patched
    to hide it: a failing run reports its whole history instead.

Across processes, string hashing must be pinned too (``PYTHONHASHSEED=0``), which the
command line does for itself.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Literal, TypeAlias

import attrs
import trio
import trio.testing

from spate.store import Store
from spate_testing.sim._checker import Violation, check
from spate_testing.sim._fleet import SimRun, simulate
from spate_testing.sim._history import Action, Balanced, History
from spate_testing.sim._machines import simulate_machines
from spate_testing.sim._scenario import Scenario

__all__ = [
    "ENGINES",
    "Engine",
    "SeedResult",
    "SimHang",
    "replay_command",
    "run_checked",
    "run_scenario",
    "run_seed",
]

Engine: TypeAlias = Literal["machines", "trio"]
ENGINES: tuple[Engine, ...] = ("machines", "trio")
"""The simulator's engines: the replayable machine-level one first (the default)."""


def replay_command(seed: int, engine: Engine = "machines") -> str:
    """The one command that replays ``seed`` (on ``engine``)."""
    if engine == "machines":
        return f"nox -s sim -- --seed {seed}"
    return f"nox -s sim -- --seed {seed} --engine {engine}"


DEFAULT_WALL_BUDGET = 20.0
"""Wall-clock seconds one run may take before it is declared hung."""


class SimHang(BaseException):
    """A run exceeded its wall-clock budget: something spins without letting time pass.

    Under an autojumping clock, time only moves when every task waits; a task that retries
    without waiting freezes simulated time, so the run would never end.
    """


HUNG_EXIT = 3
"""Exit status of a process that gave up on a hung run (see ``on_hang``)."""


@contextmanager
def _wall_budget(seconds: float | None, on_expiry: Callable[[], None] | None) -> Iterator[None]:
    if seconds is None or threading.current_thread() is not threading.main_thread():
        yield
        return
    over = False

    def expire(signum: int, frame: object) -> None:
        if over:
            return
        if on_expiry is not None:
            on_expiry()
        # The first raise lands in whatever task runs; if the spinning tasks sit under a
        # shield they survive it, so the alarm keeps firing until one of them is hit.
        raise SimHang(f"the run took more than {seconds:g} s of wall-clock time")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds, 0.2)
    try:
        yield
    finally:
        over = True
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def run_scenario(
    scenario: Scenario,
    *,
    engine: Engine = "machines",
    wall_budget: float | None = DEFAULT_WALL_BUDGET,
    history: History | None = None,
    on_expiry: Callable[[], None] | None = None,
    wrap_store: Callable[[Store], Store] | None = None,
) -> SimRun:
    """Run ``scenario`` on ``engine`` (see the module docstring).

    Raises :class:`SimHang` if the run takes more than ``wall_budget`` seconds of real time
    (``history``, if given, then holds what happened until then). ``on_expiry`` is called
    first, from the signal handler (a process that cannot trust its state afterwards can
    report and exit there). ``wrap_store`` wraps each worker's store client, on the Trio
    engine only (the machine engine has no store clients: its store is a model).
    """
    if engine not in ENGINES:
        raise ValueError(f"unknown engine {engine!r}; the engines are {list(ENGINES)}")
    if engine == "machines":
        if wrap_store is not None:
            raise ValueError(
                "wrap_store needs store clients, which only the Trio engine has; pass engine='trio'"
            )
        try:
            with _wall_budget(wall_budget, on_expiry):
                return simulate_machines(scenario, history)
        except SimHang:
            raise
        except BaseException as exc:
            hang = _find_hang(exc)
            if hang is not None:
                raise SimHang(str(hang)) from exc
            raise
    clock = trio.testing.MockClock(autojump_threshold=0)
    try:
        with _wall_budget(wall_budget, on_expiry):
            return trio.run(simulate, scenario, history, wrap_store, clock=clock)
    except BaseException as exc:
        hang = _find_hang(exc)
        if hang is not None and hang is not exc:
            raise SimHang(f"{hang} (at simulated t={clock.current_time():.3f})") from exc
        if hang is not None:
            raise SimHang(f"{hang} (at simulated t={clock.current_time():.3f})") from None
        raise


def _find_hang(exc: BaseException | None) -> SimHang | None:
    # The alarm may fire inside a task (then nurseries wrap it in groups) or inside Trio's
    # own loop (then it comes out as the cause of a TrioInternalError).
    seen = 0
    while exc is not None and seen < 20:
        seen += 1
        if isinstance(exc, SimHang):
            return exc
        if isinstance(exc, BaseExceptionGroup):
            for inner in exc.exceptions:
                found = _find_hang(inner)
                if found is not None:
                    return found
            return None
        exc = exc.__cause__ or exc.__context__
    return None


@attrs.frozen
class SeedResult:
    """One checked run: its seed, what broke (empty when clean) and what it covered."""

    seed: int
    violations: tuple[Violation, ...]
    digest: str
    faults: dict[str, int]
    sim_seconds: float
    wall_seconds: float
    events: int
    history: History = attrs.field(repr=False, eq=False)
    splits: dict[str, int] = attrs.field(factory=dict)
    """How its split calls ended, by outcome (``split``, ``fenced``, ``abandoned``, ``asked``)."""
    balance: dict[str, int] = attrs.field(factory=dict)
    """The leaders' balance rounds and their moves (``rounds``, ``moves``; empty: none ran)."""

    @property
    def ok(self) -> bool:
        """Whether the run was clean."""
        return not self.violations


def crashes(history: History) -> list[Violation]:
    """Workers that died of an error the scenario did not cause, as violations."""
    return [
        Violation("crash", f"{a.actor} at t={a.at:.3f}: {a.detail}")
        for a in history.of(Action)
        if a.what == "crash"
    ]


def check_run(run: SimRun, scenario: Scenario, wall: float) -> SeedResult:
    """Check a finished run and summarise it."""
    violations = [*check(run.history), *crashes(run.history)]
    return SeedResult(
        seed=scenario.seed,
        violations=tuple(violations),
        digest=run.history.digest(),
        faults=run.faults,
        sim_seconds=run.seconds,
        wall_seconds=wall,
        events=len(run.history),
        history=run.history,
        splits=run.splits,
        balance=_balance_counts(run.history),
    )


def _balance_counts(history: History) -> dict[str, int]:
    rounds = history.of(Balanced)
    if not rounds:
        return {}
    return {"rounds": len(rounds), "moves": sum(len(r.moves) for r in rounds)}


def run_seed(
    seed: int,
    *,
    engine: Engine = "machines",
    wall_budget: float | None = DEFAULT_WALL_BUDGET,
    on_hang: Callable[[SeedResult], None] | None = None,
) -> SeedResult:
    """Draw the scenario of ``seed``, run it on ``engine``, and check its history."""
    return run_checked(
        Scenario.from_seed(seed), engine=engine, wall_budget=wall_budget, on_hang=on_hang
    )


def run_checked(
    scenario: Scenario,
    *,
    engine: Engine = "machines",
    wall_budget: float | None = DEFAULT_WALL_BUDGET,
    on_hang: Callable[[SeedResult], None] | None = None,
    wrap_store: Callable[[Store], Store] | None = None,
) -> SeedResult:
    """Run ``scenario`` on ``engine`` and check its history; a hung run is a violation.

    ``wrap_store`` wraps every worker's store client (Trio engine only, see :func:`simulate`).

    With ``on_hang``, a hung run is handed to it and the process exits with
    :data:`HUNG_EXIT` (a run abandoned mid-flight can leave tasks no cancellation reaches;
    only a process exit ends them for sure). Without it, the run is abandoned in-process.
    """
    started = time.perf_counter()
    history = History(job=scenario.job, seed=scenario.seed)

    def hung(reason: str) -> SeedResult:
        return SeedResult(
            seed=scenario.seed,
            violations=(Violation("hang", reason),),
            digest="",
            faults={},
            sim_seconds=0.0,
            wall_seconds=time.perf_counter() - started,
            events=len(history),
            history=history,
        )

    def give_up() -> None:
        if on_hang is not None:
            on_hang(hung(f"the run took more than {wall_budget:g} s of wall-clock time"))
            os._exit(HUNG_EXIT)

    try:
        run = run_scenario(
            scenario,
            engine=engine,
            wall_budget=wall_budget,
            history=history,
            on_expiry=give_up,
            wrap_store=wrap_store,
        )
    except SimHang as exc:
        return hung(str(exc))
    return check_run(run, scenario, time.perf_counter() - started)
