"""Open sandbox sessions held by the service, with a cap, an idle TTL and garbage collection.

The same manager holds the service's kept workspaces (``noun="workspace"``): anything with
``run``/``run_python``/``write_file``/``read_file`` and ``close``.

Contract: at most ``max_open`` sessions exist at once (``SessionLimit`` beyond that); a
session untouched for ``idle_ttl_s`` is closed by the collector (never while a request is
using it); ``close_all`` closes every session on shutdown. Each session is a
``codegym.sandbox.Session`` (one warm worker with a persistent workspace), so a leaked
session would leak a jail; the collector is what makes that impossible.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from prometheus_client import Gauge

from codegym.errors import CodegymError
from codegym.sandbox import Session
from codegym.service import _metrics as m

log = logging.getLogger("codegym.service")

SessionFactory = Callable[[int], Session]
"""Makes an unstarted session with the given workspace size in MB."""


class SessionLimit(CodegymError):
    """Too many sessions are open."""


class UnknownSession(CodegymError, KeyError):
    """No open session has this id (never existed, closed, or expired)."""


class _Entry:
    __slots__ = ("busy", "last_used", "lock", "session")

    def __init__(self, session: Any) -> None:
        self.session = session
        self.lock = asyncio.Lock()  # one command at a time: a session has one worker
        self.busy = 0
        self.last_used = time.monotonic()


class SessionManager:
    """Owns the service's sessions.

    Args:
        factory: makes a session (``lambda disk_mb: Session(tier, disk_mb=disk_mb)``);
            None for a manager whose objects come through ``add``.
        max_open: cap on open sessions.
        idle_ttl_s: close a session idle this long.
        noun: what it holds, for messages; gauge: the gauge of how many are open.
    """

    def __init__(
        self,
        factory: SessionFactory | None,
        max_open: int,
        idle_ttl_s: float,
        noun: str = "session",
        gauge: Gauge = m.SESSIONS,
    ) -> None:
        self._factory = factory
        self.noun = noun
        self._gauge = gauge
        self.max_open = max_open
        self.idle_ttl_s = idle_ttl_s
        self._entries: dict[str, _Entry] = {}
        self._starting = 0
        self._gc_task: asyncio.Task[None] | None = None
        self.expired = 0

    def __len__(self) -> int:
        return len(self._entries)

    async def open(self, disk_mb: int) -> str:
        """Start a session and return its id.

        Raises:
            SessionLimit: ``max_open`` sessions are open already.
            HostUnsupported: the host cannot run the tier.
        """

        async def start() -> list[Any]:
            assert self._factory is not None
            session = self._factory(disk_mb)
            await session.start()
            return [session]

        return (await self.add(start, 1))[0]

    async def add(self, make: Callable[[], Awaitable[list[Any]]], n: int) -> list[str]:
        """Hold ``n`` new objects (a session, or kept workspaces) that ``make`` starts;
        their ids, in order.

        Raises:
            SessionLimit: fewer than ``n`` more may be open.
        """
        if len(self._entries) + self._starting + n > self.max_open:
            raise SessionLimit(f"{self.max_open} {self.noun}s are open; close one or wait")
        self._starting += n
        try:
            made = await make()
        finally:
            self._starting -= n
        ids = []
        for obj in made:
            sid = secrets.token_urlsafe(16)
            self._entries[sid] = _Entry(obj)
            ids.append(sid)
        self._gauge.set(len(self._entries))
        return ids

    @contextlib.asynccontextmanager
    async def use(self, sid: str) -> AsyncIterator[Any]:
        """Hold a session for one request; the collector leaves it alone meanwhile.

        Raises:
            UnknownSession: no such open session.
        """
        entry = self._entries.get(sid)
        if entry is None:
            raise UnknownSession(sid)
        entry.busy += 1
        try:
            async with entry.lock:
                if self._entries.get(sid) is not entry:  # closed while we waited
                    raise UnknownSession(sid)
                yield entry.session
        finally:
            entry.busy -= 1
            entry.last_used = time.monotonic()

    async def close(self, sid: str) -> None:
        """Raises: UnknownSession: no such open session."""
        entry = self._entries.pop(sid, None)
        if entry is None:
            raise UnknownSession(sid)
        self._gauge.set(len(self._entries))
        async with entry.lock:  # let a running command finish first
            await entry.session.close()

    async def collect(self) -> int:
        """Close sessions idle longer than the TTL; returns how many."""
        now = time.monotonic()
        stale = [
            sid
            for sid, e in self._entries.items()
            if e.busy == 0 and now - e.last_used > self.idle_ttl_s
        ]
        # take them all out (and say so in the gauge) before the slow closes, so nothing
        # reads a session count that includes sessions already gone
        gone = [(sid, e) for sid in stale if (e := self._entries.pop(sid, None)) is not None]
        self.expired += len(gone)
        m.SESSIONS_EXPIRED.inc(len(gone))
        self._gauge.set(len(self._entries))
        for sid, entry in gone:
            log.info("session %s idle for %.0f s: closed", sid[:6], now - entry.last_used)
            try:
                await entry.session.close()
            except Exception:  # one failed close must not leave the others open
                log.exception("closing idle session %s failed", sid[:6])
        return len(gone)

    def start_collector(self) -> None:
        async def loop() -> None:
            # a quarter of the TTL: a session outlives its TTL by at most 25%
            period = max(0.05, min(self.idle_ttl_s / 4, 30.0))
            while True:
                await asyncio.sleep(period)
                try:
                    await self.collect()
                except Exception:  # a failing close must not stop collection
                    log.exception("session garbage collection failed")

        self._gc_task = asyncio.create_task(loop(), name="codegym-session-gc")

    async def close_all(self) -> None:
        if self._gc_task is not None:
            self._gc_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._gc_task
        entries, self._entries = list(self._entries.values()), {}
        self._gauge.set(0)
        await asyncio.gather(*(e.session.close() for e in entries), return_exceptions=True)
