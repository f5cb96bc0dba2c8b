"""Unary calls to the etcd v3 JSON gateway through one pooled httpx client, with auth.

One :class:`httpx.AsyncClient` per store keeps connections alive (creating a client costs
~27 ms; a keep-alive call ~1 ms). With credentials, the client signs in at open and again
whenever etcd says the token is invalid (simple tokens expire after ``--auth-token-ttl`` of
idleness, JWTs after their lifetime), then retries that request once: a request refused for
its token was not applied, so the retry cannot apply a write twice.

With several members (an endpoint list) each call goes to the current member and, when that
member cannot be reached or has no leader, moves on (see ``_endpoints.py``). A call moves on
*within* the same call only when resending it cannot apply anything twice: the connection
to the failed member was never made, or the call only reads. A write whose bytes may have
reached a member fails with StoreUnavailable ("may or may not have been applied") after the
client has switched member, so the caller's own outcome-unknown handling decides, on the
next member, whether it landed.
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import urlsplit

import httpx
import trio

from spate import StoreError, StoreUnavailable
from spate_stores._first_words import first_words
from spate_stores._tracing import client_span, server_endpoint
from spate_stores.etcd import _errors as errors
from spate_stores.etcd._config import EtcdConfig
from spate_stores.etcd._endpoints import EndpointSet
from spate_stores.etcd._errors import gateway_error, transport_error
from spate_stores.etcd._wire import ErrorKind, GatewayError, classify_error

__all__ = ["Gateway", "ReplyError"]

log = logging.getLogger("spate.stores.etcd")

Json = dict[str, Any]


class ReplyError(Exception):
    """An error reply the caller handles itself (etcd lease not found, compacted revision)."""

    def __init__(self, error: GatewayError) -> None:
        super().__init__(error.message)
        self.error = error


# Kinds a caller recovers from; every other error reply becomes a store error here.
_PASSED_THROUGH = {ErrorKind.ETCD_LEASE_NOT_FOUND, ErrorKind.COMPACTED}
# Calls that change nothing (or nothing a second time) when resent to another member.
_RANGE = "/v3/kv/range"
_RESENDABLE = {_RANGE, "/v3/auth/authenticate", "/v3/lease/revoke"}


class _Failover(Exception):
    """This member failed the call; ``resend`` says whether the next member may take it."""

    def __init__(self, error: Exception, *, resend: bool) -> None:
        super().__init__(str(error))
        self.error = error
        self.resend = resend


class Gateway:
    """The HTTP side of one store client: unary calls, auth token, streamed POSTs."""

    def __init__(self, config: EtcdConfig) -> None:
        self.config = config
        self.endpoints = EndpointSet(config.endpoints)
        """The members this client may use, and the one it uses now."""
        self._client: httpx.AsyncClient | None = None
        self._ssl: ssl.SSLContext | None = None
        self._token: str | None = None
        self._auth_lock = trio.Lock()
        # Whether any member has answered in HTTP yet: until one has, a connection broken
        # without an HTTP answer may be a port that is no etcd at all (see _post_to).
        self._answered = False

    @property
    def endpoint(self) -> str:
        """The member requests go to now."""
        return self.endpoints.current

    @property
    def ssl_context(self) -> ssl.SSLContext | None:
        """The TLS context (loaded at open) for streams that share the client's trust."""
        return self._ssl

    @property
    def uses_token(self) -> bool:
        """Whether requests carry an auth token (the server has authentication enabled)."""
        return self._token is not None

    async def open(self) -> None:
        """Create the pooled client and sign in (with credentials)."""
        self._ssl = self.config.ssl_context()
        self._client = httpx.AsyncClient(
            verify=self._ssl if self._ssl is not None else True,
            timeout=httpx.Timeout(self.config.timeout),
            limits=httpx.Limits(max_keepalive_connections=32, max_connections=256),
            trust_env=False,
        )
        if self.config.username is not None:
            await self._authenticate(None)

    async def aclose(self) -> None:
        """Close the pooled connections."""
        if self._client is not None:
            client, self._client = self._client, None
            with trio.CancelScope(shield=True):
                await client.aclose()

    def _headers(self) -> dict[str, str]:
        return {"Authorization": self._token} if self._token is not None else {}

    def _http(self) -> httpx.AsyncClient:
        if self._client is None:
            raise StoreError(f"the etcd store for {self.endpoint} is not open (or closed)")
        return self._client

    def _fail(self, error: GatewayError, doing: str) -> Exception:
        return gateway_error(
            self.endpoint,
            error,
            doing=doing,
            user=self.config.username,
            limit=self.config.max_request_bytes,
        )

    async def _authenticate(self, stale: str | None) -> None:
        async with self._auth_lock:
            if self._token != stale:
                return  # another task signed in again while this one waited
            body = {"name": self.config.username, "password": self.config.password}
            response = await self._over_members(
                "/v3/auth/authenticate", body, doing="signing in", headers={}
            )
            if response.status_code != 200:
                error = classify_error(response.status_code, response.content)
                if error.kind is ErrorKind.AUTH_NOT_ENABLED:
                    log.warning(
                        "etcd at %s does not enable authentication; ignoring the credentials "
                        "of user %r",
                        self.endpoint,
                        self.config.username,
                    )
                    self._token = None
                    return
                raise self._fail(error, "signing in") from None
            token = _json(response).get("token")
            if not isinstance(token, str) or not token:
                raise errors.sign_in_without_token(self.endpoint)
            self._token = token

    async def call(self, path: str, body: Json, *, doing: str) -> Json:
        """POST ``body`` to ``path`` and return the reply.

        Raises StoreUnavailable / StoreError (mapped), or :class:`ReplyError` for an etcd lease
        that is gone or a compacted revision (the caller recovers from those). Each call is a
        client span (``txn``, ``range``...) beneath the spate span that made it.
        """
        operation = path.rsplit("/", 1)[-1]
        server = _server_of(self.endpoint)
        namespace = self.config.namespace or None
        with client_span("etcd", operation, server=server, namespace=namespace):
            return await self._call(path, body, doing=doing)

    async def _call(self, path: str, body: Json, *, doing: str) -> Json:
        for attempt in range(2):
            token = self._token
            response = await self._over_members(path, body, doing=doing, headers=self._headers())
            if response.status_code == 200:
                return _json(response)
            error = classify_error(response.status_code, response.content)
            if error.kind is ErrorKind.INVALID_TOKEN and token is not None and attempt == 0:
                await self._authenticate(token)
                continue
            if error.kind in _PASSED_THROUGH:
                raise ReplyError(error)
            raise self._fail(error, doing) from None
        raise AssertionError("unreachable: the second attempt returns or raises")

    async def _over_members(
        self, path: str, body: Json, *, doing: str, headers: dict[str, str]
    ) -> httpx.Response:
        """POST to the current member, moving on to the next ones as far as is safe.

        Returns the first reply that is not "this member cannot serve" (any other error
        reply is the caller's to judge). Raises StoreUnavailable naming every member tried
        when none could serve.
        """
        tried: list[str] = []
        last: Exception | None = None
        for endpoint in self.endpoints.rotation():
            tried.append(endpoint)
            try:
                return await self._post_to(endpoint, path, body, doing=doing, headers=headers)
            except _Failover as failure:
                self.endpoints.failed(endpoint)
                last = failure.error
                if not failure.resend:
                    break
        assert last is not None
        if len(tried) < len(self.endpoints.all) or len(tried) == 1:
            raise last  # one member's failure (the write may have landed): the caller decides
        raise errors.no_member_served(doing, tried, last)

    async def _post_to(
        self, endpoint: str, path: str, body: Json, *, doing: str, headers: dict[str, str]
    ) -> httpx.Response:
        resend = path in _RESENDABLE
        try:
            response = await self._http().post(endpoint + path, json=body, headers=headers)
        except httpx.HTTPError as exc:
            if not self._answered and isinstance(exc, httpx.RemoteProtocolError | httpx.ReadError):
                await self._check_speaks_http(endpoint)
            # ConnectError (refused, unreachable) and ConnectTimeout mean no byte was sent.
            never_sent = isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout)
            error = transport_error(endpoint, exc, doing=doing, read=path == _RANGE)
            if isinstance(error, StoreUnavailable):
                raise _Failover(error, resend=resend or never_sent) from None
            raise error from None
        self._answered = True
        if response.status_code != 200:
            error_reply = classify_error(response.status_code, response.content)
            if error_reply.kind is ErrorKind.UNAVAILABLE:
                # No leader, leader changed, request timed out: another member may have
                # a leader; a write refused this way may still have been proposed.
                raise _Failover(self._fail(error_reply, doing), resend=resend)
        return response

    async def _check_speaks_http(self, endpoint: str) -> None:
        """Raise StoreError if ``endpoint``'s port speaks first, or not HTTP (no etcd there).

        Asked once a first request broke without an HTTP answer: a NATS server, say, greets
        with INFO and hangs up on the request, which reads like a connection reset, and
        "retry" would be the wrong advice. An https port answers in TLS, which no plain
        probe can read, so it is not asked (the TLS checks speak for it).
        """
        parts = urlsplit(endpoint)
        if parts.scheme != "http" or parts.hostname is None or parts.port is None:
            return
        said = await first_words(parts.hostname, parts.port, min(2.0, self.config.timeout))
        if said is not None and not said.startswith(b"HTTP/"):
            raise errors.not_http(endpoint, said)

    @asynccontextmanager
    async def stream_lines(self, path: str, body: Json, *, doing: str) -> AsyncIterator[Any]:
        """POST ``body`` and yield an async iterator over the reply's lines (a stream).

        The request body is complete before the server answers, which is all a one-way
        HTTP/1.1 stream allows (used for watches when a token is needed: the WebSocket
        proxy cannot forward one).
        """
        timeout = httpx.Timeout(self.config.timeout, read=None)
        try:
            async with self._http().stream(
                "POST", self.endpoint + path, json=body, headers=self._headers(), timeout=timeout
            ) as response:
                if response.status_code != 200:
                    await response.aread()
                    error = classify_error(response.status_code, response.content)
                    raise self._fail(error, doing)
                yield response.aiter_lines()
        except httpx.HTTPError as exc:
            failed = self.endpoint
            self.endpoints.failed(failed)
            raise transport_error(failed, exc, doing=doing) from None

    async def refresh_token(self, stale: str | None) -> None:
        """Sign in again if the token is still ``stale`` (a stream reported it invalid)."""
        if self.config.username is not None:
            await self._authenticate(stale)

    @property
    def token(self) -> str | None:
        """The current auth token (never logged)."""
        return self._token


def _server_of(endpoint: str) -> dict[str, str | int]:
    parts = urlsplit(endpoint)
    return server_endpoint(parts.hostname or "", parts.port)


def _json(response: httpx.Response) -> Json:
    try:
        data = response.json()
    except ValueError:
        data = None
    if not isinstance(data, dict):
        raise errors.not_json(
            f"{response.request.url.scheme}://{response.request.url.netloc.decode()}"
        )
    return data
