"""The sandbox service's execution routes: ``POST /v1/run``, ``/v1/tests`` and
``/v1/batch``, and the admission, idempotency and capacity headers every execution shares
(``Deps``, which the session and workspace routes take too)."""

# No `from __future__ import annotations`: FastAPI reads the route closures' annotations at
# runtime, and string annotations could not see the closure's local names.
import asyncio
import hashlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from fastapi import APIRouter, HTTPException, Request, Response
from fastapi.responses import StreamingResponse
from pydantic import BaseModel

from codegym.sandbox import ExecResult, SandboxClosed, SandboxInputError
from codegym.service import _metrics as m
from codegym.service._control import KeyReused, Overloaded, Reply
from codegym.service._kept import Deps, Runner
from codegym.service._state import (
    _ERRORS,
    _IDEMPOTENT,
    Answer,
    ServiceState,
    _detail,
    _error,
    _json,
)
from codegym.service.models import (
    IDEMPOTENCY_KEY_MAX,
    BatchItem,
    BatchLine,
    BatchRequest,
    Data,
    ErrorBody,
    ExecResultModel,
    RunRequest,
    TestsRequest,
    decode_data,
)

JSONL = "application/jsonl"  # FastAPI's name for streamed JSON lines


class _Lines(StreamingResponse):
    """JSON lines as they come; no media type on the class, so FastAPI documents only the
    route's own ``content`` (it would add ``{"type": "string"}`` for one)."""


def _line_schema() -> dict[str, Any]:
    """``BatchLine``'s schema, its nested models referred to in the spec's components
    (the execution routes put them there)."""
    schema = BatchLine.model_json_schema(ref_template="#/components/schemas/{model}")
    schema.pop("$defs", None)
    return schema


