"""Run the sandbox service under uvicorn, with a graceful shutdown.

Shutdown contract (SIGTERM or SIGINT): the service stops taking work at once (new
``/v1`` requests get 503 + Retry-After, so a pooled client moves to another instance;
``/readyz`` turns 503 so a load balancer stops routing), uvicorn stops accepting
connections, every admitted execution runs to its end (up to ``drain_s``), then sessions
and the sandbox pool close and the process exits 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import threading
from collections.abc import AsyncIterator, Generator
from types import FrameType

import uvicorn
from fastapi import FastAPI

from codegym.service._http import fd_headroom, guarded
from codegym.service.app import ServiceConfig, create_app

log = logging.getLogger("codegym.service")


class _DrainingServer(uvicorn.Server):
    """uvicorn, plus: the app refuses new work from the moment the signal arrives."""

    def __init__(self, config: uvicorn.Config, app: FastAPI) -> None:
        super().__init__(config)
        self._app = app

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        # uvicorn re-raises the signal after shutting down, so the process dies "by
        # SIGTERM"; a drained shutdown is a clean one, so exit 0 instead.
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        old = {s: signal.signal(s, self.handle_exit) for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for s, handler in old.items():
                signal.signal(s, handler)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        self._app.state.service.draining = True
        log.info("signal %d: draining in-flight work, then exiting", sig)
        super().handle_exit(sig, frame)


class _EmbeddedServer(_DrainingServer):
    """Leaves the host program's signal handlers alone."""

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield


def _uvicorn_config(
    app: FastAPI, host: str, port: int, drain_s: float, log_level: str
) -> uvicorn.Config:
    service = app.state.service.config
    cap = service.max_connections or fd_headroom()
    return uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level=log_level,
        access_log=False,  # per-request logs cost more than the request; /metrics counts them
        timeout_graceful_shutdown=int(drain_s),
        timeout_keep_alive=30,
        lifespan="on",
        loop="auto",  # uvloop (a dependency): less CPU per request than asyncio's loop
        # a deadline for every request head and a cap on connections (see _http)
        http=guarded(service.header_timeout_s, cap),
    )


def serve(
    config: ServiceConfig,
    host: str = "127.0.0.1",
    port: int = 8080,
    *,
    drain_s: float = 60.0,
    log_level: str = "info",
) -> None:
    """Serve until SIGTERM/SIGINT, then drain and return.

    Raises:
        HostUnsupported: the host cannot run the configured tier (at start-up).
    """
    app = create_app(config)
    server = _DrainingServer(_uvicorn_config(app, host, port, drain_s, log_level), app)
    server.run()
    if not server.started:
        raise SystemExit(f"the sandbox service could not start on {host}:{port}")


@contextlib.asynccontextmanager
async def running(
    app: FastAPI, host: str = "127.0.0.1", port: int = 0, *, drain_s: float = 30.0
) -> AsyncIterator[str]:
    """Serve ``app`` inside the current event loop; yields its base URL (``port=0``: any
    free port). On exit the server drains like on SIGTERM. For tests and embedding."""
    server = _EmbeddedServer(_uvicorn_config(app, host, port, drain_s, "warning"), app)
    task = asyncio.create_task(server.serve())
    while not server.started:
        if task.done():
            await task  # re-raise why it could not start
            raise RuntimeError("the sandbox service exited during start-up")
        await asyncio.sleep(0.01)
    sock = server.servers[0].sockets[0]
    bound_host, bound_port = sock.getsockname()[:2]
    try:
        yield f"http://{bound_host}:{bound_port}"
    finally:
        app.state.service.draining = True
        server.should_exit = True
        await task
