"""Run the benchmark suite (docs/performance.md) and print one table: ``python -m bench``.

Every benchmark starts the servers it needs (etcd, nats-server) on free loopback ports and
stops them; every figure is a ratio against a baseline measured side by side in the same run.
``nox -s bench`` runs this, then the two adapter benchmarks (``bench/bench_etcd.py``,
``bench/bench_nats.py``).

Options: ``--only commit,failover,handover,scale,steady,cluster,fleet,makespan,balance,``
``balance-move,balance-runtime,kazoo`` picks benchmarks (``kazoo``: a fleet's client CPU per
commit beside kazoo's on ZooKeeper; it prints what to install and adds no row without kazoo
or ZooKeeper); ``--stores memory,etcd,nats`` picks stores; ``--quick`` shrinks every count (a
smoke run, not figures to quote); ``--markdown FILE`` also writes the table there.
``--profile`` prints where the CPU goes instead (``commit``: one commit on the memory store;
``balance-move``: one coordinator step of a move; see :mod:`bench.profile`).
"""

from __future__ import annotations

import argparse
import logging
import os
import platform
import subprocess
import time
from collections.abc import Callable

from bench import (
    balance,
    balance_move,
    balance_runtime,
    cluster,
    commit,
    failover,
    fleet,
    kazoo,
    makespan,
    scale,
    steady,
)
from bench import profile as profiling
from bench._harness import Options, Row, print_rows
from spate import __version__

SUITES: dict[str, Callable[[Options], list[Row]]] = {
    "commit": commit.run,
    "failover": failover.run,
    "handover": failover.run_handover,
    "scale": scale.run,
    "steady": steady.run,
    "cluster": cluster.run,
    "fleet": fleet.run,
    "makespan": makespan.run,
    "balance": balance.run,
    "balance-move": balance_move.run,
    "balance-runtime": balance_runtime.run,
    "kazoo": kazoo.run,
}


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n")[0])
    parser.add_argument("--only", default=",".join(SUITES), help="benchmarks to run")
    parser.add_argument("--stores", default="memory,etcd,nats", help="stores to measure")
    parser.add_argument("--quick", action="store_true", help="small counts: a smoke run")
    parser.add_argument("--markdown", default="", help="also write the table to this file")
    parser.add_argument(
        "--profile",
        action="store_true",
        help=f"print where the CPU goes instead ({', '.join(profiling.PROFILES)})",
    )
    args = parser.parse_args()
    chosen = [name.strip() for name in args.only.split(",") if name.strip()]
    unknown = [
        n for n in chosen if n not in SUITES and not (args.profile and n in profiling.PROFILES)
    ]
    if unknown:
        parser.error(f"unknown benchmark(s) {unknown}; choose from {sorted(SUITES)}")
    stores = tuple(s.strip() for s in args.stores.split(",") if s.strip())
    options = Options(stores=stores, quick=args.quick)
    # The coordinators log every expected event of a failover (a lost lease, a re-watch) as
    # a warning; the benchmark's own lines are what matter here.
    logging.basicConfig(level=logging.ERROR)
    print(f"spate {__version__} at {_revision()}, Python {platform.python_version()}", flush=True)
    if args.profile:
        profiled = [name for name in chosen if name in profiling.PROFILES]
        if not profiled:
            parser.error(f"--profile breaks down {sorted(profiling.PROFILES)}: pick with --only")
        for name in profiled:
            profiling.PROFILES[name](options)
        return
    rows: list[Row] = []
    began = time.monotonic()
    for name in chosen:
        print(f"== {name}", flush=True)
        started = time.monotonic()
        rows += SUITES[name](options)
        print(f"   ({time.monotonic() - started:.0f} s)", flush=True)
    text = print_rows(rows, title=f"Results ({time.monotonic() - began:.0f} s in all)")
    if args.markdown:
        with open(args.markdown, "w", encoding="utf-8") as out:
            out.write(text.strip() + "\n")


def _revision() -> str:
    """The checkout's commit (``-dirty`` with local changes): what the figures belong to."""
    try:
        found = subprocess.run(
            ["git", "describe", "--always", "--dirty"],
            capture_output=True,
            text=True,
            check=True,
            timeout=10,
            cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
        )
    except (OSError, subprocess.SubprocessError):
        return "an unknown revision"
    return found.stdout.strip() or "an unknown revision"


if __name__ == "__main__":
    main()
