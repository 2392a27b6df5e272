"""The sandbox as an HTTP service: ``create_app(config) -> FastAPI``.

Routes (all JSON unless said; ``/v1/*`` need ``Authorization: Bearer <token>``):

    POST   /v1/run                          one execution (Sandbox.run_python / run)
    POST   /v1/tests                        one program, many tests (Sandbox.run_tests)
    POST   /v1/batch                        many runs, one JSON line each as it ends
    POST   /v1/sessions                     open a session -> {id, idle_ttl_s}
    POST   /v1/sessions/{id}/exec           run in the session's workspace
    PUT    /v1/sessions/{id}/files/{path}   upload raw bytes
    GET    /v1/sessions/{id}/files/{path}   download raw bytes
    DELETE /v1/sessions/{id}                close it
    GET    /healthz  /readyz  /metrics  /openapi.json      (no token)

Contract. An execution answers 200 with the ExecResult fields, whatever the program did;
``verdict: "infra"`` means the sandbox failed, not the program. 400: a bad input (names
it and the fix); 401: missing or wrong token; 404: unknown session or file; 413: body or
file too large; 429 + Retry-After: the admission queue is full (nothing ran); 503 +
Retry-After: draining or starting (nothing ran). ``Idempotency-Key`` on a POST makes a
retry return the first answer without running twice, also while the first still runs.
A batch's runs are each what ``/v1/run`` would be with their ``key``: admitted, refused
(429) or answered on their own line. Execution answers carry ``X-Codegym-Workers`` and
``X-Codegym-Admits`` (runs at once; runs admitted before 429), so a client can keep just
enough work here.

Threat model of the HTTP layer: the token guards every ``/v1`` route, in one ASGI layer
(``_auth``) that answers before the body is read, and is compared in constant time; health
and metrics are open and carry no secrets. Bodies are capped before they are buffered;
file paths are relative, without ``..`` or NUL. Code isolation is the sandbox tier's job
(see ``codegym.sandbox.tiers``).
"""

# No `from __future__ import annotations`: FastAPI reads the route closures' annotations at
# runtime, and string annotations could not see the closure's local names.
import asyncio
import contextlib
import hashlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

from fastapi import FastAPI, HTTPException, Request, Response
from fastapi.responses import StreamingResponse
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest
from pydantic import BaseModel

from codegym.sandbox import (
    ExecResult,
    Sandbox,
    SandboxClosed,
    SandboxError,
    SandboxInputError,
    Session,
)
from codegym.service import _metrics as m
from codegym.service._auth import RequireToken, document_token
from codegym.service._control import Admission, IdempotencyStore, KeyReused, Overloaded, Reply
from codegym.service._kept import Deps, add_kept_routes, add_workspace_routes
from codegym.service.models import (
    CAPACITY_ADMITS,
    CAPACITY_WORKERS,
    IDEMPOTENCY_KEY_MAX,
    BatchItem,
    BatchLine,
    BatchRequest,
    Data,
    ErrorBody,
    ExecResultModel,
    Health,
    RunRequest,
    SessionCreate,
    SessionInfo,
    TestsRequest,
    decode_data,
)
from codegym.service.sessions import SessionLimit, SessionManager

log = logging.getLogger("codegym.service")


@dataclass(frozen=True)
class ServiceConfig:
    """How the service runs. ``token`` is required unless ``auth=False`` is explicit."""

    token: str | None = None
    """Bearer token every ``/v1`` request must carry."""
    auth: bool = True
    """Set False only on purpose (``--no-auth``): anyone who can connect may run code."""
    tier: str = "jail"
    """Sandbox tier: jail, gvisor or process."""
    workers: int | None = None
    """Executions at once (default: CPU count)."""
    queue: int | None = None
    """Executions that may wait for a slot (default: 4 × workers); more get 429."""
    max_sessions: int = 32
    """Open sessions at most (each holds one warm jail)."""
    image_cache: str | None = None
    """The image cache whose images runs and kept workspaces may use (None: no images)."""
    max_workspaces: int = 256
    """Open kept workspaces at most (each a tmpfs in a pool worker; idle ones expire too)."""
    session_ttl_s: float = 300.0
    """Idle seconds before a session is closed."""
    max_body_bytes: int = 32 << 20
    """Largest request body; larger gets 413."""
    max_file_bytes: int = 16 << 20
    """Largest single file (in a request or uploaded); larger gets 413."""
    idempotency_ttl_s: float = 600.0
    """How long an answer is kept for a retried Idempotency-Key."""
    header_timeout_s: float = 10.0
    """A connection whose request head (line and headers) takes longer is closed."""
    max_connections: int | None = None
    """Open connections at most; more get 503 at once (default: what the fd limit allows)."""
    ready_every_s: float = 10.0
    """``/readyz`` runs its own probe at most this often, and only when no run succeeded
    in that time; concurrent checks share one probe."""

    def __post_init__(self) -> None:
        if self.auth and not self.token:
            raise ValueError(
                "the sandbox service needs a bearer token: pass --token or set CODEGYM_TOKEN "
                "(or --no-auth to run without one, on a trusted network only)"
            )
        if self.token is not None and len(self.token) < 16 and self.auth:
            raise ValueError("the token is shorter than 16 characters; use a long random one")
        if not 0 < self.header_timeout_s <= 3600:
            raise ValueError(f"header timeout {self.header_timeout_s!r}: use 0 < seconds <= 3600")
        if self.max_connections is not None and self.max_connections < 1:
            raise ValueError(f"max connections {self.max_connections!r}: use at least 1")


