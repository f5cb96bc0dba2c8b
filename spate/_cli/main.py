"""The ``spate`` command line (also ``python -m spate``).

Commands: ``demo`` (the main job on the embedded memory store), ``worker`` (one real worker
process of the demo's job, not of a job of yours), ``status``, ``requeue``, ``repair``,
``delete`` and ``reset-ttl`` (operator tools), ``conformance`` (the store conformance suite
against a deployed store). Ctrl-C leaves gracefully: splits are handed back and the process
waits, bounded, until they are held elsewhere; a second Ctrl-C leaves at once.

Every command's store URL comes from ``--store`` or, without it, from the ``SPATE_STORE``
environment variable (the demo then falls back to its embedded memory store; the other
commands refuse to guess), so credentials need not sit in ``ps`` output and shell history.

Nothing this command prints names a password or token: store URLs are shown through
:func:`spate_stores.redact_url`, and whatever it prints on an error is also scrubbed of the
secrets its own ``--store`` URL carries.
"""

from __future__ import annotations

import argparse
import importlib.util
import io
import logging
import os
import signal
import sys
import traceback
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any

import trio

from spate._errors import ConfigError, SpateError
from spate._groups import single_error
from spate._install import install_hint
from spate._quote import seconds
from spate._version import __version__

__all__ = ["build_parser", "main"]

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_STALLED = 3
EXIT_BROKEN_PIPE = 141
"""What a shell reports for a command killed by SIGPIPE (128 + 13): the reader of its output
went away (``spate status --json | head -1``), so the rest was not wanted."""

