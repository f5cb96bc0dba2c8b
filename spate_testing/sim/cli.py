"""``python -m spate_testing.sim``: run many seeds (in parallel processes) or replay one.

Examples::

    python -m spate_testing.sim --seeds 1000            # seeds 0..999 on every core
    python -m spate_testing.sim --seeds 100000 --start 5000
    python -m spate_testing.sim --seed 42               # replay one seed, verbosely
    python -m spate_testing.sim --seed 42 --history h.jsonl

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
from typing import IO, Any

from spate_testing.sim.history import Action, Verdict
from spate_testing.sim.runner import SeedResult, replay_command, run_seed

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
    parser.add_argument("--history", help="with --seed: write the history here (JSON lines)")
    parser.add_argument("--verbose", action="store_true", help="show the workers' logs")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
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
    if args.seed is not None:
        return _replay(args.seed, args.history)
    if args.child:
        return _child(args.start, args.seeds, args.stride)
    if args.seeds < 1 or args.jobs < 1:
        print("--seeds and --jobs must be at least 1", file=sys.stderr)
        return 2
    return _many(args.start, args.seeds, min(args.jobs, args.seeds))


def _replay(seed: int, history_path: str | None) -> int:
    result = run_seed(seed)
    print(
        f"seed {seed}: {len(result.history)} events, {result.sim_seconds:.1f} s simulated, "
        f"{result.wall_seconds:.2f} s wall, digest {result.digest[:16]}"
    )
    print("faults: " + (", ".join(f"{k}={v}" for k, v in result.faults.items()) or "none"))
    if history_path:
        with open(history_path, "w", encoding="utf-8") as f:
            f.write(result.history.to_jsonl())
        print(f"history written to {history_path}")
    for event in result.history:
        if isinstance(event, Action | Verdict):
            print(f"  t={event.at:8.3f} {_line(event)}")
    for violation in result.violations:
        print(f"  VIOLATION {violation}")
    if not result.ok:
        print(f"seed {seed} FAILED; replay with: {replay_command(seed)}")
        return 1
    print(f"seed {seed} ok")
    return 0


def _line(event: Action | Verdict) -> str:
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
        "sim_seconds": result.sim_seconds,
        "wall_seconds": result.wall_seconds,
    }


def _child(start: int, count: int, stride: int) -> int:
    for seed in range(start, start + count, stride):
        print(json.dumps({"running": seed}), flush=True)
        try:
            result = run_seed(seed)
        except Exception as exc:  # a crash of the simulator itself is a finding too
            line = {"seed": seed, "violations": [f"[sim-error] {type(exc).__name__}: {exc}"]}
            print(json.dumps(line), flush=True)
            continue
        print(json.dumps(_summary(result)), flush=True)
    return 0


class _Tally:
    def __init__(self, total: int) -> None:
        self.total = total
        self.done = 0
        self.sim_seconds = 0.0
        self.faults: collections.Counter[str] = collections.Counter()
        self.failures: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        self.last_report = time.monotonic()

    def add(self, line: dict[str, Any]) -> None:
        with self.lock:
            self.done += 1
            self.sim_seconds += line.get("sim_seconds", 0.0)
            self.faults.update(line.get("faults", {}))
            if line["violations"]:
                self.failures.append(line)
                print(f"seed {line['seed']} FAILED:", flush=True)
                for v in line["violations"][:5]:
                    print(f"  {v}", flush=True)
                print(f"  replay with: {replay_command(line['seed'])}", flush=True)
            if time.monotonic() - self.last_report > 15:
                self.last_report = time.monotonic()
                print(f"... {self.done}/{self.total} seeds", flush=True)


def _pump(stream: IO[str], tally: _Tally, running: dict[int, int], slot: int) -> None:
    for raw in stream:
        line = json.loads(raw)
        if "running" in line:
            running[slot] = line["running"]
        else:
            running.pop(slot, None)
            tally.add(line)


def _many(start: int, count: int, jobs: int) -> int:
    started = time.perf_counter()
    tally = _Tally(count)
    running: dict[int, int] = {}
    children = []
    threads = []
    for slot in range(jobs):
        argv = [
            sys.executable, "-m", "spate_testing.sim", "--child",
            "--start", str(start + slot), "--seeds", str(count - slot), "--stride", str(jobs),
        ]  # fmt: skip
        child = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
        assert child.stdout is not None
        thread = threading.Thread(target=_pump, args=(child.stdout, tally, running, slot))
        thread.start()
        children.append(child)
        threads.append(thread)
    status = 0
    for slot, (child, thread) in enumerate(zip(children, threads, strict=True)):
        child.wait()
        thread.join()
        if child.returncode != 0:
            seed = running.get(slot)
            print(
                f"simulator process {slot} died (exit {child.returncode}) while running seed "
                f"{seed}; replay with: {replay_command(seed) if seed is not None else '?'}"
            )
            status = 1
    wall = time.perf_counter() - started
    print(
        f"{tally.done} seeds ({start}..{start + count - 1}) in {wall:.1f} s wall with {jobs} "
        f"process(es); {tally.sim_seconds / 3600:.2f} simulated hours"
    )
    print("faults injected: " + ", ".join(f"{k}={v}" for k, v in sorted(tally.faults.items())))
    if tally.failures:
        seeds = [f["seed"] for f in tally.failures]
        print(f"{len(seeds)} seed(s) FAILED: {seeds[:20]}{' ...' if len(seeds) > 20 else ''}")
        print(f"replay the first with: {replay_command(seeds[0])}")
        return 1
    if tally.done != count:
        print(f"only {tally.done} of {count} seeds reported")
        return 1
    print("no violations")
    return status