HealthStatus = Literal["ok", "starting", "draining", "down"]
SandboxFactory = Callable[[ServiceConfig], Sandbox]


def _default_sandbox(config: ServiceConfig) -> Sandbox:
    return Sandbox(tier=config.tier, workers=config.workers, images=config.image_cache)


class _State:
    """Everything one app instance owns; lives on ``app.state.service``."""

    def __init__(self, config: ServiceConfig, sandbox: Sandbox) -> None:
        self.config = config
        self.sandbox = sandbox
        queue = config.queue if config.queue is not None else 4 * sandbox.size
        self.admission = Admission(sandbox.size, queue)
        # read at scrape time: a run waiting to be admitted is counted while it waits
        admission = self.admission
        m.QUEUED.set_function(lambda: admission.waiting)
        self.idempotency = IdempotencyStore(ttl_s=config.idempotency_ttl_s)
        self.sessions = SessionManager(
            lambda disk_mb: Session(config.tier, disk_mb=disk_mb),
            config.max_sessions,
            config.session_ttl_s,
        )
        self.workspaces = SessionManager(
            None, config.max_workspaces, config.session_ttl_s, "workspace", m.WORKSPACES
        )
        self.ready = False
        self.draining = False
        self.last_ok = 0.0  # monotonic time of the last execution that was not infra
        self.last_probe = -1e9  # monotonic time the readiness probe last ran
        self.probe_ok = False
        self.probe: asyncio.Task[bool] | None = None  # the one readiness probe in flight

    async def probe_ready(self) -> bool:
        """Whether the pool runs code: a recent good run, else one shared probe run.

        Unauthenticated callers reach this: however many ask at once or how often, it
        starts at most one ``print(1)`` per ``ready_every_s``, and that run goes through
        the same admission as everyone's.
        """
        now = time.monotonic()
        every = self.config.ready_every_s
        if now - self.last_ok <= every:
            return True
        if now - self.last_probe <= every and self.probe is None:
            return self.probe_ok
        if self.probe is None:
            self.last_probe = now
            self.probe = asyncio.create_task(self._probe())
            self.probe.add_done_callback(lambda _: setattr(self, "probe", None))
        return await asyncio.shield(self.probe)

    async def _probe(self) -> bool:
        try:
            async with asyncio.timeout(10):
                async with self.admission.admit():
                    r = await self.sandbox.run_python("print(1)")
        except (TimeoutError, SandboxError, Overloaded):
            self.probe_ok = False
            return False
        self.probe_ok = r.ok
        if r.ok:
            self.last_ok = time.monotonic()
        return r.ok


_ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorBody} for code in (400, 401, 404, 413, 429, 503)
}
# Read from the headers in ``once`` rather than declared as a parameter: FastAPI's per-
# request parameter solving cost ~50 µs of CPU per call (docs/BENCHMARKS.md, service).
_IDEMPOTENT: dict[str, Any] = {
    "parameters": [
        {
            "name": "Idempotency-Key",
            "in": "header",
            "required": False,
            "schema": {"type": "string", "maxLength": IDEMPOTENCY_KEY_MAX},
            "description": "Retries with the same key get the first answer; the run happens once.",
        }
    ]
}


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


class Answer(NamedTuple):
    """What an execution route answers: status, JSON body, Retry-After (429, 503)."""

    status: int
    body: bytes
    retry_after: int | None = None


def _detail(text: str) -> bytes:
    return ErrorBody(detail=text).model_dump_json().encode()


def _json(status: int, body: bytes, headers: dict[str, str] | None = None) -> Response:
    return Response(body, status, headers, media_type="application/json")


def _error(status: int, detail: str, retry_after: int | None = None) -> HTTPException:
    headers = {"Retry-After": str(retry_after)} if retry_after is not None else None
    return HTTPException(status, detail, headers)