STORE_ENV = "SPATE_STORE"
"""The environment variable every command reads its store URL from when ``--store`` is not
given: credentials in a command line show in ``ps`` and shell history, an environment does not."""
_FROM_ENV = f"(default: ${STORE_ENV})"
_DEMO_STORE = "memory://"


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``spate`` command."""
    parser = argparse.ArgumentParser(
        prog="spate",
        description="Share one job's work safely across a fleet of Trio workers.",
        epilog=f"Every command takes its store URL from --store or, without it, from the "
        f"{STORE_ENV} environment variable (which keeps credentials out of `ps` and shell "
        "history).",
    )
    parser.add_argument(
        "--version", action="version", version=f"spate {__version__}", help="print the version"
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    demo = commands.add_parser(
        "demo",
        help="run a checkable backfill on an in-process fleet, with injected trouble",
        description="Run the demo job: a fleet of in-process workers backfills a synthetic "
        "dataset while workers are killed, frozen, scaled down and added, and one split is "
        "poisoned; a straggler split many times longer than the rest is split for the idle "
        "lanes at the end. The result is checked against a single-pass computation, and the "
        "job's length against the least it would have taken without splitting.",
    )
    demo.add_argument(
        "--store", help=f"store URL (default: ${STORE_ENV} if set, else the embedded memory://)"
    )
    demo.add_argument("--workers", type=int, default=4, help="workers at the start (default 4)")
    demo.add_argument("--splits", type=int, default=64, help="splits in the job (default 64)")
    demo.add_argument("--seed", type=int, default=1, help="makes a run repeatable (default 1)")
    demo.add_argument("--no-chaos", action="store_true", help="inject no trouble")
    demo.add_argument(
        "--duration", type=float, default=20.0, help="target length in seconds (default 20)"
    )
    demo.add_argument(
        "--plain", action="store_true", help="plain progress lines even on a terminal"
    )
    demo.add_argument("--otlp-endpoint", help="export traces and metrics over OTLP/HTTP here")

    worker = commands.add_parser(
        "worker",
        help="run one worker of the demo's job (the demo's synthetic backfill, not a job of "
        "yours) against a real store",
        description="One worker process of the demo's job: the synthetic backfill `spate demo` "
        "runs, with its planner and handler built in. Start several (in terminals or under a "
        "supervisor) against etcd or NATS to see a real fleet work it. It does not run a job "
        "of yours: for that, call spate.run_worker with your own planner and handler.",
    )
    worker.add_argument("--store", help=f"store URL, e.g. etcd://127.0.0.1:2379 {_FROM_ENV}")
    worker.add_argument("--job", default="spate-demo", help="job name (default spate-demo)")
    worker.add_argument("--instance", help="instance id (default: the host name)")
    worker.add_argument(
        "--splits", type=int, default=64, help="splits in the demo's job (default 64)"
    )
    worker.add_argument(
        "--seed",
        type=int,
        default=1,
        help="the demo dataset's seed; every worker of one job must use the same (default 1)",
    )
    worker.add_argument(
        "--batch-seconds", type=float, default=0.05, help="pretend work time per 50 records"
    )
    worker.add_argument(
        "--max-in-flight", type=int, default=4, help="splits held at once (default 4)"
    )
    worker.add_argument(
        "--locality",
        default="",
        help="this worker's failure domain, coarsest tier first (e.g. zone-a/rack-3/host-7)",
    )
    worker.add_argument(
        "--crash-on",
        action="append",
        default=[],
        metavar="SPLIT",
        help="testing: exit at once (status 70) on gaining this split, before any commit",
    )
    worker.add_argument(
        "--history", help="append one JSON line per acknowledged commit to this file"
    )
    worker.add_argument(
        "--metrics-port",
        metavar="[HOST:]PORT",
        help="serve Prometheus metrics at http://HOST:PORT/metrics (HOST: all interfaces if "
        "omitted; PORT 0 picks a free one); needs the otel extra",
    )
    worker.add_argument(
        "--log-http",
        action="store_true",
        help="also log every HTTP request the store client makes (httpx's INFO lines; off by "
        "default: they would be nearly all of the log)",
    )

    status = commands.add_parser(
        "status",
        help="show a job as an operator needs it",
        description="Show a job's plan, leader, live workers and splits (quarantined first, "
        "with the reason each failed). Writes nothing: the store is opened read-only, "
        "whatever TTL its namespace was made with. Exits 2 when the store holds no such job, "
        "naming the jobs it does hold.",
    )
    status.add_argument("--store", help=f"store URL {_FROM_ENV}")
    status.add_argument("--job", required=True, help="job name")
    status.add_argument("--watch", action="store_true", help="refresh until Ctrl-C")
    status.add_argument("--json", action="store_true", help="one JSON document, for scripts")
    status.add_argument("--interval", type=float, default=1.0, help="--watch refresh seconds")
    status.add_argument(
        "--isolation-tier",
        type=int,
        default=0,
        help="locality tier whose failure domains to show (default 0, the coarsest)",
    )
    status.add_argument(
        "--load-band",
        type=float,
        default=0.10,
        help="the band workers' loads are judged by: the fleet's Config.load_band (default 0.10)",
    )

    requeue = commands.add_parser(
        "requeue",
        help="return quarantined splits to the queue",
        description="Return quarantined splits to the queue (attempts reset): the ones named, "
        "or every quarantined split of the job with --all.",
    )
    requeue.add_argument("--store", help=f"store URL {_FROM_ENV}")
    requeue.add_argument("--job", required=True, help="job name")
    requeue.add_argument(
        "--all",
        action="store_true",
        dest="all_quarantined",
        help="requeue every quarantined split of the job (name no SPLIT then)",
    )
    requeue.add_argument(
        "splits", nargs="*", metavar="SPLIT", help="quarantined split ids (or use --all)"
    )

    repair = commands.add_parser(
        "repair",
        help="rewrite a job's unreadable records",
        description="Rewrite unreadable records (garbage bytes, another program's value) from "
        "what the store still knows: each named split's progress record (a fresh runnable "
        "record, so the fleet runs it again), the plan record (--plan), or remove an "
        "unreadable leader key (--leader). Shows what it will write and what cannot be "
        "recovered, and asks before writing, unless --yes.",
    )
    repair.add_argument("--store", help=f"store URL {_FROM_ENV}")
    repair.add_argument("--job", required=True, help="job name")
    repair.add_argument(
        "--yes", action="store_true", help="write without asking (what is lost is still shown)"
    )
    repair.add_argument("--plan", action="store_true", help="rewrite the unreadable plan record")
    repair.add_argument(
        "--fingerprint",
        default="",
        help="with --plan: the fingerprint the job's workers run with (default: none)",
    )
    repair.add_argument(
        "--leader", action="store_true", help="remove an unreadable leader key (never a live one)"
    )
    repair.add_argument(
        "splits", nargs="*", metavar="SPLIT", help="splits whose progress record is unreadable"
    )

    delete = commands.add_parser(
        "delete",
        help="remove every key of a job from the store",
        description="Remove every key of a job in both keyspaces (its plan, splits, progress, "
        "leases, workers' presence) and print what was removed; other jobs in the store are "
        "left untouched. Refused while a worker of the job is live, unless --force.",
    )
    delete.add_argument("--store", help=f"store URL {_FROM_ENV}")
    delete.add_argument("--job", required=True, help="name of the job to remove")
    delete.add_argument(
        "--force",
        action="store_true",
        help="delete even while workers of the job are live: they are cut off (their next "
        "write is refused and they stop with an error, losing the work in flight)",
    )

    reset = commands.add_parser(
        "reset-ttl",
        help="clear the TTL recorded for a namespace that holds no job",
        description="Forget the ephemeral TTL a namespace records (etcd: its TTL record; "
        "NATS: its two buckets), so the next store opened on it sets its own: for a namespace "
        "left with a TTL but no job (a worker that failed to start, or a TTL the store cannot "
        "grant). Refused, changing nothing, while any key is left there: remove the jobs with "
        "`spate delete` first (deleting the last one clears the TTL too). The URL's ttl= is "
        "ignored.",
    )
    reset.add_argument("--store", help=f"store URL naming the namespace {_FROM_ENV}")

    conformance = commands.add_parser(
        "conformance", help="run the store conformance suite against a deployed store"
    )
    conformance.add_argument("--store", help=f"store URL (use a scratch namespace) {_FROM_ENV}")
    conformance.add_argument(
        "pytest_args", nargs="*", help="extra pytest arguments (after --, e.g. -- -x -k cas)"
    )
    return parser


def _run_with_ctrl_c(work: Callable[[], Awaitable[int]]) -> int:
    """Run ``work`` under Trio; the first Ctrl-C cancels it gracefully, the second at once."""

    async def main() -> int:
        outcome: list[int] = []
        with single_error():
            await run_until_signalled(outcome)
        return outcome[0] if outcome else 130

    async def run_until_signalled(outcome: list[int]) -> None:
        async with trio.open_nursery() as nursery:
            graceful = trio.CancelScope()

            async def run() -> None:
                with graceful:
                    outcome.append(await work())
                nursery.cancel_scope.cancel()

            async def signals() -> None:
                with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as received:
                    async for _ in received:
                        if graceful.cancel_called:
                            nursery.cancel_scope.cancel()
                            return
                        print(
                            "leaving gracefully (handing splits back); Ctrl-C again to leave "
                            "at once",
                            file=sys.stderr,
                        )
                        graceful.cancel()

            nursery.start_soon(signals)
            nursery.start_soon(run)

    return trio.run(main)


def _cmd_demo(args: argparse.Namespace) -> int:

    # The demo narrates what matters itself; the library's own warnings (a killed worker's
    # failed re-watches, say) are expected here and would drown the story.
    library_logger = logging.getLogger("spate")
    level = library_logger.level
    library_logger.setLevel(logging.CRITICAL)
    try:
        return _demo(args)
    finally:
        library_logger.setLevel(level)


def _demo(args: argparse.Namespace) -> int:
    from spate._cli.demo.display import Display, LiveDisplay, PlainDisplay, print_result
    from spate._cli.demo.fleet import DemoOptions, demo_store_url, run_demo

    options = DemoOptions(
        store_url=args.store,
        workers=args.workers,
        splits=args.splits,
        seed=args.seed,
        chaos=not args.no_chaos,
        duration=args.duration,
    )
    from spate_stores import redact_url

    console: Any = None
    display: Display
    if sys.stdout.isatty() and not args.plain and _has_rich():
        from rich.console import Console

        console = Console()
        display = LiveDisplay(console)
    else:
        display = PlainDisplay(lambda line: print(line, flush=True))
    print(
        f"spate demo: {options.workers} workers, {options.splits} splits, seed {options.seed}, "
        f"{'with' if options.chaos else 'without'} chaos, store "
        f"{redact_url(demo_store_url(options))}, job {options.job}",
        flush=True,
    )
    telemetry = None
    if args.otlp_endpoint:
        from spate import telemetry as telemetry_module

        telemetry = telemetry_module.configure(
            service_name="spate-demo", endpoint=args.otlp_endpoint
        )

    async def work() -> int:
        try:
            result = await run_demo(options, display)
        finally:
            if telemetry is not None:
                await telemetry.ashutdown()
        print_result(result, lambda line: print(line, flush=True))
        return EXIT_OK if result.ok else EXIT_FAILED

    return _run_with_ctrl_c(work)


def _cmd_worker(args: argparse.Namespace) -> int:
    from spate._cli.demo.process import run_demo_worker
    from spate._events import AllComplete
    from spate._runtime.signals import Left
    from spate_stores import redact_url

    configure_logging(http=args.log_http)
    print(
        f"spate worker: one worker of the demo's job {args.job!r} (the synthetic backfill of "
        f"`spate demo`: {args.splits} splits, seed {args.seed}), not a job of yours; store "
        f"{redact_url(args.store)}",
        flush=True,
    )

    telemetry = None
    if args.metrics_port is not None:
        from spate import telemetry as telemetry_module

        host, port = _host_port(args.metrics_port)
        telemetry = telemetry_module.configure(
            service_name="spate-worker", traces=False, prometheus_port=port, prometheus_host=host
        )
        print(f"metrics: {telemetry.prometheus_url}", flush=True)

    async def work() -> int:
        verdict = await run_demo_worker(
            store_url=args.store,
            job=args.job,
            instance=args.instance,
            splits=args.splits,
            seed=args.seed,
            batch_seconds=args.batch_seconds,
            max_in_flight=args.max_in_flight,
            history=args.history,
            locality=args.locality,
            crash_on=frozenset(args.crash_on),
            handle_signals=True,
        )
        if isinstance(verdict, Left):
            print(f"left: {verdict!r}", flush=True)
            return 130  # interrupted, as the exit codes table says (its splits handed over)
        print(f"verdict: {verdict!r}", flush=True)
        return EXIT_OK if isinstance(verdict, AllComplete) else EXIT_STALLED

    try:
        # The worker's own signal handling (run_worker's, as a user's program gets it) leaves
        # gracefully on SIGINT and SIGTERM; a signal before it starts ends the command at once.
        return trio.run(work)
    finally:
        if telemetry is not None:
            telemetry.shutdown()  # the Trio run is over: blocking here stalls nothing


HTTP_LOGGERS = ("httpx", "httpcore")
"""The HTTP client's loggers: httpx logs every request at INFO (1,240 of 1,247 lines of a
worker's log before they were held back), httpcore every connection step at DEBUG."""


