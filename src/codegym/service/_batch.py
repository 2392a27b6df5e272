"""Client-side batching of ``run``/``run_python`` calls into ``POST /v1/batch``.

Why: under load most of a call's cost on both ends is its HTTP request, not its run
(docs/BENCHMARKS.md, service), and a client with many calls in flight has runs that would
only queue at the service anyway. How: every execution answer says how many workers its
instance has and how many runs it admits. While this client has fewer than
``Batching.per_worker`` runs per worker on the wire, a call goes out at once, alone, so
light traffic never waits. Past that mark, calls wait here, and leave together as soon as
the client is below it again, in batches up to what each instance admits (so they meet no
429 there either). After ``Batching.wait_s`` they leave even above the mark, as far as
the instances admit them; they wait longer only while every instance is full, or go
alone when no instance is up. Each run keeps its own
Idempotency-Key: a run the batch leaves unanswered (the instance died, refused the batch,
or answered 429/503 for that run) goes alone with the same key through the client's usual
retries and failover, and never runs twice on an instance.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Coroutine, Mapping
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from pydantic import ValidationError

from codegym.sandbox import ExecResult, SandboxClosed, SandboxError, SandboxInputError
from codegym.service._pool import Batching, Instance, Pool
from codegym.service.models import CAPACITY_ADMITS, CAPACITY_WORKERS, BatchLine

log = logging.getLogger("codegym.service")
RUN = "/v1/run"
BATCH = "/v1/batch"


@dataclass(eq=False)
class _Waiting:
    body: bytes  # the RunRequest's JSON
    wall_s: float
    future: asyncio.Future[ExecResult]
    key: str = field(default_factory=lambda: uuid.uuid4().hex)


class Batcher:
    """The waiting room and the batch requests of one ``RemoteSandbox``."""

    def __init__(self, remote: Pool, policy: Batching) -> None:
        self._remote = remote
        self._policy = policy
        self._waiting: list[_Waiting] = []
        self._timer: asyncio.TimerHandle | None = None
        self._open: set[_Waiting] = set()  # waiting, or sent and not yet answered
        self._tasks: set[asyncio.Task[None]] = set()
        self._closed = False
        self.enabled = True
        self.batches = 0
        self.batched_runs = 0

    async def run(self, body: bytes, wall_s: float) -> ExecResult:
        if not self.enabled or (not self._waiting and not self._full()):
            try:
                return await self._remote._single(RUN, body, wall_s)
            finally:
                self._flush_if_room()
        loop = asyncio.get_running_loop()
        waiting = _Waiting(body, wall_s, loop.create_future())
        self._waiting.append(waiting)
        self._open.add(waiting)
        if not self._full():
            self.flush()
        elif self._timer is None:
            self._timer = loop.call_later(self._policy.wait_s, self.flush, True)
        try:
            return await waiting.future
        finally:
            self._open.discard(waiting)

    def _full(self) -> bool:
        """Whether this client has its share of runs on the wire: ``per_worker`` per
        worker of the available instances (unknown until they answer: then never)."""
        now = time.monotonic()
        workers = out = 0
        for inst in self._remote._instances:
            out += inst.in_flight
            if inst.unavailable_until <= now:
                workers += inst.workers
        return workers > 0 and out >= self._policy.per_worker * workers

    def _flush_if_room(self) -> None:
        if self._waiting and not self._full():
            self.flush()

    def flush(self, timed_out: bool = False) -> None:
        """Send waiting calls in batches, each to the least busy instance, up to what it
        admits. When the wait ran out and no instance can be told apart (all down, or
        none has said its capacity), they go alone, to the usual retries."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        waiting = [w for w in self._waiting if not w.future.done()]
        if not self.enabled:  # the service has no /v1/batch
            self._waiting = []
            for w in waiting:
                self._go_alone(w)
            return
        now = time.monotonic()
        instances = [i for i in self._remote._instances if i.unavailable_until <= now and i.workers]
        while waiting:
            room = [(self._admits(i) - i.in_flight, i) for i in instances]
            room = [(free, i) for free, i in room if free > 0]
            if not room:
                break
            free, inst = max(room, key=lambda r: r[0])
            n = min(free, self._policy.max_size, len(waiting))
            batch, waiting = waiting[:n], waiting[n:]
            inst.in_flight += n  # taken now, so the next batch sees it
            self._spawn(self._send(inst, batch))
        self._waiting = waiting
        if waiting and timed_out and not instances:
            self._waiting = []
            for w in waiting:
                self._go_alone(w)
        elif waiting and self._timer is None:
            loop = asyncio.get_running_loop()
            self._timer = loop.call_later(self._policy.wait_s, self.flush, True)

    def _admits(self, inst: Instance) -> int:
        return inst.admits or int(self._policy.per_worker * inst.workers)

    def close(self) -> None:
        """Fail what is still waiting or unanswered (the client is closing)."""
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._waiting = []
        for task in self._tasks:
            task.cancel()
        for w in self._open:
            if not w.future.done():
                w.future.set_exception(SandboxClosed("the RemoteSandbox was closed"))
        self._open.clear()

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _send(self, inst: Instance, runs: list[_Waiting]) -> None:
        unanswered = dict(enumerate(runs))
        try:
            await self._request(inst, runs, unanswered)
        finally:
            inst.in_flight -= len(unanswered)
            for w in unanswered.values():  # each goes alone, with its key
                self._go_alone(w)
            self._flush_if_room()

    def _go_alone(self, w: _Waiting) -> None:
        if not self._closed and not w.future.done():
            self._spawn(self._alone_again(w))

    async def _request(
        self, inst: Instance, runs: list[_Waiting], unanswered: dict[int, _Waiting]
    ) -> None:
        remote = self._remote
        items = b",".join(b'{"key":"%s","run":%s}' % (w.key.encode(), w.body) for w in runs)
        timeout = aiohttp.ClientTimeout(
            total=remote.retry.slack_s + sum(w.wall_s for w in runs),
            connect=remote.retry.connect_s,
        )
        self.batches += 1
        self.batched_runs += len(runs)
        try:
            async with remote._session().post(
                inst.url + BATCH,
                data=b'{"runs":[' + items + b"]}",
                headers={"Content-Type": "application/json"},
                timeout=timeout,
            ) as resp:
                learn_capacity(inst, resp.headers)
                if resp.status != 200:
                    self._refused(inst, resp.status, runs)
                    return
                await self._read_lines(inst, resp, unanswered)
        except (aiohttp.ClientError, TimeoutError, ValidationError, ValueError) as e:
            if isinstance(e, aiohttp.ClientError | TimeoutError):
                remote._down(inst)
            log.debug("batch to %s ended early (%s); its open runs go alone", inst.url, e)

    async def _read_lines(
        self, inst: Instance, resp: aiohttp.ClientResponse, unanswered: dict[int, _Waiting]
    ) -> None:
        buf = bytearray()
        async for chunk in resp.content.iter_any():
            buf += chunk
            while (end := buf.find(b"\n")) >= 0:
                line = BatchLine.model_validate_json(bytes(buf[:end]))
                del buf[: end + 1]
                w = unanswered.pop(line.index, None)
                if w is None:
                    continue
                inst.in_flight -= 1
                if not _settle(w, line):
                    self._go_alone(w)  # 429/503 for this run: the lone path waits or fails over
            self._flush_if_room()

    def _refused(self, inst: Instance, status: int, runs: list[_Waiting]) -> None:
        if status in (401, 403):
            error = token_refused(inst.url, status)
            for w in runs:
                if not w.future.done():
                    w.future.set_exception(error)
        elif status in (404, 405):  # a service from before /v1/batch: calls go alone
            log.warning("%s has no %s; this client sends its runs one by one", inst.url, BATCH)
            self.enabled = False

    async def _alone_again(self, w: _Waiting) -> None:
        try:
            result = await self._remote._single(RUN, w.body, w.wall_s, key=w.key)
        except Exception as e:  # noqa: BLE001 - whatever it is, the caller must not hang
            if not w.future.done():
                w.future.set_exception(e)
            return
        finally:
            self._flush_if_room()
        if not w.future.done():
            w.future.set_result(result)