def create_app(
    config: ServiceConfig, sandbox_factory: SandboxFactory = _default_sandbox
) -> FastAPI:
    """Build the service. The sandbox pool starts with the app and closes after it drains.

    Raises:
        SandboxInputError: a bad tier or worker count in ``config``.
    """
    state = _State(config, sandbox_factory(config))

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await state.sandbox.start()
        state.sessions.start_collector()
        state.workspaces.start_collector()
        state.ready = True
        log.info("sandbox service ready: %s tier, %d workers", config.tier, state.sandbox.size)
        try:
            yield
        finally:
            state.draining = True
            state.ready = False
            await state.admission.drained()  # uvicorn already waited for open requests
            await state.sessions.close_all()
            await state.workspaces.close_all()
            await state.sandbox.close()

    app = FastAPI(
        title="codegym sandbox service",
        version="1",
        summary="Run untrusted code in the codegym sandbox over HTTP.",
        lifespan=lifespan,
    )
    app.state.service = state
    # On every execution answer, so a client can keep just enough runs here (RemoteSandbox
    # batching): how many run at once, and how many are admitted before 429.
    capacity = {
        CAPACITY_WORKERS: str(state.admission.slots),
        CAPACITY_ADMITS: str(state.admission.slots + state.admission.queue),
    }

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

    async def execute(sb: Any, req: RunRequest) -> ExecResult:
        limits = req.limits.to_limits()
        files = files_of(req.files)
        stdin = decode_data(req.stdin, "stdin")
        if (req.code is None) == (req.command is None):
            raise SandboxInputError("pass either code (Python) or command, not both or neither")
        # a session or kept workspace is its own workspace; the pool takes an image's
        where = {"workspace": req.workspace} if sb is state.sandbox and req.workspace else {}
        result: ExecResult
        if req.code is not None:
            result = await sb.run_python(
                req.code, stdin, files=files, limits=limits, argv=req.argv, **where
            )
        else:
            assert req.command is not None
            result = await sb.run(req.command, stdin, files=files, limits=limits, **where)
        return result

    # -- stateless execution ----------------------------------------------------

    def executes(
        path: str, name: str | None = None
    ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """The decorator of a route that runs code and answers an ExecResult."""
        return app.post(
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

    @app.post(
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

    # -- sessions -----------------------------------------------------------------

    @app.post(
        "/v1/sessions",
        response_model=SessionInfo,
        status_code=201,
        responses=_ERRORS,
    )
    async def open_session(req: SessionCreate | None = None) -> SessionInfo:
        """Open a workspace whose files persist across commands until closed or idle."""
        if state.draining:
            raise _error(503, "the sandbox service is draining", retry_after=1)
        try:
            sid = await state.sessions.open((req or SessionCreate()).disk_mb)
        except SessionLimit as e:
            m.REJECTED.labels("sessions").inc()
            raise _error(429, str(e), retry_after=max(1, int(config.session_ttl_s))) from None
        return SessionInfo(id=sid, idle_ttl_s=config.session_ttl_s)

    deps = Deps(executes, once, execute, _error, _ERRORS, config.max_file_bytes)
    add_kept_routes(
        app,
        prefix="/v1/sessions",
        param="sid",
        noun="session",
        manager=state.sessions,
        names={
            "exec": "session_exec",
            "put": "put_file",
            "get": "get_file",
            "close": "close_session",
        },
        deps=deps,
    )
    add_workspace_routes(
        app,
        sandbox=state.sandbox,
        manager=state.workspaces,
        ttl_s=config.session_ttl_s,
        draining=lambda: state.draining,
        deps=deps,
    )

    # -- health and metrics -------------------------------------------------------

    def health(status: HealthStatus) -> Health:
        return Health(
            status=status,
            workers=state.sandbox.size if state.ready else 0,
            in_flight=state.admission.admitted,
            sessions=len(state.sessions),
            workspaces=len(state.workspaces),
        )

    @app.get("/healthz", response_model=Health)
    async def healthz() -> Health:
        """Liveness: the process answers."""
        return health("ok")

    @app.get("/readyz", response_model=Health, responses={503: {"model": Health}})
    async def readyz() -> Response:
        """Readiness: the pool is up and ran code recently (or runs ``print(1)`` now)."""
        status: HealthStatus = (
            "draining" if state.draining else "starting" if not state.ready else "ok"
        )
        if status == "ok" and not await state.probe_ready():
            status = "down"
        body = health(status).model_dump_json().encode()
        return _json(200 if status == "ok" else 503, body)

    @app.get("/metrics", response_class=Response)
    async def metrics() -> Response:
        """Prometheus text format: ``codegym_service_*`` and ``codegym_sandbox_*``."""
        return Response(generate_latest(REGISTRY), media_type=CONTENT_TYPE_LATEST)

    # outermost first: every request is measured, including refused big ones
    app.add_middleware(m.LimitBody, max_bytes=config.max_body_bytes)
    if config.auth:
        app.add_middleware(RequireToken, token=config.token or "")
        document_token(app, "The service token (--token).")
    app.add_middleware(m.MeasureRequests, routes=lambda: app.routes)
    return app