def configure_logging(*, http: bool = False, level: int = logging.INFO) -> None:
    """The command line's logging: ``level`` and up to stderr, one line each.

    The libraries configure no logging (they only emit); the command line does. httpx's
    per-request INFO lines are held at WARNING (by :func:`main`, for every command) unless
    ``http`` (``spate worker --log-http``; in a program of your own, set the ``httpx``
    logger's level yourself).
    """
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if http:
        for name in HTTP_LOGGERS:
            logging.getLogger(name).setLevel(logging.NOTSET)


@contextmanager
def _quiet_http_logs() -> Iterator[None]:
    """The HTTP client's loggers held at WARNING while a command runs (levels restored after)."""
    loggers = [logging.getLogger(name) for name in HTTP_LOGGERS]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.WARNING)
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)


def _has_rich() -> bool:
    try:
        import rich  # noqa: F401
    except ImportError:
        return False
    return True


def _host_port(value: str) -> tuple[str, int]:
    """``[HOST:]PORT`` (``[::1]:9464`` for IPv6) as a host (all interfaces if omitted) and port."""
    host, _, port = value.rpartition(":")
    host = host.strip("[]") or "0.0.0.0"
    try:
        return host, int(port)
    except ValueError:
        raise ConfigError(
            f"--metrics-port takes [HOST:]PORT, such as 9464 or 127.0.0.1:9464, not {value!r}"
        ) from None


