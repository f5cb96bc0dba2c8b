"""No output of spate shows a seed or JWT from NATS credential files, or one pasted in a URL.

Every subcommand runs against a real nats-server in operator mode with a ``.creds`` file the
server trusts, one it does not, and a URL with the seed pasted where the file's path belongs;
standard output, standard error and every log record (at DEBUG) are scanned for the seed, the
JWT and the JWT's claims part.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import pytest

from spate import Config
from spate._cli import main as cli
from spate_testing.servers._nats_auth import (
    OperatorSetup,
    make_key,
    make_operator,
    user_claims_jwt,
    write_creds,
)
from spate_testing.servers.nats import NatsServer
from tests.cli.test_secrets import argv_for, subcommands

pytestmark = pytest.mark.nats


@pytest.fixture(scope="module")
def operator(tmp_path_factory: pytest.TempPathFactory) -> OperatorSetup:
    """An operator, a JetStream-enabled account, a user of it and the user's .creds file."""
    return make_operator(tmp_path_factory.mktemp("operator"))


@pytest.fixture(scope="module")
def server(operator: OperatorSetup) -> Iterator[NatsServer]:
    """A nats-server in operator mode trusting :func:`operator`'s account."""
    server = NatsServer(websocket=False, extra_config=operator.config)
    try:
        server.start()
        yield server
    finally:
        server.cleanup()


CASES = ["trusted creds", "untrusted creds", "seed in the url"]


@pytest.mark.parametrize("command", sorted(subcommands()))
@pytest.mark.parametrize("case", CASES)
def test_no_output_shows_a_seed_or_jwt(
    command: str,
    case: str,
    operator: OperatorSetup,
    server: NatsServer,
    tmp_path: Path,
    capfd: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    base = f"nats://127.0.0.1:{server.port}/t-{command}-{case.split()[0]}?timeout=5"
    if case == "trusted creds":
        url, seed, jwt = f"{base}&creds={operator.creds}", operator.user.seed, operator.user_jwt
    elif case == "untrusted creds":
        stranger_account, stranger = make_key(0), make_key()
        jwt = user_claims_jwt(stranger_account, stranger, "stranger")
        seed = stranger.seed
        url = f"{base}&creds={write_creds(tmp_path / 'stranger.creds', jwt, seed)}"
    else:
        seed, jwt = operator.user.seed, operator.user_jwt
        url = f"{base}&nkey={seed}"
    monkeypatch.setattr("spate._cli.demo.process.Config", partial(Config, startup_max_attempts=1))
    caplog.set_level(logging.DEBUG)
    status = cli.main(argv_for(command, subcommands()[command], url))
    out, err = capfd.readouterr()
    logs = "\n".join(f"{record.getMessage()} {record.args!r}" for record in caplog.records)
    for where, text in {"stdout": out, "stderr": err, "logs": logs}.items():
        for secret in (seed, jwt, jwt.split(".")[1]):
            assert secret not in text, f"{where} of `spate {command}` ({case}) shows a secret"
    if case == "trusted creds" and command in ("demo", "worker"):
        assert status == 0, (out, err)
    if case != "trusted creds":
        assert status != 0, (out, err)
