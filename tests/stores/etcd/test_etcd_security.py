"""Authentication and TLS on a real etcd, and credentials kept out of every message."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import trio

from spate import SpateError, StoreError, StoreUnavailable
from spate._runtime.probe import probe_store
from spate.store import Keyspace, Put, SnapshotDone, WatchEvent, Won
from spate_stores import open_store
from spate_stores.etcd import EtcdStore
from spate_testing.servers._certs import make_test_pki
from spate_testing.servers.etcd import EtcdServer, etcd_server

pytestmark = pytest.mark.etcd

DURABLE, EPHEMERAL = Keyspace.DURABLE, Keyspace.EPHEMERAL
TTL = 2
AUTH_TOKEN_TTL = 2  # the etcd_auth_server fixture's


async def next_event(events: object, within: float = 10.0) -> WatchEvent:
    with trio.fail_after(within):
        return await events.__anext__()  # type: ignore[attr-defined,no-any-return]


async def exercise(client: EtcdStore) -> None:
    """Every kind of call: the CAS probe, a live watch, and a session kept alive past its TTL."""
    await probe_store(client)
    async with client.watch(DURABLE, "w.") as events:
        assert await next_event(events) == SnapshotDone()
        won = await client.create(DURABLE, "w.1", b"v")
        assert isinstance(won, Won)
        event = await next_event(events)
        assert isinstance(event, Put)
        assert event.entry.revision == won.revision
    assert isinstance(await client.create(EPHEMERAL, "lease", b"v"), Won)
    await trio.sleep(TTL * 1.5)
    assert await client.get(EPHEMERAL, "lease") is not None


# -- authentication -------------------------------------------------------------------------


async def test_a_wrong_password_is_a_clear_store_error(
    etcd_auth_server: EtcdServer, namespace: str
) -> None:
    url = etcd_auth_server.store_url(namespace, ttl=TTL).replace(
        f":{etcd_auth_server.password}@", ":not-the-password@"
    )
    with pytest.raises(StoreError, match="rejected the user name or password of user 'root'") as e:
        async with open_store(url):
            pass
    assert "not-the-password" not in str(e.value)


async def test_missing_credentials_say_the_server_needs_them(
    etcd_auth_server: EtcdServer, namespace: str
) -> None:
    url = etcd_auth_server.store_url(namespace, ttl=TTL, credentials=False)
    with pytest.raises(StoreError, match="has authentication enabled"):
        async with open_store(url):
            pass


async def test_the_right_credentials_work_for_every_call(
    etcd_auth_server: EtcdServer, namespace: str
) -> None:
    async with EtcdStore.from_url(etcd_auth_server.store_url(namespace, ttl=TTL)) as client:
        await exercise(client)


async def test_an_expired_token_is_renewed_transparently(
    etcd_auth_server: EtcdServer, namespace: str
) -> None:
    async with EtcdStore.from_url(etcd_auth_server.store_url(namespace, ttl=TTL)) as client:
        assert isinstance(await client.create(DURABLE, "k", b"1"), Won)
        first_token = client._gateway.token
        await trio.sleep(AUTH_TOKEN_TTL + 1.5)  # idle: the server drops the token
        assert await client.get(DURABLE, "k") is not None
        assert client._gateway.token != first_token
        second_token = client._gateway.token
        await trio.sleep(AUTH_TOKEN_TTL + 1.5)
        # A watch is the first call after the idle spell (it signs in again itself).
        async with client.watch(DURABLE, "") as events:
            assert isinstance(await next_event(events), Put)
            assert await next_event(events) == SnapshotDone()
        assert client._gateway.token != second_token


async def test_a_user_without_permission_gets_a_store_error_naming_the_user(
    etcd_auth_server: EtcdServer, namespace: str
) -> None:
    await trio.to_thread.run_sync(
        lambda: etcd_auth_server.add_user(
            f"limited-{namespace}", "pw-limited", readwrite_prefix="elsewhere/"
        )
    )
    url = f"etcd://limited-{namespace}:pw-limited@127.0.0.1:{etcd_auth_server.client_port}"
    with pytest.raises(StoreError, match=f"denied user 'limited-{namespace}' permission"):
        async with open_store(f"{url}/{namespace}?ttl=2"):
            pass


async def test_a_cancelled_watch_read_loses_no_event_on_the_http_stream(
    etcd_auth_server: EtcdServer, namespace: str
) -> None:
    client = EtcdStore.from_url(etcd_auth_server.store_url(namespace, ttl=TTL))
    async with client, client.watch(DURABLE, "") as events:
        assert await next_event(events) == SnapshotDone()
        with trio.move_on_after(0.2):
            await events.__anext__()
        won = await client.create(DURABLE, "k", b"v")
        assert isinstance(won, Won)
        event = await next_event(events)
        assert isinstance(event, Put)
        assert event.entry.revision == won.revision


async def test_credentials_and_tokens_never_reach_logs_or_errors(
    etcd_auth_server: EtcdServer, namespace: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    password = etcd_auth_server.password
    assert password is not None
    errors: list[SpateError] = []
    tokens: list[str] = []
    url = etcd_auth_server.store_url(namespace, ttl=TTL)
    for bad in (url.replace(password, password + "x"), url.replace("@", "x@", 1)):
        try:
            async with open_store(bad):
                pass
        except SpateError as exc:
            errors.append(exc)
    async with EtcdStore.from_url(url) as client:
        await probe_store(client)
        tokens.append(client._gateway.token or "")
        try:
            await client.create(DURABLE, "big", b"x" * (client.capabilities.max_value_size + 1))
        except SpateError as exc:
            errors.append(exc)
        text = "\n".join([caplog.text, repr(client), *(str(e) for e in errors)])
    assert len(errors) == 3
    assert all(tokens)
    for secret in (password, *tokens):
        assert secret not in text


async def test_a_store_opened_with_credentials_on_a_server_without_auth_still_works(
    etcd_session_server: EtcdServer, namespace: str, caplog: pytest.LogCaptureFixture
) -> None:
    host = f"127.0.0.1:{etcd_session_server.client_port}"
    async with open_store(f"etcd://someone:pw@{host}/{namespace}?ttl=2") as client:
        await probe_store(client)
    assert "does not enable authentication" in caplog.text


# -- TLS ------------------------------------------------------------------------------------


async def test_tls_with_a_client_certificate_works_for_every_call(
    etcd_tls_server: EtcdServer, namespace: str
) -> None:
    url = etcd_tls_server.store_url(namespace, ttl=TTL)
    assert url.startswith("etcd+https://")
    async with EtcdStore.from_url(url) as client:
        await exercise(client)


async def test_an_untrusted_server_certificate_is_a_store_error(
    etcd_tls_server: EtcdServer, namespace: str, tmp_path: Path
) -> None:
    assert etcd_tls_server.pki is not None
    stranger = make_test_pki(tmp_path, ca_name="some other CA")
    url = etcd_tls_server.store_url(namespace, ttl=TTL, ca=str(stranger.ca_cert))
    with pytest.raises(StoreError, match=r"could not be verified.*ca="):
        async with open_store(url):
            pass


async def test_a_missing_client_certificate_is_refused_naming_the_endpoint(
    etcd_tls_server: EtcdServer, namespace: str
) -> None:
    assert etcd_tls_server.pki is not None
    url = etcd_tls_server.store_url(namespace, ttl=TTL)
    url = url.split("&cert=")[0]  # keep ca=, drop cert= and key=
    # etcd 3.5 rejects the handshake with an alert (StoreError: TLS handshake failed); 3.4's
    # TLS 1.3 rejects it after the client finished, which reads as a dropped connection.
    with pytest.raises((StoreError, StoreUnavailable), match=f"{etcd_tls_server.client_port}"):
        async with open_store(url):
            pass


async def test_unreadable_tls_files_are_a_store_error(
    etcd_tls_server: EtcdServer, namespace: str, tmp_path: Path
) -> None:
    assert etcd_tls_server.pki is not None
    url = etcd_tls_server.store_url(namespace, ttl=TTL, key=str(tmp_path / "missing.pem"))
    with pytest.raises(StoreError, match="cannot load the TLS files"):
        async with open_store(url):
            pass


async def test_tls_and_authentication_together() -> None:
    async with etcd_server(tls=True, auth=True) as server:
        client = EtcdStore.from_url(server.store_url("both", ttl=TTL))
        async with client:
            await exercise(client)
