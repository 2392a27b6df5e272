"""The sandbox service's session and workspace routes: ``POST /v1/sessions`` and what
``_kept`` adds for sessions (exec, files, close) and kept workspaces of images."""

# No `from __future__ import annotations`: FastAPI reads route annotations at runtime.
from fastapi import APIRouter

from codegym.service import _metrics as m
from codegym.service._kept import Deps, add_kept_routes, add_workspace_routes
from codegym.service._state import _ERRORS, ServiceState, _error
from codegym.service.models import SessionCreate, SessionInfo
from codegym.service.sessions import SessionLimit


def session_routes(router: APIRouter, state: ServiceState, deps: Deps) -> None:
    """Add the session and workspace routes to ``router``."""
    config = state.config

    # -- sessions -----------------------------------------------------------------

    @router.post(
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

    add_kept_routes(
        router,
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
        router,
        sandbox=state.sandbox,
        manager=state.workspaces,
        ttl_s=config.session_ttl_s,
        draining=lambda: state.draining,
        deps=deps,
    )
