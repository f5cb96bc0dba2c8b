"""A session store on the Trio clock for the core's tests: etcd's semantics, in memory.

Each session stands for an etcd lease: its entries live while it is kept alive (a keepalive
every third of the TTL, which a test can stop), vanish the moment it ends, and vanish when no
keepalive was confirmed for a whole TTL (the session is then lost). The inner MemoryStore's own
TTL is effectively infinite, so only sessions end ephemeral entries.
"""

from __future__ import annotations

import collections
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import attrs
import trio

from spate import StoreError
from spate.store import (
    EphemeralSemantics,
    Keyspace,
    Revision,
    Session,
    SessionLost,
    Won,
    WriteResult,
)
from spate_stores.memory import MemoryServer, MemoryStore

EPHEMERAL = Keyspace.EPHEMERAL


@attrs.define(eq=False)
class FakeSession:
    """One lease: alive while beating; lost after a TTL without a confirmed beat."""

    last_confirmed: float
    lost: bool = False
    ended: bool = False
    beating: bool = True
    keys: set[str] = attrs.field(factory=set)

    def alive(self) -> bool:
        """Neither ended by its holder nor lost (a call, so each loop reads it afresh)."""
        return not self.ended and not self.lost


class SessionMemoryStore:
    """Session semantics over a MemoryStore; ``attach`` a nursery for the keepalives."""

    def __init__(self, server: MemoryServer, ttl: float) -> None:
        self.inner = MemoryStore(server=server, ephemeral_ttl=1e9)
        self.ttl = ttl
        self.sessions: list[FakeSession] = []
        self.writes: collections.Counter[tuple[str, str]] = collections.Counter()
        self._owner: dict[str, FakeSession] = {}
        self._nursery: trio.Nursery | None = None

    def attach(self, nursery: trio.Nursery) -> None:
        self._nursery = nursery

    @property
    def capabilities(self) -> Any:
        return attrs.evolve(self.inner.capabilities, ephemeral=EphemeralSemantics.SESSION)

    @property
    def ephemeral_ttl(self) -> float:
        return self.ttl

    async def __aenter__(self) -> SessionMemoryStore:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        return None

    @asynccontextmanager
    async def session(self) -> AsyncIterator[FakeSession]:
        assert self._nursery is not None
        session = FakeSession(last_confirmed=trio.current_time())
        self.sessions.append(session)
        self._nursery.start_soon(self._keep_alive, session)
        try:
            yield session
        finally:
            session.ended = True
            await self._drop(session)

    async def _keep_alive(self, session: FakeSession) -> None:
        while session.alive():
            await trio.sleep(self.ttl / 3)
            if session.ended:
                return
            if session.beating:
                session.last_confirmed = trio.current_time()
            elif trio.current_time() - session.last_confirmed >= self.ttl:
                session.lost = True
                await self._drop(session)

    async def _drop(self, session: FakeSession) -> None:
        for key in list(session.keys):
            if self._owner.get(key) is session:
                del self._owner[key]
                await self.inner.delete(EPHEMERAL, key)
        session.keys.clear()

    def _check(self, keyspace: Keyspace, session: Session | None) -> FakeSession | None:
        if keyspace is not EPHEMERAL:
            return None
        assert isinstance(session, FakeSession), "the protocol wrote an ephemeral key sessionless"
        if session.lost:
            raise SessionLost("the fake session was lost")
        if session.ended:
            raise StoreError("the fake session has ended")
        return session

    def _own(self, session: FakeSession | None, key: str, result: WriteResult) -> None:
        if session is not None and isinstance(result, Won):
            self._owner[key] = session
            session.keys.add(key)

    def _count(self, kind: str, keyspace: Keyspace, key: str) -> None:
        self.writes[(kind, f"{keyspace.value}:{key.split('.')[1]}")] += 1

    async def get(self, keyspace: Keyspace, key: str) -> Any:
        return await self.inner.get(keyspace, key)

    async def list(self, keyspace: Keyspace, prefix: str) -> Any:
        return await self.inner.list(keyspace, prefix)

    def list_pages(self, keyspace: Keyspace, prefix: str, *, page_size: int) -> Any:
        return self.inner.list_pages(keyspace, prefix, page_size=page_size)

    def watch(self, keyspace: Keyspace, prefix: str, *, exact: bool = False) -> Any:
        return self.inner.watch(keyspace, prefix, exact=exact)

    async def create(
        self, keyspace: Keyspace, key: str, value: bytes, *, session: Session | None = None
    ) -> WriteResult:
        owner = self._check(keyspace, session)
        self._count("create", keyspace, key)
        result = await self.inner.create(keyspace, key, value)
        self._own(owner, key, result)
        return result

    async def update(
        self,
        keyspace: Keyspace,
        key: str,
        value: bytes,
        expected: Revision,
        *,
        session: Session | None = None,
    ) -> WriteResult:
        owner = self._check(keyspace, session)
        self._count("update", keyspace, key)
        result = await self.inner.update(keyspace, key, value, expected)
        self._own(owner, key, result)
        return result

    async def delete(
        self, keyspace: Keyspace, key: str, expected: Revision | None = None
    ) -> WriteResult:
        self._count("delete", keyspace, key)
        return await self.inner.delete(keyspace, key, expected)
