"""Unary calls to the etcd v3 JSON gateway through one pooled httpx client, with auth.

One :class:`httpx.AsyncClient` per store keeps connections alive (creating a client costs
~27 ms; a keep-alive call ~1 ms). With credentials, the client signs in at open and again
whenever etcd says the token is invalid (simple tokens expire after ``--auth-token-ttl`` of
idleness, JWTs after their lifetime), then retries that request once: a request refused for
its token was not applied, so the retry cannot apply a write twice.
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

from spate.errors import StoreError
from spate_stores._tracing import client_span, server_endpoint
from spate_stores.etcd._config import EtcdConfig
from spate_stores.etcd._errors import gateway_error, transport_error
from spate_stores.etcd._wire import ErrorKind, GatewayError, classify_error

__all__ = ["Gateway", "ReplyError"]

log = logging.getLogger("spate.stores.etcd")

Json = dict[str, Any]


class ReplyError(Exception):
    """An error reply the caller handles itself (lease not found, compacted revision)."""

    def __init__(self, error: GatewayError) -> None:
        super().__init__(error.message)
        self.error = error


# Kinds a caller recovers from; every other error reply becomes a store error here.
_PASSED_THROUGH = {ErrorKind.LEASE_NOT_FOUND, ErrorKind.COMPACTED}


class Gateway:
    """The HTTP side of one store client: unary calls, auth token, streamed POSTs."""

    def __init__(self, config: EtcdConfig) -> None:
        self.config = config
        self.endpoint = config.endpoint
        parts = urlsplit(config.endpoint)
        self._server = server_endpoint(parts.hostname or "", parts.port)
        self._client: httpx.AsyncClient | None = None
        self._ssl: ssl.SSLContext | None = None
        self._token: str | None = None
        self._auth_lock = trio.Lock()

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
            base_url=self.endpoint,
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
            try:
                response = await self._http().post("/v3/auth/authenticate", json=body)
            except httpx.HTTPError as exc:
                raise transport_error(self.endpoint, exc, doing="signing in") from None
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
                raise StoreError(f"etcd at {self.endpoint} answered a sign-in without a token")
            self._token = token

    async def call(self, path: str, body: Json, *, doing: str) -> Json:
        """POST ``body`` to ``path`` and return the reply.

        Raises StoreUnavailable / StoreError (mapped), or :class:`ReplyError` for a lease
        that is gone or a compacted revision (the caller recovers from those). Each call is a
        client span (``txn``, ``range``...) beneath the spate span that made it.
        """
        operation = path.rsplit("/", 1)[-1]
        with client_span(
            "etcd", operation, server=self._server, namespace=self.config.namespace or None
        ):
            return await self._call(path, body, doing=doing)

    async def _call(self, path: str, body: Json, *, doing: str) -> Json:
        for attempt in range(2):
            token = self._token
            try:
                response = await self._http().post(path, json=body, headers=self._headers())
            except httpx.HTTPError as exc:
                raise transport_error(self.endpoint, exc, doing=doing) from None
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
                "POST", path, json=body, headers=self._headers(), timeout=timeout
            ) as response:
                if response.status_code != 200:
                    await response.aread()
                    error = classify_error(response.status_code, response.content)
                    raise self._fail(error, doing)
                yield response.aiter_lines()
        except httpx.HTTPError as exc:
            raise transport_error(self.endpoint, exc, doing=doing) from None

    async def refresh_token(self, stale: str | None) -> None:
        """Sign in again if the token is still ``stale`` (a stream reported it invalid)."""
        if self.config.username is not None:
            await self._authenticate(stale)

    @property
    def token(self) -> str | None:
        """The current auth token (never logged)."""
        return self._token


def _json(response: httpx.Response) -> Json:
    try:
        data = response.json()
    except ValueError:
        data = None
    if not isinstance(data, dict):
        raise StoreError(
            f"{response.request.url.scheme}://{response.request.url.netloc.decode()} answered "
            "with something other than a JSON object; is it an etcd v3 gateway?"
        )
    return data
