"""``RemoteSandbox``: the ``Sandbox`` API over HTTP, against one service or a pool of them.

    async with RemoteSandbox(["http://a:8080", "http://b:8080"], token=...) as sb:
        r = await sb.run_python("print(1)")          # an ExecResult, as in-process

Contract. The same methods, arguments and results as ``codegym.sandbox.Sandbox``:
``run_python``, ``run``, ``run_tests`` return ``ExecResult``; the caller's mistakes raise
``SandboxInputError`` (the service's 400/413/422 detail); a wrong token raises
``SandboxError``. Everything that is the service's fault — an instance that dies, hangs,
sheds load or drains — is retried and, when retries run out, comes back as
``Verdict.INFRA`` with a reason, never as an exception: infra failures are data.

Pool. Each call goes to the healthy instance with the fewest calls in flight (ties in
turn). A connection error or timeout marks an instance down for an exponential back-off
and the call is retried elsewhere with the same ``Idempotency-Key``, so an instance that
got the request before dying never makes it run twice on the same instance. A 429 sends
the call to another instance, or makes it wait ``Retry-After`` when none is free; a 503
(draining) keeps every call away from that instance for its ``Retry-After``. Failures are
bounded by ``ServiceRetry.attempts``, waiting on busy instances by
``ServiceRetry.patience_s``; every request has a timeout (the run's wall limit plus
``ServiceRetry.slack_s``).

Sessions are pinned to the instance that opened them: if it dies, the workspace is gone
and the session's calls return ``INFRA``, as an in-process session whose worker died.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import aiohttp
from pydantic import BaseModel, ValidationError

from codegym.sandbox import (
    ExecResult,
    FileTooLarge,
    Limits,
    SandboxError,
    SandboxInfraError,
    SandboxInputError,
    TestCase,
    WorkspaceError,
)
from codegym.sandbox.limits import check_path
from codegym.service._batch import (
    RUN,
    Batcher,
    input_refused,
    learn_capacity,
    token_refused,
)
from codegym.service._pool import Batching, Instance, ServiceRetry
from codegym.service.models import (
    ExecResultModel,
    FreezeRequest,
    Frozen,
    LimitsModel,
    RunRequest,
    SessionCreate,
    SessionInfo,
    TestsRequest,
    WorkspaceCreate,
    WorkspaceFork,
    WorkspaceForked,
    WorkspaceInfo,
    encode_data,
    tests_to_wire,
)

Text = str | bytes


@dataclass(frozen=True)
class _Failure:
    reason: str


@dataclass(frozen=True)
class _Reply:
    """An HTTP answer, read in full."""

    status: int
    retry_after: str | None
    content: bytes

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", "replace")


class RemoteSandbox:
    """A client for one sandbox service URL or a pool of them.

    Args:
        urls: base URL(s), e.g. ``"http://127.0.0.1:8080"``.
        token: bearer token (default: ``CODEGYM_TOKEN``).
        retry: retry and timeout policy.
        max_connections: HTTP connections kept per client.
        batching: when concurrent runs share a request (``None``: never).

    Raises:
        SandboxInputError: no URL, or a URL that is not http(s).
    """

    def __init__(
        self,
        urls: str | Sequence[str],
        token: str | None = None,
        *,
        retry: ServiceRetry | None = None,
        max_connections: int = 256,
        batching: Batching | None = Batching(),  # frozen: one default shared safely
    ) -> None:
        url_list = [urls] if isinstance(urls, str) else list(urls)
        if not url_list:
            raise SandboxInputError("RemoteSandbox needs at least one service URL")
        for u in url_list:
            if not u.startswith(("http://", "https://")):
                raise SandboxInputError(f"service URL {u!r} must start with http:// or https://")
        self._instances = [Instance(u.rstrip("/")) for u in url_list]
        self.retry = retry or ServiceRetry()
        token = token if token is not None else os.environ.get("CODEGYM_TOKEN")
        self._headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._max_connections = max_connections
        # aiohttp, not httpx: about 1.4 ms less per call on loopback here (httpx's
        # per-request cost; docs/BENCHMARKS.md). Made on first use, inside the event loop.
        self._http: aiohttp.ClientSession | None = None
        self._turn = 0
        self.infra_count = 0
        self.retries = 0
        self.batcher = Batcher(self, batching) if batching is not None else None

    UNKNOWN_WORKERS = 4
    """Workers assumed of an instance that has not answered yet."""

    @property
    def size(self) -> int:
        """Workers across the instances, as their last answers said (``UNKNOWN_WORKERS``
        for one not heard from yet): what ``Sandbox.size`` is for a local pool, so code
        that sizes its concurrency by it works with either."""
        return sum(i.workers or self.UNKNOWN_WORKERS for i in self._instances)

    async def __aenter__(self) -> RemoteSandbox:
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def start(self) -> None:
        """Nothing to start (the service owns its pool); kept for ``Sandbox`` parity."""

    async def close(self) -> None:
        if self.batcher is not None:
            self.batcher.close()
        if self._http is not None:
            await self._http.close()
            self._http = None

    def _session(self) -> aiohttp.ClientSession:
        if self._http is None:
            self._http = aiohttp.ClientSession(
                headers=self._headers,
                connector=aiohttp.TCPConnector(limit=self._max_connections),
            )
        return self._http

    # -- the Sandbox API -------------------------------------------------------------

    async def run_python(
        self,
        code: Text,
        stdin: Text = "",
        *,
        files: Mapping[str, Text] | None = None,
        limits: Limits | None = None,
        argv: Sequence[str] | None = None,
        workspace: str | None = None,
    ) -> ExecResult:
        """Run a Python program; see ``Sandbox.run_python`` (``workspace``: an image
        reference in the service's cache: a fresh workspace of it)."""
        req, limits = _run_request(code, None, argv, stdin, files, limits, workspace)
        return await self._exec(RUN, req, limits.wall)

    async def run(
        self,
        command: str | Sequence[str],
        stdin: Text = "",
        *,
        files: Mapping[str, Text] | None = None,
        limits: Limits | None = None,
        workspace: str | None = None,
    ) -> ExecResult:
        """Run a command; see ``Sandbox.run`` (``workspace`` as for ``run_python``)."""
        req, limits = _run_request(None, command, None, stdin, files, limits, workspace)
        return await self._exec(RUN, req, limits.wall)

    async def run_tests(
        self,
        code: Text | None,
        tests: Sequence[TestCase],
        *,
        command: str | Sequence[str] | None = None,
        build: str | Sequence[str] | None = None,
        files: Mapping[str, Text] | None = None,
        limits: Limits | None = None,
    ) -> ExecResult:
        """Run one program against many tests in one request; see ``Sandbox.run_tests``."""
        limits = _limits(limits)
        if not tests:
            raise SandboxInputError("run_tests needs at least one test case")
        req = TestsRequest(
            code=None if code is None else _code(code),
            command=None if command is None else _command(command),
            build=None if build is None else _command(build),
            tests=tests_to_wire(list(tests)),
            files=_files(files),
            limits=LimitsModel.of(limits),
        )
        steps = len(tests) + (1 if build is not None else 0)
        return await self._exec("/v1/tests", req, limits.wall * steps)

    def session(self, disk_mb: int = 256) -> RemoteSession:
        """A session on one instance of the pool; use ``async with``."""
        return RemoteSession(self, disk_mb)

    async def workspace(self, image: str, *, disk_mb: int = 256) -> RemoteWorkspace:
        """A kept workspace of ``image`` on one instance; see ``Sandbox.workspace``.

        Raises:
            SandboxError: no instance could open it (an unknown image, no image cache).
        """
        ws = RemoteWorkspace(self, image, disk_mb)
        await ws.start()
        return ws

    async def fork(self, image: str, n: int, *, disk_mb: int = 256) -> list[RemoteWorkspace]:
        """``n`` kept workspaces of one image, opened in one request on one instance."""
        body = WorkspaceFork(image=image, n=n, disk_mb=disk_mb).model_dump_json().encode()
        answer = await self._call("POST", "/v1/workspaces/fork", body, 120.0, expect=(201,))
        if isinstance(answer, _Failure):
            raise SandboxError(f"could not fork {image!r}: {answer.reason}")
        inst, resp = answer
        out = []
        for info in WorkspaceForked.model_validate_json(resp.content).workspaces:
            ws = RemoteWorkspace(self, image, disk_mb)
            ws._inst, ws.id = inst, info.id
            out.append(ws)
        return out

    # -- machinery -------------------------------------------------------------------

    async def _exec(
        self, path: str, req: BaseModel, wall_s: float, pin: Instance | None = None
    ) -> ExecResult:
        body = req.model_dump_json(exclude_none=True).encode()
        if path == RUN and pin is None and self.batcher is not None:
            return await self.batcher.run(body, wall_s)
        return await self._single(path, body, wall_s, pin)

    async def _single(
        self,
        path: str,
        body: bytes,
        wall_s: float,
        pin: Instance | None = None,
        key: str | None = None,
    ) -> ExecResult:
        """One execution on a request of its own (retried over the pool)."""
        answer = await self._call("POST", path, body, wall_s + self.retry.slack_s, pin, key=key)
        if isinstance(answer, _Failure):
            self.infra_count += 1
            return _infra(answer.reason)
        _, resp = answer
        try:
            return ExecResultModel.model_validate_json(resp.content).to_result()
        except ValidationError as e:
            self.infra_count += 1
            return _infra(f"the service sent an answer that is not an ExecResult: {e}")

    async def _pick(self, avoid: Instance | None = None, wait_s: float = 0.0) -> Instance:
        """The available instance with the fewest calls in flight (ties in turn), other than
        ``avoid`` when there is one; else, after ``wait_s`` or until the soonest instance
        is back (bounded), that one."""
        now = time.monotonic()
        n = len(self._instances)
        order = [self._instances[(self._turn + i) % n] for i in range(n)]
        self._turn = (self._turn + 1) % n
        ready = [i for i in order if i.unavailable_until <= now and i is not avoid]
        if ready:
            return min(ready, key=lambda i: i.in_flight)
        soonest = min(order, key=lambda i: i.unavailable_until)
        wait = max(wait_s, soonest.unavailable_until - now)
        await asyncio.sleep(min(wait, self.retry.max_backoff_s))
        return soonest

    async def _call(
        self,
        method: str,
        path: str,
        body: bytes | None,
        timeout_s: float,
        pin: Instance | None = None,
        expect: tuple[int, ...] = (200,),
        key: str | None = None,
    ) -> tuple[Instance, _Reply] | _Failure:
        """One logical request, retried over the pool under one Idempotency-Key.

        Raises:
            SandboxInputError: the service refused the input (400, 413, 422).
            SandboxError: the service refused the token (401, 403).
        """
        headers = {"Idempotency-Key": key or uuid.uuid4().hex, "Content-Type": "application/json"}
        timeout = aiohttp.ClientTimeout(total=timeout_s, connect=self.retry.connect_s)
        http = self._session()
        why = "no attempt was made"
        failures = 0
        give_up = time.monotonic() + self.retry.patience_s
        last: Instance | None = None
        busy_s = 0.0  # the last 429's Retry-After: how long to wait when nothing else is free
        while failures < self.retry.attempts and time.monotonic() < give_up:
            if last is not None:
                self.retries += 1
            if pin is not None:
                if last is not None:
                    wait = max(busy_s, pin.unavailable_until - time.monotonic())
                    await asyncio.sleep(
                        min(max(wait, self.retry.backoff_s), self.retry.max_backoff_s)
                    )
                inst = pin
            else:
                inst = await self._pick(last, busy_s)
            last, busy_s = inst, 0.0
            inst.in_flight += 1
            try:
                async with http.request(
                    method, inst.url + path, data=body, headers=headers, timeout=timeout
                ) as answer:
                    after = answer.headers.get("Retry-After")
                    learn_capacity(inst, answer.headers)
                    resp = _Reply(answer.status, after, await answer.read())
            except (aiohttp.ClientError, TimeoutError) as e:  # refused, reset, timed out
                failures += 1
                self._down(inst)
                why = f"{inst.url}: {type(e).__name__}: {e}".rstrip(": ")
                continue
            finally:
                inst.in_flight -= 1
            if resp.status in expect:
                inst.failures = 0
                return inst, resp
            detail = _detail(resp)
            if resp.status in (400, 422):
                raise input_refused(detail)
            if resp.status == 409:
                raise WorkspaceError(detail)
            if resp.status == 413:
                raise (FileTooLarge if method == "GET" else SandboxInputError)(detail)
            if resp.status in (401, 403):
                raise token_refused(inst.url, resp.status)
            why = f"{inst.url}: HTTP {resp.status}: {detail}"
            if resp.status == 404:
                return _Failure(why)  # a session that is gone stays gone
            retry_after = _retry_after(resp)
            if resp.status == 429:
                # Busy, not broken: this call goes elsewhere or waits Retry-After; other
                # calls still try it (a refusal costs the service far less than idling).
                busy_s = retry_after if retry_after is not None else self.retry.backoff_s
            elif retry_after is not None:  # 503: draining or starting; keep away a while
                wait = min(retry_after, self.retry.max_backoff_s)
                inst.unavailable_until = time.monotonic() + wait
            else:  # 500 and the like: back off as from a failure
                failures += 1
                self._down(inst)
        return _Failure(f"gave up after {failures} failed attempts; last: {why}")

    def _down(self, inst: Instance) -> None:
        wait = min(self.retry.backoff_s * 2**inst.failures, self.retry.max_backoff_s)
        inst.failures += 1
        inst.unavailable_until = time.monotonic() + wait


class RemoteSession:
    """A session on the service: files persist across commands until closed.

    Raises (``write_file``/``read_file``): ``FileNotFoundError`` for a missing file,
    ``SandboxError`` when the session is gone or the service failed.
    """

    _base = "/v1/sessions"
    _info: type[SessionInfo] | type[WorkspaceInfo] = SessionInfo

    def __init__(self, remote: RemoteSandbox, disk_mb: int = 256) -> None:
        self._remote = remote
        self._disk_mb = disk_mb
        self._inst: Instance | None = None
        self.id = ""

    async def __aenter__(self) -> RemoteSession:
        await self.start()
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def start(self) -> None:
        """Raises: SandboxError: no instance could open a session."""
        if self._inst is not None:
            return
        body = self._create_body()
        answer = await self._remote._call("POST", self._base, body, 60.0, expect=(201,))
        if isinstance(answer, _Failure):
            what = self._base.rsplit("/", 1)[-1][:-1]
            raise SandboxError(f"could not open a {what}: {answer.reason}")
        self._inst, resp = answer
        self.id = self._info.model_validate_json(resp.content).id

    def _create_body(self) -> bytes:
        return SessionCreate(disk_mb=self._disk_mb).model_dump_json().encode()

    async def close(self) -> None:
        if self._inst is None:
            return
        inst, self._inst = self._inst, None
        await self._remote._call(
            "DELETE", f"{self._base}/{self.id}", None, 30.0, inst, expect=(204, 404)
        )

    def _file_url(self, path: str) -> str:
        check_path(path)
        return f"{self._base}/{self.id}/files/{quote(path, safe='/')}"

    def _pinned(self) -> Instance:
        if self._inst is None:
            raise SandboxError("the session is not open; use 'async with sb.session()'")
        return self._inst

    async def run_python(
        self,
        code: Text,
        stdin: Text = "",
        *,
        files: Mapping[str, Text] | None = None,
        limits: Limits | None = None,
        argv: Sequence[str] | None = None,
    ) -> ExecResult:
        req, limits = _run_request(code, None, argv, stdin, files, limits)
        return await self._remote._exec(
            f"{self._base}/{self.id}/exec", req, limits.wall, self._pinned()
        )

    async def run(
        self,
        command: str | Sequence[str],
        stdin: Text = "",
        *,
        files: Mapping[str, Text] | None = None,
        limits: Limits | None = None,
    ) -> ExecResult:
        req, limits = _run_request(None, command, None, stdin, files, limits)
        return await self._remote._exec(
            f"{self._base}/{self.id}/exec", req, limits.wall, self._pinned()
        )

    async def write_file(self, path: str, content: Text) -> None:
        data = content.encode("utf-8", "surrogateescape") if isinstance(content, str) else content
        answer = await self._remote._call(
            "PUT", self._file_url(path), bytes(data), 60.0, self._pinned()
        )
        if isinstance(answer, _Failure):
            raise SandboxInfraError(f"could not write {path!r}: {answer.reason}")

    async def read_file(self, path: str) -> bytes:
        answer = await self._remote._call("GET", self._file_url(path), None, 60.0, self._pinned())
        if isinstance(answer, _Failure):
            if "no file" in answer.reason:
                raise FileNotFoundError(path)
            raise SandboxInfraError(f"could not read {path!r}: {answer.reason}")
        return answer[1].content


class RemoteWorkspace(RemoteSession):
    """A kept workspace of an image on the service (see ``Workspace``): a session whose
    files start as the image's, with its diff and freeze."""

    _base = "/v1/workspaces"
    _info = WorkspaceInfo

    def __init__(self, remote: RemoteSandbox, image: str, disk_mb: int = 256) -> None:
        super().__init__(remote, disk_mb)
        self.image = image

    def _create_body(self) -> bytes:
        return WorkspaceCreate(image=self.image, disk_mb=self._disk_mb).model_dump_json().encode()

    async def diff(self) -> str:
        """The patch from the image to this workspace."""
        answer = await self._remote._call(
            "GET", f"{self._base}/{self.id}/diff", None, 120.0, self._pinned()
        )
        if isinstance(answer, _Failure):
            raise SandboxError(f"could not diff workspace {self.id}: {answer.reason}")
        return answer[1].content.decode("utf-8", "replace")

    async def freeze(self, name: str | None = None) -> str:
        """Make the workspace's state an image on the service; returns its digest."""
        body = FreezeRequest(name=name).model_dump_json().encode()
        answer = await self._remote._call(
            "POST", f"{self._base}/{self.id}/freeze", body, 300.0, self._pinned()
        )
        if isinstance(answer, _Failure):
            raise SandboxError(f"could not freeze workspace {self.id}: {answer.reason}")
        return Frozen.model_validate_json(answer[1].content).image


def _run_request(
    code: Text | None,
    command: str | Sequence[str] | None,
    argv: Sequence[str] | None,
    stdin: Text,
    files: Mapping[str, Text] | None,
    limits: Limits | None,
    workspace: str | None = None,
) -> tuple[RunRequest, Limits]:
    """The one place a ``RunRequest`` is built (a program or a command, in the service's
    sandbox or a session's), with the limits it runs under."""
    limits = _limits(limits)
    req = RunRequest(
        code=None if code is None else _code(code),
        command=None if command is None else _command(command),
        argv=list(argv or []),
        stdin=encode_data(stdin),
        files=_files(files),
        limits=LimitsModel.of(limits),
        workspace=workspace,
    )
    return req, limits


def _limits(limits: Limits | None) -> Limits:
    if limits is None:
        return Limits()
    if not isinstance(limits, Limits):
        raise SandboxInputError(f"limits must be a Limits, got {type(limits).__name__}")
    return limits


def _code(code: Text) -> str:
    data = code.encode("utf-8", "surrogateescape") if isinstance(code, str) else bytes(code)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise SandboxInputError(
            f"code is not valid UTF-8 (byte {e.start}: {data[e.start : e.start + 4]!r}); "
            "decode the source to str first or fix its encoding"
        ) from None


def _command(command: str | Sequence[str]) -> str | list[str]:
    return command if isinstance(command, str) else list(command)


def _files(files: Mapping[str, Text] | None) -> dict[str, Any]:
    return {path: encode_data(content) for path, content in (files or {}).items()}


def _detail(resp: _Reply) -> str:
    try:
        detail = json.loads(resp.content).get("detail", resp.text)
    except (ValueError, AttributeError):
        return resp.text[:500]
    return detail if isinstance(detail, str) else str(detail)[:500]


def _retry_after(resp: _Reply) -> float | None:
    value = resp.retry_after
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        return None


def _infra(reason: str) -> ExecResult:
    return ExecResult.infra(reason)


if TYPE_CHECKING:
    from codegym.sandbox.api import SandboxAPI

    def _conforms(remote: RemoteSandbox) -> SandboxAPI:
        return remote  # mypy: RemoteSandbox is a SandboxAPI, as Sandbox is