def _cmd_status(args: argparse.Namespace) -> int:
    from spate._cli.status_table import show_status

    if not args.json and not _has_rich():
        raise ConfigError(
            "spate status draws its table with rich, which is not installed: run "
            f"`{install_hint('cli')}` (or use --json, which needs nothing more)"
        )

    async def work() -> int:
        return await show_status(
            args.store,
            args.job,
            watch=args.watch,
            as_json=args.json,
            interval=args.interval,
            isolation_tier=args.isolation_tier,
            load_band=args.load_band,
        )

    return _run_with_ctrl_c(work)


async def _require_job(url: str, job: str) -> None:
    """Raise JobNotFound unless the store holds ``job``, writing nothing to find out.

    A command that writes checks first on a read-only store, so a mistyped job or namespace
    creates nothing (opening a NATS namespace for writing creates its buckets).
    """
    from spate._ops import require_job
    from spate_stores import open_store

    async with open_store(url, read_only=True) as store:
        await require_job(store, job)


def _cmd_requeue(args: argparse.Namespace) -> int:
    from spate._ops import requeue, requeue_all
    from spate_stores import open_store

    if args.all_quarantined == bool(args.splits):
        raise ConfigError(
            "name the quarantined splits to requeue, or pass --all for every one (not both)"
        )
    patterns = [s for s in args.splits if any(c in s for c in "*?[")]
    if patterns:
        raise ConfigError(
            f"split ids are exact, not patterns ({', '.join(patterns)}); to requeue every "
            "quarantined split of the job, pass --all"
        )

    async def work() -> int:
        await _require_job(args.store, args.job)
        async with open_store(args.store) as store:
            if args.all_quarantined:
                done = await requeue_all(store, args.job)
            else:
                done = await requeue(store, args.job, args.splits)
        if not done:
            print(f"job {args.job} has no quarantined split; nothing was requeued")
        else:
            print(f"requeued {len(done)} split(s): {', '.join(done)}")
        return EXIT_OK

    return trio.run(work)


