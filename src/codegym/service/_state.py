"""What the sandbox service's route groups share: its configuration, the state one app
instance owns (pool, admission, idempotency, sessions, workspaces, readiness), and the
small HTTP helpers (error bodies, JSON answers)."""

# No `from __future__ import annotations`: FastAPI reads route annotations at runtime.
import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

from fastapi import HTTPException, Response

from codegym.sandbox import Sandbox, SandboxError, Session
from codegym.service import _metrics as m
from codegym.service._control import Admission, IdempotencyStore, Overloaded, ServiceConfigError
from codegym.service.models import IDEMPOTENCY_KEY_MAX, ErrorBody
from codegym.service.sessions import SessionManager


@dataclass(frozen=True)
class ServiceConfig:
    """How the service runs. ``token`` is required unless ``auth=False`` is explicit.

    Raises:
        ServiceConfigError: a missing or short token, or a value out of range.
    """

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
            raise ServiceConfigError(
                "the sandbox service needs a bearer token: pass --token or set CODEGYM_TOKEN "
                "(or --no-auth to run without one, on a trusted network only)"
            )
        if self.token is not None and len(self.token) < 16 and self.auth:
            raise ServiceConfigError(
                "the token is shorter than 16 characters; use a long random one"
            )
        if not 0 < self.header_timeout_s <= 3600:
            raise ServiceConfigError(
                f"header timeout {self.header_timeout_s!r}: use 0 < seconds <= 3600"
            )
        if self.max_connections is not None and self.max_connections < 1:
            raise ServiceConfigError(f"max connections {self.max_connections!r}: use at least 1")


HealthStatus = Literal["ok", "starting", "draining", "down"]
SandboxFactory = Callable[[ServiceConfig], Sandbox]


def _default_sandbox(config: ServiceConfig) -> Sandbox:
    return Sandbox(tier=config.tier, workers=config.workers, images=config.image_cache)


class ServiceState:
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
