"""NATS credentials as operators deploy them, each against a real nats-server configured for it.

* NKey users (``authorization { users: [ { nkey: U... } ] }``) and a seed file (``nkey=``);
* operator mode (operator → account → user JWTs, ``resolver: MEMORY``) and a ``.creds`` file
  (``creds=``), JetStream enabled for the account through its JWT's limits;
* TLS client certificates (``tls { ..., verify: true }``) and ``cert=``/``key=``.

Each works end to end (a KV write and read), and each wrong or missing credential fails at
open with a StoreError that says what to check, naming the file but never its secret.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from spate import StoreError, StoreUnavailable
from spate.store import Entry, Keyspace, Store, Won
from spate_stores import open_store
from spate_testing.servers._certs import make_test_pki
from spate_testing.servers._nats_auth import (
    OperatorSetup,
    issue_jwt,
    make_key,
    make_operator,
    user_claims_jwt,
    write_creds,
)
from spate_testing.servers.nats import NatsServer, nats_server

pytestmark = pytest.mark.nats

DURABLE = Keyspace.DURABLE


def _server(**kwargs: object) -> Iterator[NatsServer]:
    server = NatsServer(websocket=False, **kwargs)  # type: ignore[arg-type]
    try:
        server.start()
        yield server
    finally:
        server.cleanup()


async def _write_and_read(url: str) -> None:
    async with open_store(url) as store:
        won = await store.create(DURABLE, "k", b"authenticated")
        assert isinstance(won, Won)
        assert await store.get(DURABLE, "k") == Entry("k", b"authenticated", won.revision)


async def _refused(url: str, *, match: str) -> str:
    with pytest.raises(StoreError, match=match) as caught:
        async with open_store(url):
            pass
    return str(caught.value)


# -- NKey users -----------------------------------------------------------------------------

USER = make_key()


@pytest.fixture(scope="module")
def nkey_server() -> Iterator[NatsServer]:
    """A nats-server whose only user is :data:`USER`'s public NKey."""
    config = f"authorization {{ users: [ {{ nkey: {json.dumps(USER.public_key)} }} ] }}"
    yield from _server(extra_config=config)


def _seed_file(directory: Path, seed: str) -> Path:
    path = directory / "user.nk"
    path.write_text(seed + "\n")
    path.chmod(0o600)
    return path


async def test_an_nkey_seed_file_logs_in_as_its_user(
    nkey_server: NatsServer, tmp_path: Path
) -> None:
    seed = _seed_file(tmp_path, USER.seed)
    await _write_and_read(f"nats://127.0.0.1:{nkey_server.port}/nk?nkey={seed}")


async def test_an_nkey_the_server_does_not_list_is_refused_naming_file_and_key(
    nkey_server: NatsServer, tmp_path: Path
) -> None:
    stranger = make_key()
    seed = _seed_file(tmp_path, stranger.seed)
    message = await _refused(
        f"nats://127.0.0.1:{nkey_server.port}/nk?nkey={seed}",
        match=r"refused the credentials \(Authorization Violation\); check the NKey seed file",
    )
    assert str(seed) in message
    assert f"this client's public key is {stranger.public_key}" in message
    assert stranger.seed not in message


async def test_no_credentials_for_an_nkey_server_says_what_to_give(
    nkey_server: NatsServer,
) -> None:
    await _refused(
        f"nats://127.0.0.1:{nkey_server.port}/nk",
        match=r"gives no credentials and the server wants some .*\?nkey=.*\?creds=",
    )


async def test_a_seed_file_that_is_not_a_user_seed_fails_before_the_server_sees_it(
    nkey_server: NatsServer, tmp_path: Path
) -> None:
    # One character in the middle changed: every bit of it is data, so the CRC16 catches it
    # (the last character of the 58 carries two padding bits: a change there could decode
    # to the same bytes, a valid seed, about one run in eight).
    swapped = "B" if USER.seed[10] == "A" else "A"
    bad = USER.seed[:10] + swapped + USER.seed[11:]
    seed = _seed_file(tmp_path, bad)
    message = await _refused(
        f"nats://127.0.0.1:{nkey_server.port}/nk?nkey={seed}",
        match="does not hold a valid NATS user seed: its checksum does not match",
    )
    assert str(seed) in message
    assert bad[2:-1] not in message


async def test_a_missing_seed_file_is_named(nkey_server: NatsServer, tmp_path: Path) -> None:
    await _refused(
        f"nats://127.0.0.1:{nkey_server.port}/nk?nkey={tmp_path / 'nowhere.nk'}",
        match=r"the NKey seed file .*nowhere\.nk does not exist",
    )


# -- operator mode and .creds files ---------------------------------------------------------


@pytest.fixture(scope="module")
def operator(tmp_path_factory: pytest.TempPathFactory) -> OperatorSetup:
    """An operator, a JetStream-enabled account, a user of it and the user's .creds file."""
    return make_operator(tmp_path_factory.mktemp("operator"))


@pytest.fixture(scope="module")
def operator_server(operator: OperatorSetup) -> Iterator[NatsServer]:
    """A nats-server in operator mode trusting :func:`operator`'s account."""
    yield from _server(extra_config=operator.config)


