"""Client-side batching of ``run``/``run_python`` calls into ``POST /v1/batch``.

Why: on a loaded client most of a call's cost on both ends is the HTTP request itself
(docs/BENCHMARKS.md, service), and a client with many calls in flight has runs waiting
anyway. How: while fewer than ``Batching.after`` calls are out on requests of their own,
a call goes alone, so a lone call never waits. Past that, calls wait here and leave
together when one of those lone requests ends (a slot was freed) or after
``Batching.wait_s``. Each run keeps its own Idempotency-Key; a run the batch does not
answer — the instance died, refused the batch, or answered 429/503 for that run — goes
alone with the same key, through the client's usual retries and failover, so it never
runs twice on an instance.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import aiohttp
from pydantic import ValidationError

from codegym.sandbox import ExecResult, SandboxClosed, SandboxError, SandboxInputError
from codegym.service.models import BatchLine

if TYPE_CHECKING:
    from codegym.service.client import Batching, RemoteSandbox, _Instance

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

    def __init__(self, remote: RemoteSandbox, policy: Batching) -> None:
        self._remote = remote
        self._policy = policy
        self._alone = 0  # calls out on requests of their own
        self._waiting: list[_Waiting] = []
        self._timer: asyncio.TimerHandle | None = None
        self._open: set[_Waiting] = set()  # waiting, or sent and not yet answered
        self._tasks: set[asyncio.Task[None]] = set()
        self.enabled = True
        self._closed = False
        self.batches = 0
        self.batched_runs = 0

    async def run(self, body: bytes, wall_s: float) -> ExecResult:
        if not self.enabled or self._alone < self._policy.after:
            self._alone += 1
            try:
                return await self._remote._single(RUN, body, wall_s)
            finally:
                self._alone -= 1
                if self._waiting:
                    self.flush()
        loop = asyncio.get_running_loop()
        waiting = _Waiting(body, wall_s, loop.create_future())
        self._waiting.append(waiting)
        self._open.add(waiting)
        if len(self._waiting) >= self._policy.max_size:
            self.flush()
        elif self._timer is None:
            self._timer = loop.call_later(self._policy.wait_s, self.flush)
        try:
            return await waiting.future
        finally:
            self._open.discard(waiting)

    def flush(self) -> None:
        """Send every waiting call, in batches of at most ``max_size``."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        waiting = [w for w in self._waiting if not w.future.done()]
        self._waiting = []
        size = self._policy.max_size
        for start in range(0, len(waiting), size):
            self._spawn(self._send(waiting[start : start + size]))

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

    async def _send(self, runs: list[_Waiting]) -> None:
        unanswered = dict(enumerate(runs))
        try:
            await self._request(runs, unanswered)
        finally:
            for w in unanswered.values():  # each goes alone, with its key
                self._go_alone(w)

    def _go_alone(self, w: _Waiting) -> None:
        if not self._closed and not w.future.done():
            self._spawn(self._alone_again(w))

    async def _request(self, runs: list[_Waiting], unanswered: dict[int, _Waiting]) -> None:
        remote = self._remote
        items = b",".join(b'{"key":"%s","run":%s}' % (w.key.encode(), w.body) for w in runs)
        timeout = aiohttp.ClientTimeout(
            total=remote.retry.slack_s + sum(w.wall_s for w in runs),
            connect=remote.retry.connect_s,
        )
        inst = await remote._pick()
        self.batches += 1
        self.batched_runs += len(runs)
        inst.in_flight += len(runs)
        try:
            async with remote._session().post(
                inst.url + BATCH,
                data=b'{"runs":[' + items + b"]}",
                headers={"Content-Type": "application/json"},
                timeout=timeout,
            ) as resp:
                if resp.status != 200:
                    self._refused(inst, resp.status, runs)
                    return
                await self._read_lines(inst, resp, unanswered)
        except (aiohttp.ClientError, TimeoutError, ValidationError, ValueError) as e:
            if isinstance(e, aiohttp.ClientError | TimeoutError):
                remote._down(inst)
            log.debug("batch to %s ended early (%s); its open runs go alone", inst.url, e)
        finally:
            inst.in_flight -= len(unanswered)

    async def _read_lines(
        self, inst: _Instance, resp: aiohttp.ClientResponse, unanswered: dict[int, _Waiting]
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

    def _refused(self, inst: _Instance, status: int, runs: list[_Waiting]) -> None:
        if status in (401, 403):
            error = SandboxError(
                f"{inst.url} refused the token ({status}): pass the service's token as "
                "RemoteSandbox(token=...) or set CODEGYM_TOKEN"
            )
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
        if not w.future.done():
            w.future.set_result(result)


def _settle(w: _Waiting, line: BatchLine) -> bool:
    """Answer ``w`` from its line; False when it must be retried alone (429, 503, 5xx)."""
    if line.status == 200 and line.result is not None:
        if not w.future.done():
            w.future.set_result(line.result.to_result())
        return True
    if line.status in (400, 413, 422):
        if not w.future.done():
            w.future.set_exception(
                SandboxInputError(f"the sandbox service refused the request: {line.detail}")
            )
        return True
    return False