def _cmd_repair(args: argparse.Namespace) -> int:
    from spate._ops import (
        inspect_plan_repair,
        inspect_repair,
        remove_unreadable_leader,
        repair,
        repair_plan,
    )
    from spate_stores import open_store

    if not (args.splits or args.plan or args.leader):
        raise ConfigError("name the splits to repair, or pass --plan or --leader")

    async def work() -> int:
        await _require_job(args.store, args.job)
        async with open_store(args.store, read_only=True) as store:
            repairs = await inspect_repair(store, args.job, args.splits) if args.splits else []
            plan = (
                await inspect_plan_repair(store, args.job, fingerprint=args.fingerprint)
                if args.plan
                else None
            )
        for each in repairs:
            print(each.describe())
        if plan is not None:
            print(plan.describe())
        if args.leader:
            print(f"the leader key of job {args.job}, if it is unreadable: removed")
        if not args.yes and not _confirmed("write this?"):
            print("nothing was written")
            return EXIT_FAILED
        async with open_store(args.store) as store:
            if plan is not None:
                await repair_plan(store, args.job, plan)
                print("rewrote the plan record; a worker is elected leader again")
            if args.leader:
                removed = await remove_unreadable_leader(store, args.job)
                print("removed the unreadable leader key" if removed else "no leader key stood")
            if repairs:
                done = await repair(store, args.job, repairs)
                print(f"repaired {len(done)} split(s): {', '.join(done)}; the leader places them")
        return EXIT_OK

    return trio.run(work)