def exec_routes(router: APIRouter, state: ServiceState, capacity: dict[str, str]) -> Deps:
    """Add the execution routes to ``router``; return what the kept routes share."""
    config = state.config

    # -- helpers shared by the execution routes ---------------------------------

    async def answer(
        path: str, key: str | None, req: BaseModel, work: Callable[[], Awaitable[ExecResult]]
    ) -> Answer:
        """Admit and run ``work``, once per ``key``: the status and JSON body that ``POST
        path`` answers, and its Retry-After. A 413 from ``work`` is raised."""
        if state.draining or not state.ready:
            m.REJECTED.labels("draining").inc()
            why = "draining; retry on another instance" if state.draining else "starting"
            return Answer(503, _detail(f"the sandbox service is {why}"), 1)

        async def admitted() -> Reply:
            async with state.admission.admit():
                try:
                    result = await work()
                except SandboxInputError as e:
                    return 400, _detail(str(e))
                except SandboxClosed as e:
                    return 503, _detail(str(e))
            if state.admission.waiting:
                # Hand the slot over before answering: the next admitted run reaches its
                # worker now, not after this answer is built and sent (and after the
                # client, woken by it, has had the CPU). docs/BENCHMARKS.md, service.
                await asyncio.sleep(0)
            if not result.verdict.is_infra:
                state.last_ok = time.monotonic()
            return 200, ExecResultModel.of(result).model_dump_json().encode()

        try:
            if key is None:
                status, body = await admitted()
            else:
                # the parsed request, not its bytes: a run retried alone after it came in
                # a batch (or the other way round) is the same request
                request_text = f"POST {path}\n{req.model_dump_json()}"
                digest = hashlib.sha256(request_text.encode()).hexdigest()
                replays = state.idempotency.replays
                status, body = await state.idempotency.run(key, digest, admitted)
                if state.idempotency.replays != replays:
                    m.IDEMPOTENT_REPLAYS.inc()
        except Overloaded as e:
            m.REJECTED.labels("overloaded").inc()
            return Answer(429, _detail(str(e)), e.retry_after_s)
        except KeyReused as e:
            return Answer(400, _detail(str(e)))
        return Answer(status, body, 1 if status == 503 else None)

    async def once(
        request: Request, req: BaseModel, work: Callable[[], Awaitable[ExecResult]]
    ) -> Response:
        key = request.headers.get("idempotency-key")
        if key is not None and len(key) > IDEMPOTENCY_KEY_MAX:
            raise _error(
                400,
                f"Idempotency-Key is {len(key)} characters; use at most "
                f"{IDEMPOTENCY_KEY_MAX} (a UUID is 36)",
            )
        status, body, retry_after = await answer(request.scope["path"], key, req, work)
        if retry_after is None:
            return _json(status, body, capacity)
        return _json(status, body, {**capacity, "Retry-After": str(retry_after)})

    def files_of(files: dict[str, Data]) -> dict[str, bytes]:
        out = {}
        for path, value in files.items():
            data = decode_data(value, f"file {path!r}")
            if len(data) > config.max_file_bytes:
                raise _error(
                    413,
                    f"file {path!r} is {len(data)} bytes; the limit is "
                    f"{config.max_file_bytes} — upload big files into a session instead",
                )
            out[path] = data
        return out

    async def execute(sb: Runner, req: RunRequest) -> ExecResult:
        limits = req.limits.to_limits()
        files = files_of(req.files)
        stdin = decode_data(req.stdin, "stdin")
        if (req.code is None) == (req.command is None):
            raise SandboxInputError("pass either code (Python) or command, not both or neither")
        pool = state.sandbox
        if sb is pool and req.workspace:  # a run in a fresh workspace of an image
            if req.code is not None:
                return await pool.run_python(
                    req.code,
                    stdin,
                    files=files,
                    limits=limits,
                    argv=req.argv,
                    workspace=req.workspace,
                )
            assert req.command is not None
            return await pool.run(
                req.command, stdin, files=files, limits=limits, workspace=req.workspace
            )
        # the pool's plain run, or a session or kept workspace: its own workspace
        if req.code is not None:
            return await sb.run_python(req.code, stdin, files=files, limits=limits, argv=req.argv)
        assert req.command is not None
        return await sb.run(req.command, stdin, files=files, limits=limits)

    # -- stateless execution ----------------------------------------------------

    def executes(
        path: str, name: str | None = None
    ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """The decorator of a route that runs code and answers an ExecResult."""
        return router.post(
            path,
            response_model=ExecResultModel,
            responses=_ERRORS,
            openapi_extra=_IDEMPOTENT,
            name=name,
        )

    @executes("/v1/run")
    async def run(req: RunRequest, request: Request) -> Response:
        """Run one Python program (``code``) or command."""
        return await once(request, req, lambda: execute(state.sandbox, req))

    @executes("/v1/tests")
    async def run_tests(req: TestsRequest, request: Request) -> Response:
        """Run one program against many test cases; ``tests`` in the answer, in order."""

        async def work() -> ExecResult:
            return await state.sandbox.run_tests(
                req.code,
                req.test_cases(),
                command=req.command,
                build=req.build,
                files=files_of(req.files),
                limits=req.limits.to_limits(),
            )

        return await once(request, req, work)

    @router.post(
        "/v1/batch",
        response_class=_Lines,
        responses={
            200: {
                "description": "One BatchLine per run, one JSON object a line, in the "
                "order the runs end.",
                "content": {JSONL: {"itemSchema": _line_schema()}},
            },
            **_ERRORS,
        },
    )
    async def run_batch(batch: BatchRequest) -> _Lines:
        """Run many independent programs or commands, each as ``POST /v1/run`` with its
        ``key`` as Idempotency-Key would: admitted, run and answered on its own (a full
        queue refuses single runs, 429, not the batch). Saves the per-request cost of
        HTTP when a client has many runs waiting."""
        if state.draining or not state.ready:
            m.REJECTED.labels("draining").inc()
            raise _error(503, "the sandbox service is draining or starting", retry_after=1)
        m.BATCH_RUNS.inc(len(batch.runs))

        async def one(index: int, item: BatchItem) -> bytes:
            try:
                status, body, retry_after = await answer(
                    "/v1/run", item.key, item.run, lambda: execute(state.sandbox, item.run)
                )
            except HTTPException as e:  # 413: a file over the limit
                status, body, retry_after = e.status_code, _detail(str(e.detail)), None
            if status == 200:  # the answer's JSON as it is: no second encoding
                return b'{"index":%d,"status":200,"result":%b}\n' % (index, body)
            detail = ErrorBody.model_validate_json(body).detail
            line = BatchLine(index=index, status=status, detail=detail, retry_after=retry_after)
            return line.model_dump_json(exclude_none=True).encode() + b"\n"

        runs = [asyncio.ensure_future(one(i, item)) for i, item in enumerate(batch.runs)]

        async def lines() -> AsyncIterator[bytes]:
            pending = set(runs)
            try:
                while pending:
                    # runs that ended together leave in one write: a send costs more
                    # than its bytes (it wakes the client)
                    ended, pending = await asyncio.wait(pending, return_when="FIRST_COMPLETED")
                    yield b"".join(r.result() for r in ended)
            finally:  # the client went away: keyed runs go on (shielded) for its retry
                for r in runs:
                    r.cancel()

        return _Lines(lines(), headers=capacity, media_type=JSONL)

    return Deps(executes, once, execute, _error, _ERRORS, config.max_file_bytes)
