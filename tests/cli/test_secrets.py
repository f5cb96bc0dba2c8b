"""No output of spate names a password or token.

Every subcommand of ``spate`` runs with a store URL that carries a secret, against a real etcd
with authentication on and real nats-servers with user/password and token auth: with the
right password, a wrong one, a secret in a query parameter, and an unreachable server.
Standard output, standard error, every log record (at DEBUG) and every exported span
(attributes, events, status) are scanned, and the secret must not appear.

The subcommands are found by walking the parser, and each one's arguments are built from
its own options (``--store``, ``--job``, required positionals), so a subcommand added
later is covered without touching this file: :data:`QUICK` only makes the long-running
ones short.
"""

from __future__ import annotations

import argparse
import logging
import secrets
import socket
from collections.abc import Iterator
from functools import partial
from urllib.parse import quote

import pytest
from opentelemetry.sdk.trace import ReadableSpan

from spate import Config
from spate._cli import main as cli
from spate_testing.servers.etcd import EtcdServer, etcd_server_sync
from spate_testing.servers.nats import NatsServer
from tests.telemetry.conftest import Spans
from tests.telemetry.conftest import spans as spans  # the fixture: spans captured in memory

SECRET = "S3cr3t-pa55-" + secrets.token_hex(4)
"""The password (or token) the servers are configured with."""
WRONG = "Wr0ng-pa55-" + secrets.token_hex(4)
"""A wrong password: the server refuses it, and it must not be echoed either."""
QUERY_SECRET = "Qu3ry-t0ken-" + secrets.token_hex(4)
"""A secret handed over in a query parameter (no adapter takes one: it is refused, unechoed)."""
JOB = "spate-demo"

QUICK: dict[str, list[str]] = {
    "demo": ["--workers", "2", "--splits", "2", "--no-chaos", "--duration", "1", "--plain"],
    "worker": ["--splits", "2", "--batch-seconds", "0.001", "--instance", "w1"],
    "conformance": ["--", "-x", "-q", "-k", "test_create_wins_once_then_loses"],
    "requeue": ["range-0001"],  # a split to look up, whether SPLIT is required or optional
    "repair": ["range-0001"],  # a split to look up (repair needs one, or --plan or --leader)
}
"""Extra arguments that keep a subcommand short (the rest is built from its options)."""


def subcommands() -> dict[str, argparse.ArgumentParser]:
    """Every subcommand of ``spate``, by name, with its own parser."""
    found: dict[str, argparse.ArgumentParser] = {}
    for action in cli.build_parser()._actions:
        if isinstance(action, argparse._SubParsersAction):
            found.update(action.choices)
    return found


def argv_for(name: str, parser: argparse.ArgumentParser, url: str) -> list[str]:
    """``spate NAME`` with ``url`` as its store, the demo's job, and its required arguments."""
    argv = [name]
    for action in parser._actions:
        if action.option_strings:
            flag = action.option_strings[0]
            if flag == "--store":
                argv += [flag, url]
            elif flag == "--job":
                argv += [flag, JOB]
            elif action.required:
                argv += [flag, "range-0000"]
        elif action.required and action.nargs not in ("*", "?"):
            argv.append("range-0000")
    return argv + QUICK.get(name, [])


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def etcd_auth() -> Iterator[EtcdServer]:
    """An etcd with authentication on (user root, a random password)."""
    with etcd_server_sync(auth=True) as server:
        yield server


@pytest.fixture(scope="module")
def nats_user() -> Iterator[NatsServer]:
    """A nats-server with user/password auth (password :data:`SECRET`)."""
    server = NatsServer(user="spate", password=SECRET, websocket=False)
    try:
        server.start()
        yield server
    finally:
        server.cleanup()


@pytest.fixture(scope="module")
def nats_token() -> Iterator[NatsServer]:
    """A nats-server with token auth (token :data:`SECRET`)."""
    server = NatsServer(token=SECRET, websocket=False)
    try:
        server.start()
        yield server
    finally:
        server.cleanup()


def _url(kind: str, case: str, request: pytest.FixtureRequest) -> tuple[str, list[str]]:
    """The store URL of one case, in a namespace of its own, and the secrets it holds."""
    namespace = f"t-{secrets.token_hex(4)}"
    scheme = "etcd" if kind == "etcd" else "nats"
    if case == "unreachable":
        port = _closed_port()
        auth = f"spate:{quote(SECRET)}@" if kind != "nats-token" else f"{quote(SECRET)}@"
        return f"{scheme}://{auth}127.0.0.1:{port}/{namespace}?timeout=1", [SECRET]
    secret = SECRET
    if kind == "etcd":
        etcd: EtcdServer = request.getfixturevalue("etcd_auth")
        assert etcd.password is not None
        host, user, secret = f"127.0.0.1:{etcd.client_port}", "root", etcd.password
    else:
        nats: NatsServer = request.getfixturevalue(kind.replace("-", "_"))
        host, user = f"127.0.0.1:{nats.port}", "spate"
    password = WRONG if case == "wrong password" else secret
    auth = f"{quote(password)}@" if kind == "nats-token" else f"{user}:{quote(password)}@"
    url = f"{scheme}://{auth}{host}/{namespace}?timeout=5"
    if case == "query secret":
        url += f"&password={QUERY_SECRET}&token={QUERY_SECRET}"
    return url, [secret, WRONG, QUERY_SECRET]


def _spans_text(finished: list[ReadableSpan]) -> str:
    lines = []
    for span in finished:
        lines.append(f"{span.name} {dict(span.attributes or {})} {span.status.description}")
        for event in span.events:
            lines.append(f"{event.name} {dict(event.attributes or {})}")
        lines.extend(f"{link.attributes}" for link in span.links)
    return "\n".join(lines)


CASES = [
    ("etcd", "password"),
    ("etcd", "wrong password"),
    ("etcd", "query secret"),
    ("etcd", "unreachable"),
    ("nats-user", "password"),
    ("nats-user", "wrong password"),
    ("nats-user", "query secret"),
    ("nats-user", "unreachable"),
    ("nats-token", "password"),
    ("nats-token", "wrong password"),
    ("nats-token", "unreachable"),
]


@pytest.mark.etcd
@pytest.mark.nats
@pytest.mark.parametrize("command", sorted(subcommands()))
@pytest.mark.parametrize(("kind", "case"), CASES, ids=[f"{k}-{c}" for k, c in CASES])
def test_no_output_names_a_secret(
    command: str,
    kind: str,
    case: str,
    request: pytest.FixtureRequest,
    capfd: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
    spans: Spans,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    url, hidden = _url(kind, case, request)
    # An unreachable store is tried once, not through the whole startup budget.
    monkeypatch.setattr("spate._cli.demo.process.Config", partial(Config, startup_max_attempts=1))
    caplog.set_level(logging.DEBUG)
    argv = argv_for(command, subcommands()[command], url)
    status = cli.main(argv)
    out, err = capfd.readouterr()
    formatter = logging.Formatter()
    logs = "\n".join(
        f"{record.getMessage()} {record.args!r} "
        + (formatter.formatException(record.exc_info) if record.exc_info else "")
        for record in caplog.records
    )
    shown = {"stdout": out, "stderr": err, "logs": logs, "spans": _spans_text(spans.all())}
    for where, text in shown.items():
        for secret in hidden:
            assert secret not in text, f"{where} of `spate {' '.join(argv)}` shows a secret"
    if case == "password" and command in ("demo", "worker"):
        assert status == 0, shown
    if case != "password":
        assert status != 0, shown
