"""``python -m spate_testing.sim``: run many seeds (in parallel processes) or replay one.

Examples::

    python -m spate_testing.sim --seeds 1000            # seeds 0..999 on every core
    python -m spate_testing.sim --seeds 100000 --start 5000
    python -m spate_testing.sim --seed 42               # replay one seed, verbosely
    python -m spate_testing.sim --seed 42 --history h.jsonl
    python -m spate_testing.sim --seeds 300 --engine trio   # whole run_worker calls on Trio
    python -m spate_testing.sim --scale                 # 1,000 workers x 100,000 splits, counted
    python -m spate_testing.sim --scale --workers 100 --splits 10000

The default engine drives the coordination machines on the simulator's own discrete-event
scheduler: a seed replays bit for bit. ``--engine trio`` runs the real Trio runtime instead
(see :mod:`spate_testing.sim._runner` for what that one can and cannot replay).

A failing seed prints its violations and the one command that replays it. The exit status
is 0 when every seed was clean, 1 otherwise.
"""

from __future__ import annotations

import argparse
import collections
import json
import logging
import os
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any

from spate_testing.sim._history import Action, Revocations, Split, Verdict
from spate_testing.sim._runner import (
    DEFAULT_WALL_BUDGET,
    ENGINES,
    HUNG_EXIT,
    Engine,
    SeedResult,
    replay_command,
    run_seed,
)

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m spate_testing.sim",
        description="Simulate seeded fleets of spate workers with injected faults and check "
        "every history against the protocol's invariants.",
    )
    parser.add_argument("--seeds", type=int, default=1000, help="how many seeds (default 1000)")
    parser.add_argument("--start", type=int, default=0, help="first seed (default 0)")
    parser.add_argument("--seed", type=int, help="replay this one seed and show it in detail")
    parser.add_argument(
        "--jobs", type=int, default=os.cpu_count() or 1, help="processes (default: all cores)"
    )
    parser.add_argument(
        "--engine",
        choices=ENGINES,
        default="machines",
        help="machines (default: the replayable discrete-event engine) or trio (the runtime)",
    )
    parser.add_argument("--history", help="with --seed: write the history here (JSON lines)")
    parser.add_argument("--verbose", action="store_true", help="show the workers' logs")
    parser.add_argument(
        "--wall-budget",
        type=float,
        default=DEFAULT_WALL_BUDGET,
        help=f"wall-clock seconds before a run counts as hung (default {DEFAULT_WALL_BUDGET:g})",
    )
    parser.add_argument(
        "--scale",
        action="store_true",
        help="run the fleet-scale scenario (spate_testing.sim._scale) and print its counts",
    )
    parser.add_argument("--workers", type=int, default=1000, help="with --scale (default 1000)")
    parser.add_argument("--splits", type=int, default=100_000, help="with --scale (default 100000)")
    parser.add_argument(
        "--max-in-flight", type=int, default=100, help="with --scale: per worker (default 100)"
    )
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--stop", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--stride", type=int, default=1, help=argparse.SUPPRESS)
    return parser


