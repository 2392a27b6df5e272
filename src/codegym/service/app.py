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

# No `from __future__ import annotations`: FastAPI reads route annotations at runtime.
import contextlib
import logging
from collections.abc import AsyncIterator

from fastapi import APIRouter, FastAPI

from codegym.service import _metrics as m
from codegym.service._auth import RequireToken, document_token
from codegym.service._exec_routes import exec_routes
from codegym.service._health_routes import health_routes
from codegym.service._session_routes import session_routes
from codegym.service._state import (
    HealthStatus,
    SandboxFactory,
    ServiceConfig,
    ServiceState,
    _default_sandbox,
)
from codegym.service.models import CAPACITY_ADMITS, CAPACITY_WORKERS

__all__ = ["HealthStatus", "SandboxFactory", "ServiceConfig", "create_app"]

log = logging.getLogger("codegym.service")


def create_app(
    config: ServiceConfig, sandbox_factory: SandboxFactory = _default_sandbox
) -> FastAPI:
    """Build the service. The sandbox pool starts with the app and closes after it drains.

    Raises:
        SandboxInputError: a bad tier or worker count in ``config``.
    """
    state = ServiceState(config, sandbox_factory(config))

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

    router = APIRouter()
    deps = exec_routes(router, state, capacity)
    session_routes(router, state, deps)
    health_routes(router, state)
    app.include_router(router)

    # outermost first: every request is measured, including refused big ones
    app.add_middleware(m.LimitBody, max_bytes=config.max_body_bytes)
    if config.auth:
        app.add_middleware(RequireToken, token=config.token or "")
        document_token(app, "The service token (--token).")
    # the router's own routes: FastAPI (0.16x) wraps an included router in one opaque
    # route whose match does not say which of its routes matched
    app.add_middleware(m.MeasureRequests, routes=lambda: [*router.routes, *app.routes])
    return app