def _confirmed(question: str) -> bool:
    """Ask ``question`` on the terminal; without one, refuse (a script passes --yes)."""
    if not sys.stdin.isatty():
        raise ConfigError(
            "spate repair asks before it writes, and stdin is not a terminal: read what it "
            "will write above, then run it again with --yes"
        )
    return input(f"{question} [y/N] ").strip().lower() in ("y", "yes")


def _cmd_delete(args: argparse.Namespace) -> int:
    from spate._delete import delete_job
    from spate_stores import open_store

    async def work() -> int:
        await _require_job(args.store, args.job)
        async with open_store(args.store) as store:
            report = await delete_job(store, args.job, force=args.force)
        print(report.describe())
        if report.cut_off:
            print(
                f"--force cut off {', '.join(report.cut_off)}: their next write is refused and "
                "they stop with an error; stop their processes (a live leader would start the "
                "job again)",
                file=sys.stderr,
            )
        return EXIT_OK

    return trio.run(work)


def _without_ttl(url: str) -> str:
    """``url`` without its ``ttl=`` parameter: a store opened so adopts the namespace's."""
    from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

    parts = urlsplit(url)
    query = [(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True) if k != "ttl"]
    return urlunsplit(parts._replace(query=urlencode(query)))


def _cmd_reset_ttl(args: argparse.Namespace) -> int:
    from spate._delete import ReleasesNamespace, ResetRefused, reset_ttl
    from spate._ops import list_jobs
    from spate_stores import open_store, redact_url

    url = _without_ttl(args.store)
    where = redact_url(url)

    async def work() -> int:
        # Look first on a read-only store: opening a namespace to write records a TTL (NATS:
        # creates its buckets), which a refused or needless reset must not leave behind.
        async with open_store(url, read_only=True) as store:
            jobs = await list_jobs(store)
            recorded = store.recorded_ttl if isinstance(store, ReleasesNamespace) else 0.0
        if jobs:
            raise ResetRefused(jobs)
        if recorded is None:
            print(f"{where} records no ephemeral TTL; nothing was changed")
            return EXIT_OK
        async with open_store(url) as store:
            await reset_ttl(store)
        print(
            f"cleared the ephemeral TTL recorded for {where} ({seconds(recorded)}); the next "
            "store opened on the namespace sets its own"
        )
        return EXIT_OK

    return trio.run(work)


def _cmd_conformance(args: argparse.Namespace) -> int:
    missing = [name for name in ("pytest", "pytest_trio") if importlib.util.find_spec(name) is None]
    if missing:
        raise ConfigError(
            f"the conformance suite runs under pytest with pytest-trio, and "
            f"{' and '.join(n.replace('_', '-') for n in missing)} "
            f"{'is' if len(missing) == 1 else 'are'} not installed: run "
            f"`{install_hint('conformance')}` (plus the store's own extra, e.g. etcd)"
        )
    from spate_testing.conformance import run_conformance

    return run_conformance(args.store, args.pytest_args)


_COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "demo": _cmd_demo,
    "worker": _cmd_worker,
    "status": _cmd_status,
    "requeue": _cmd_requeue,
    "repair": _cmd_repair,
    "delete": _cmd_delete,
    "reset-ttl": _cmd_reset_ttl,
    "conformance": _cmd_conformance,
}


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``spate`` console script; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return EXIT_OK
    from spate_stores._redact import url_secrets

    try:
        _resolve_store(args)
    except ConfigError as exc:
        print(f"spate {args.command}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    secrets = [
        secret
        for option in ("store", "otlp_endpoint")
        for secret in url_secrets(getattr(args, option, None) or "")
    ]
    with _scrubbed_output(secrets), _quiet_http_logs():
        try:
            status = _COMMANDS[args.command](args)
            sys.stdout.flush()  # inside the try: a closed pipe raises here, not at exit
            return status
        except BrokenPipeError:
            return _reader_gone()
        except SpateError as exc:
            from spate._delete import DeleteRefused, ResetRefused
            from spate._ops import JobNotFound, RequeueRefused

            print(f"spate {args.command}: error: {exc}", file=sys.stderr)
            refused = ValueError | RequeueRefused | JobNotFound | DeleteRefused | ResetRefused
            return EXIT_USAGE if isinstance(exc, refused) else EXIT_FAILED
        except KeyboardInterrupt:
            return 130
        except Exception:
            # An unexpected error's traceback goes out here, through the scrubbing streams:
            # its message may quote the URL it was given.
            traceback.print_exc()
            return EXIT_FAILED


def _resolve_store(args: argparse.Namespace) -> None:
    """Fill in ``args.store`` from ``$SPATE_STORE`` when ``--store`` was not given.

    The demo falls back to its embedded memory store; every other command needs a store and
    raises ConfigError naming both ways to give one.
    """
    if not hasattr(args, "store") or args.store:
        return
    from_env = os.environ.get(STORE_ENV, "").strip()
    if from_env:
        args.store = from_env
    elif args.command == "demo":
        args.store = _DEMO_STORE
    else:
        raise ConfigError(
            f"no store given: pass --store URL or set the {STORE_ENV} environment variable "
            f"(export {STORE_ENV}=nats://host:4222/namespace, say; an environment variable "
            "keeps credentials out of `ps` and shell history)"
        )


def _reader_gone() -> int:
    """Leave quietly once standard output's reader has gone (the Python docs' SIGPIPE note).

    Standard output is pointed at /dev/null first, so the interpreter's own flush at exit
    finds nothing to complain about: no traceback, no "Exception ignored" line.
    """
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass  # no real file descriptor behind stdout: nothing of it is left to flush
    finally:
        os.close(devnull)
    return EXIT_BROKEN_PIPE


class _Scrubbing(io.TextIOBase):
    """A text stream writing to ``stream`` with ``secrets`` masked (the rest delegated)."""

    def __init__(self, stream: Any, secrets: list[str]) -> None:
        self._stream = stream
        self._secrets = secrets

    def write(self, text: str) -> int:
        from spate_stores._redact import scrub

        self._stream.write(scrub(text, self._secrets))
        return len(text)

    def flush(self) -> None:
        self._stream.flush()

    def isatty(self) -> bool:
        return bool(self._stream.isatty())

    def fileno(self) -> int:
        return int(self._stream.fileno())

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


@contextmanager
def _scrubbed_output(secrets: list[str]) -> Iterator[None]:
    """Standard output and error with ``secrets`` masked, the last line of defence of every command.

    Store URLs are redacted where they are shown; this catches what quotes one unplanned (a
    server's reply, an unexpected traceback). Secrets shorter than 3 characters are left
    alone: masking every ``a`` would make the output unreadable and hide nothing.
    """
    secrets = [s for s in secrets if len(s) >= 3]
    if not secrets:
        yield
        return
    stdout, stderr = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = _Scrubbing(stdout, secrets), _Scrubbing(stderr, secrets)
    try:
        yield
    finally:
        sys.stdout, sys.stderr = stdout, stderr


if __name__ == "__main__":
    sys.exit(main())
