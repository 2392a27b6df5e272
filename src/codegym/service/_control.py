"""Admission control and idempotency for the sandbox service (no HTTP in here).

``Admission``: at most ``slots`` executions run at once and at most ``queue`` more wait;
anything beyond is refused at once with ``Overloaded`` (the service answers 429 with
``Retry-After``). There is no unbounded queue anywhere: the waiting line is a semaphore's,
and its length is capped by the admission count.

``IdempotencyStore``: the first request with a key runs as its own task (so a client that
disconnects or times out does not cancel it); every request with the same key, during or
after the run, gets that run's answer. A key reused for a different request is a
``KeyReused`` error. Entries are bounded in number and age; a run that was refused
(``Overloaded``) or crashed leaves no entry, so a retry may run it.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import math
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

from codegym.errors import CodegymError

Reply = tuple[int, bytes]
"""An HTTP status and a JSON body."""


class Overloaded(CodegymError):
    """The admission queue is full."""

    exit_code = 3

    def __init__(self, retry_after_s: int) -> None:
        super().__init__(f"the sandbox service is at capacity; retry in {retry_after_s} s")
        self.retry_after_s = retry_after_s


class KeyReused(CodegymError):
    """An Idempotency-Key came back with a different request."""


class ServiceConfigError(CodegymError, ValueError):
    """The service was configured with a value it cannot run with; the message says the fix."""


class Admission:
    """A bounded admission queue in front of ``slots`` execution slots."""

    def __init__(self, slots: int, queue: int) -> None:
        if slots < 1 or queue < 0:
            raise ServiceConfigError(
                f"slots={slots}, queue={queue}: need slots >= 1 and queue >= 0"
            )
        self.slots = slots
        self.queue = queue
        self._sem = asyncio.Semaphore(slots)
        self.admitted = 0
        self.running = 0
        self.rejected = 0
        self._service_s = 0.05  # moving average of one execution, for Retry-After
        self._idle = asyncio.Event()
        self._idle.set()

    @property
    def waiting(self) -> int:
        return self.admitted - self.running

    def retry_after(self) -> int:
        """Whole seconds until a slot is likely free (at least 1: the header's unit)."""
        backlog = (self.waiting + 1) / self.slots * self._service_s
        return max(1, math.ceil(backlog))

    @contextlib.asynccontextmanager
    async def admit(self) -> AsyncIterator[None]:
        """Hold an execution slot.

        Raises:
            Overloaded: every slot is busy and the queue is full.
        """
        if self.admitted >= self.slots + self.queue:
            self.rejected += 1
            raise Overloaded(self.retry_after())
        self.admitted += 1
        self._idle.clear()
        try:
            async with self._sem:
                self.running += 1
                t0 = time.monotonic()
                try:
                    yield
                finally:
                    self.running -= 1
                    self._service_s += 0.1 * (time.monotonic() - t0 - self._service_s)
        finally:
            self.admitted -= 1
            if self.admitted == 0:
                self._idle.set()

    async def drained(self) -> None:
        """Return once nothing is admitted."""
        await self._idle.wait()


@dataclass
class _Entry:
    fingerprint: str
    task: asyncio.Task[Reply]
    created: float


class IdempotencyStore:
    """Answers keyed by ``Idempotency-Key``; bounded by ``max_entries`` and ``ttl_s``."""

    def __init__(self, max_entries: int = 10_000, ttl_s: float = 600.0) -> None:
        self.max_entries = max_entries
        self.ttl_s = ttl_s
        self._entries: OrderedDict[str, _Entry] = OrderedDict()
        self.replays = 0

    def __len__(self) -> int:
        return len(self._entries)

    async def run(self, key: str, fingerprint: str, work: Callable[[], Awaitable[Reply]]) -> Reply:
        """Run ``work`` once per key; later callers with the key get the same reply.

        Raises:
            KeyReused: the key was used for a request with another fingerprint.
            Overloaded: from ``work``; nothing is remembered then.
        """
        self._evict()
        entry = self._entries.get(key)
        if entry is not None:
            if entry.fingerprint != fingerprint:
                raise KeyReused(
                    "this Idempotency-Key was used for a different request; "
                    "use a fresh key for every distinct request"
                )
            self.replays += 1
        else:

            async def call() -> Reply:
                return await work()

            entry = _Entry(fingerprint, asyncio.create_task(call()), time.monotonic())
            self._entries[key] = entry
            entry.task.add_done_callback(functools.partial(self._settle, key, entry))
        # shield: the caller going away must not cancel a run another caller may collect
        return await asyncio.shield(entry.task)

    def _settle(self, key: str, entry: _Entry, task: asyncio.Task[Reply]) -> None:
        if task.cancelled() or task.exception() is not None:
            if self._entries.get(key) is entry:
                del self._entries[key]

    def _evict(self) -> None:
        now = time.monotonic()
        while self._entries:
            key, oldest = next(iter(self._entries.items()))
            too_many = len(self._entries) > self.max_entries
            if not oldest.task.done() or not (too_many or now - oldest.created > self.ttl_s):
                break
            del self._entries[key]