async def test_a_creds_file_logs_in_and_jetstream_works(
    operator_server: NatsServer, operator: OperatorSetup
) -> None:
    await _write_and_read(f"nats://127.0.0.1:{operator_server.port}/op?creds={operator.creds}")


async def test_creds_of_an_account_the_server_does_not_trust_are_refused(
    operator_server: NatsServer, tmp_path: Path
) -> None:
    stranger_account, user = make_key(0), make_key()
    jwt = issue_jwt(stranger_account, user.public_key, "stranger", {"type": "user"})
    creds = write_creds(tmp_path / "stranger.creds", jwt, user.seed)
    message = await _refused(
        f"nats://127.0.0.1:{operator_server.port}/op?creds={creds}",
        match=r"refused the credentials \(Authorization Violation\); check the creds file",
    )
    assert str(creds) in message
    assert jwt not in message
    assert jwt.split(".")[1] not in message
    assert user.seed not in message


async def test_creds_whose_seed_is_not_the_jwts_user_are_refused(
    operator_server: NatsServer, operator: OperatorSetup, tmp_path: Path
) -> None:
    # A JWT the server trusts, but the nonce signed by someone else's key.
    creds = write_creds(tmp_path / "mixed.creds", operator.user_jwt, make_key().seed)
    await _refused(
        f"nats://127.0.0.1:{operator_server.port}/op?creds={creds}",
        match="refused the credentials .*check the creds file",
    )


async def test_a_file_that_is_not_a_creds_file_is_named(
    operator_server: NatsServer, tmp_path: Path
) -> None:
    path = _seed_file(tmp_path, make_key().seed)
    await _refused(
        f"nats://127.0.0.1:{operator_server.port}/op?creds={path}",
        match=r"user\.nk is not a NATS \.creds file",
    )


# -- TLS client certificates ----------------------------------------------------------------


@pytest.fixture(scope="module")
def verifying_server() -> Iterator[NatsServer]:
    """A nats-server whose TLS requires client certificates signed by its test CA."""
    yield from _server(tls_verify=True)


def _client_cert(server: NatsServer) -> str:
    assert server.pki is not None
    return f"&cert={server.pki.client_cert}&key={server.pki.client_key}"


async def test_a_client_certificate_logs_in(verifying_server: NatsServer) -> None:
    await _write_and_read(verifying_server.store_url("tls") + _client_cert(verifying_server))


async def test_without_a_client_certificate_the_error_says_to_give_one(
    verifying_server: NatsServer,
) -> None:
    await _refused(
        verifying_server.store_url("tls"),
        match=r"requires a TLS client certificate .*add cert=/path/client\.pem&key=",
    )


async def test_a_client_certificate_of_another_ca_is_refused_clearly(
    verifying_server: NatsServer, tmp_path: Path
) -> None:
    other = make_test_pki(tmp_path / "other", ca_name="another CA")
    await _refused(
        verifying_server.store_url("tls") + f"&cert={other.client_cert}&key={other.client_key}",
        match="refused the TLS client certificate .*signed by a CA in the server's tls ca_file",
    )


async def test_an_unreadable_client_certificate_is_named(
    verifying_server: NatsServer, tmp_path: Path
) -> None:
    assert verifying_server.pki is not None
    missing = tmp_path / "missing.pem"
    await _refused(
        verifying_server.store_url("tls")
        + f"&cert={missing}&key={verifying_server.pki.client_key}",
        match=r"cannot load the TLS client certificate cert=.*missing\.pem",
    )
    # A key that is not the certificate's own.
    await _refused(
        verifying_server.store_url("tls")
        + f"&cert={verifying_server.pki.client_cert}&key={verifying_server.pki.server_key}",
        match="cannot load the TLS client certificate",
    )


async def test_a_replaced_creds_file_is_read_at_the_next_reconnection(
    operator: OperatorSetup, tmp_path: Path
) -> None:
    creds = tmp_path / "rotating.creds"
    creds.write_bytes(operator.creds.read_bytes())
    async with (
        nats_server(websocket=False, extra_config=operator.config) as server,
        open_store(f"nats://127.0.0.1:{server.port}/rot?creds={creds}") as store,
    ):
        await store.create(DURABLE, "k", b"v")
        # Replaced by creds the server does not trust: the next connection is refused.
        stranger_account, stranger = make_key(0), make_key()
        write_creds(creds, user_claims_jwt(stranger_account, stranger, "x"), stranger.seed)
        await server.arestart()
        message = await _first_store_error(store)
        assert "now refuses the credentials" in message
        assert f"check the creds file {creds}" in message
        # Replaced again by a second user of the trusted account: the store recovers.
        second = make_key()
        write_creds(creds, user_claims_jwt(operator.account, second, "second"), second.seed)
        with trio.fail_after(30):
            while True:
                try:
                    entry = await store.get(DURABLE, "k")
                except (StoreError, StoreUnavailable):
                    await trio.sleep(0.1)  # polling for the reconnection, bounded above
                    continue
                break
        assert entry is not None
        assert entry.value == b"v"


async def _first_store_error(store: Store) -> str:
    """Poll reads (bounded) until one fails with StoreError; its message."""
    with trio.fail_after(30):
        while True:
            try:
                await store.get(DURABLE, "k")
            except StoreError as exc:
                return str(exc)
            except StoreUnavailable:
                pass
            await trio.sleep(0.1)