def _pin_hash_seed(argv: Sequence[str]) -> None:
    # String hashing decides set iteration order inside the coordinator; without a fixed
    # hash seed, one seed could take a different path in another process.
    if os.environ.get("PYTHONHASHSEED") != "0":
        env = dict(os.environ, PYTHONHASHSEED="0")
        args = [sys.executable, "-m", "spate_testing.sim", *argv]
        sys.stdout.flush()
        sys.stderr.flush()
        os.execve(sys.executable, args, env)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status."""
    args_list = list(sys.argv[1:] if argv is None else argv)
    _pin_hash_seed(args_list)
    args = _parser().parse_args(args_list)
    logging.basicConfig(
        level=logging.WARNING if args.verbose else logging.CRITICAL + 1,
        format="%(levelname)s %(name)s: %(message)s",
    )
    if args.scale:
        return _scale(args.workers, args.splits, args.max_in_flight)
    if args.seed is not None:
        return _replay(args.seed, args.history, args.wall_budget, args.engine)
    if args.child:
        return _child(args.start, args.stop, args.stride, args.wall_budget, args.engine)
    if args.seeds < 1 or args.jobs < 1:
        print("--seeds and --jobs must be at least 1", file=sys.stderr)
        return 2
    return _many(args.start, args.seeds, min(args.jobs, args.seeds), args.wall_budget, args.engine)


def _scale(workers: int, splits: int, max_in_flight: int) -> int:
    from spate_testing.sim._scale import ScaleSpec, run_scale

    spec = ScaleSpec(workers=workers, splits=splits, max_in_flight=max_in_flight)
    report = run_scale(spec, progress=lambda line: print(f"... {line}", flush=True))
    for line in report.lines:
        print(line)
    print(
        f"{workers:,} workers x {splits:,} splits: {report.sim_seconds:.1f} s simulated in "
        f"{report.wall_seconds:.1f} s wall"
    )
    return 0 if report.done else 1


def _replay(seed: int, history_path: str | None, wall_budget: float, engine: Engine) -> int:
    result = run_seed(seed, engine=engine, wall_budget=wall_budget)
    print(
        f"seed {seed}: {len(result.history)} events, {result.sim_seconds:.1f} s simulated, "
        f"{result.wall_seconds:.2f} s wall, digest {result.digest[:16]}"
    )
    print("faults: " + (", ".join(f"{k}={v}" for k, v in result.faults.items()) or "none"))
    if result.splits:
        print("split calls: " + ", ".join(f"{k}={v}" for k, v in result.splits.items()))
    if result.balance:
        print("balance: " + ", ".join(f"{k}={v}" for k, v in result.balance.items()))
    if history_path:
        with open(history_path, "w", encoding="utf-8") as f:
            f.write(result.history.to_jsonl())
        print(f"history written to {history_path}")
    for event in result.history:
        if isinstance(event, Action | Verdict | Split):
            print(f"  t={event.at:8.3f} {_line(event)}")
    ended = {e.actor for e in result.history.of(Revocations)}
    started = [a.actor for a in result.history.of(Action) if a.what in _STARTS]
    unended = [actor for actor in started if actor not in ended]
    if unended:
        print(f"  still running at the end: {', '.join(unended)}")
    for violation in result.violations:
        print(f"  VIOLATION {violation}")
    if not result.ok:
        print(f"seed {seed} FAILED; replay with: {replay_command(seed, engine)}")
        return 1
    print(f"seed {seed} ok")
    return 0


_STARTS = frozenset({"start", "restart", "duplicate"})


def _line(event: Action | Verdict | Split) -> str:
    if isinstance(event, Split):
        said = f"-> {event.residual_id}" if event.residual_id else event.outcome
        asked = " (asked)" if event.asked else ""
        return (
            f"{event.actor}: split {event.split}@{event.epoch} into "
            f"{event.primary.decode()} + {event.residual.decode()}{asked} {said}"
        )
    if isinstance(event, Verdict):
        said = (
            "AllComplete"
            if event.all_complete
            else f"Stalled(completed={event.completed}, quarantined={event.quarantined})"
        )
        return f"{event.actor}: verdict {said}"
    return f"{event.actor}: {event.what} {event.detail}".rstrip()


def _summary(result: SeedResult) -> dict[str, Any]:
    return {
        "seed": result.seed,
        "violations": [str(v) for v in result.violations],
        "digest": result.digest,
        "faults": result.faults,
        "splits": result.splits,
        "balance": result.balance,
        "sim_seconds": result.sim_seconds,
        "wall_seconds": result.wall_seconds,
    }


def _report(result: SeedResult) -> None:
    print(json.dumps(_summary(result)), flush=True)


def _child(start: int, stop: int, stride: int, wall_budget: float, engine: Engine) -> int:
    # A hung run is reported and this process exits (see run_checked); the parent starts a
    # fresh one for the remaining seeds.
    for seed in range(start, stop, stride):
        print(json.dumps({"running": seed}), flush=True)
        try:
            result = run_seed(seed, engine=engine, wall_budget=wall_budget, on_hang=_report)
        except Exception as exc:  # a crash of the simulator itself is a finding too
            line = {"seed": seed, "violations": [f"[sim-error] {type(exc).__name__}: {exc}"]}
            print(json.dumps(line), flush=True)
            return HUNG_EXIT
        _report(result)
    return 0


class _Tally:
    def __init__(self, total: int, engine: Engine) -> None:
        self.total = total
        self.engine = engine
        self.done = 0
        self.sim_seconds = 0.0
        self.faults: collections.Counter[str] = collections.Counter()
        self.splits: collections.Counter[str] = collections.Counter()
        self.split_seeds = 0
        self.balance: collections.Counter[str] = collections.Counter()
        self.balance_seeds = 0
        self.failures: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        self.last_report = time.monotonic()

    def add(self, line: dict[str, Any]) -> None:
        with self.lock:
            self.done += 1
            self.sim_seconds += line.get("sim_seconds", 0.0)
            self.faults.update(line.get("faults", {}))
            splits = line.get("splits", {})
            self.splits.update(splits)
            self.split_seeds += bool(splits)
            balance = line.get("balance", {})
            self.balance.update(balance)
            self.balance_seeds += bool(balance)
            if line["violations"]:
                self.failures.append(line)
                print(f"seed {line['seed']} FAILED:", flush=True)
                for v in line["violations"][:5]:
                    print(f"  {v}", flush=True)
                print(f"  replay with: {replay_command(line['seed'], self.engine)}", flush=True)
            if time.monotonic() - self.last_report > 15:
                self.last_report = time.monotonic()
                print(f"... {self.done}/{self.total} seeds", flush=True)


def _slot(slot: int, start: int, stop: int, stride: int, wall_budget: float, tally: _Tally) -> None:
    """Run seeds start, start+stride, ... < stop in child processes, restarting after hangs."""
    next_seed = start
    while next_seed < stop:
        argv = [
            sys.executable, "-m", "spate_testing.sim", "--child",
            "--start", str(next_seed), "--stop", str(stop), "--stride", str(stride),
            "--wall-budget", str(wall_budget), "--engine", tally.engine,
        ]  # fmt: skip
        child = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
        assert child.stdout is not None
        running: int | None = None
        for raw in child.stdout:
            line = json.loads(raw)
            if "running" in line:
                running = line["running"]
                continue
            running = None
            next_seed = line["seed"] + stride
            tally.add(line)
        child.wait()
        if running is not None:
            tally.add(
                {
                    "seed": running,
                    "violations": [
                        f"[sim-error] the simulator process died (exit {child.returncode})"
                    ],
                }
            )
            next_seed = running + stride
        elif child.returncode not in (0, HUNG_EXIT):
            tally.add({"seed": next_seed, "violations": [f"[sim-error] exit {child.returncode}"]})
            next_seed += stride


def _many(start: int, count: int, jobs: int, wall_budget: float, engine: Engine) -> int:
    started = time.perf_counter()
    tally = _Tally(count, engine)
    stop = start + count
    threads = [
        threading.Thread(target=_slot, args=(slot, start + slot, stop, jobs, wall_budget, tally))
        for slot in range(jobs)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    wall = time.perf_counter() - started
    print(
        f"{tally.done} seeds ({start}..{stop - 1}) on the {engine} engine in {wall:.1f} s wall "
        f"with {jobs} process(es); {tally.sim_seconds / 3600:.2f} simulated hours"
    )
    print("faults injected: " + ", ".join(f"{k}={v}" for k, v in sorted(tally.faults.items())))
    if tally.splits:
        print(
            f"split calls in {tally.split_seeds} seed(s): "
            + ", ".join(f"{k}={v}" for k, v in sorted(tally.splits.items()))
        )
    if tally.balance:
        print(
            f"balance rounds in {tally.balance_seeds} seed(s): "
            + ", ".join(f"{k}={v}" for k, v in sorted(tally.balance.items()))
        )
    if tally.failures:
        seeds = sorted(f["seed"] for f in tally.failures)
        print(f"{len(seeds)} seed(s) FAILED: {seeds[:20]}{' ...' if len(seeds) > 20 else ''}")
        print(f"replay the first with: {replay_command(seeds[0], engine)}")
        return 1
    if tally.done != count:
        print(f"only {tally.done} of {count} seeds reported")
        return 1
    print("no violations")
    return 0
