"""The sandbox service's open routes: ``/healthz`` (liveness), ``/readyz`` (readiness:
the pool ran code recently, or runs one shared probe) and ``/metrics`` (Prometheus)."""

# No `from __future__ import annotations`: FastAPI reads route annotations at runtime.
from fastapi import APIRouter, Response
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest

from codegym.service._state import HealthStatus, ServiceState, _json
from codegym.service.models import Health


def health_routes(router: APIRouter, state: ServiceState) -> None:
    """Add the health and metrics routes to ``router``."""

    # -- health and metrics -------------------------------------------------------

    def health(status: HealthStatus) -> Health:
        return Health(
            status=status,
            workers=state.sandbox.size if state.ready else 0,
            in_flight=state.admission.admitted,
            sessions=len(state.sessions),
            workspaces=len(state.workspaces),
        )

    @router.get("/healthz", response_model=Health)
    async def healthz() -> Health:
        """Liveness: the process answers."""
        return health("ok")

    @router.get("/readyz", response_model=Health, responses={503: {"model": Health}})
    async def readyz() -> Response:
        """Readiness: the pool is up and ran code recently (or runs ``print(1)`` now)."""
        status: HealthStatus = (
            "draining" if state.draining else "starting" if not state.ready else "ok"
        )
        if status == "ok" and not await state.probe_ready():
            status = "down"
        body = health(status).model_dump_json().encode()
        return _json(200 if status == "ok" else 503, body)

    @router.get("/metrics", response_class=Response)
    async def metrics() -> Response:
        """Prometheus text format: ``codegym_service_*`` and ``codegym_sandbox_*``."""
        return Response(generate_latest(REGISTRY), media_type=CONTENT_TYPE_LATEST)