def input_refused(detail: str) -> SandboxInputError:
    """The error of a call whose input the service refused (400, 413, 422)."""
    return SandboxInputError(f"the sandbox service refused the request: {detail}")


def token_refused(url: str, status: int) -> SandboxError:
    """The error of a call whose token the service refused (401, 403)."""
    return SandboxError(
        f"{url} refused the token ({status}): pass the service's token as "
        "RemoteSandbox(token=...) or set CODEGYM_TOKEN"
    )


def learn_capacity(inst: Instance, headers: Mapping[str, str]) -> None:
    """Take the instance's workers and admission limit from an answer's headers."""
    workers, admits = headers.get(CAPACITY_WORKERS), headers.get(CAPACITY_ADMITS)
    if workers is not None and workers.isdigit():
        inst.workers = int(workers)
    if admits is not None and admits.isdigit():
        inst.admits = int(admits)


def _settle(w: _Waiting, line: BatchLine) -> bool:
    """Answer ``w`` from its line; False when it must be retried alone (429, 503, 5xx)."""
    if line.status == 200 and line.result is not None:
        if not w.future.done():
            w.future.set_result(line.result.to_result())
        return True
    if line.status in (400, 413, 422):
        if not w.future.done():
            w.future.set_exception(input_refused(str(line.detail)))
        return True
    return False
