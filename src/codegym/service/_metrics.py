"""The service's own Prometheus metrics (``codegym_service_*``) and the ASGI layers that
measure requests and cap body sizes.

Metrics live on prometheus_client's default registry, next to the sandbox's own
(``codegym_sandbox_*``), so one ``/metrics`` scrape shows both. They are module globals
because a registry refuses a name twice; several apps in one process share them.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from prometheus_client import Counter, Gauge, Histogram

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

REQUESTS = Counter(
    "codegym_service_requests",
    "HTTP requests answered, by route template, method and status.",
    ["route", "method", "status"],
)
LATENCY = Histogram(
    "codegym_service_request_seconds",
    "Time to answer an HTTP request, by route template.",
    ["route"],
    buckets=(0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
)
IN_FLIGHT = Gauge("codegym_service_in_flight", "HTTP requests being answered.")
QUEUED = Gauge("codegym_service_queue_depth", "Admitted executions waiting for a slot.")
REJECTED = Counter(
    "codegym_service_rejected",
    "Requests refused before running, by reason (overloaded = 429, draining = 503).",
    ["reason"],
)
WORKSPACES = Gauge(
    "codegym_service_workspaces_open", "Kept workspaces (of images) open in the service."
)
SESSIONS = Gauge("codegym_service_sessions_open", "Sandbox sessions open.")
SESSIONS_EXPIRED = Counter(
    "codegym_service_sessions_expired", "Sessions closed by the idle-TTL collector."
)
BATCH_RUNS = Counter("codegym_service_batch_runs", "Runs that came in /v1/batch requests.")
IDEMPOTENT_REPLAYS = Counter(
    "codegym_service_idempotent_replays",
    "Requests answered from an earlier run with the same Idempotency-Key.",
)


SERVICE_METRICS = (
    REQUESTS, LATENCY, IN_FLIGHT, QUEUED, REJECTED, WORKSPACES, SESSIONS, SESSIONS_EXPIRED,
    BATCH_RUNS, IDEMPOTENT_REPLAYS,
)  # fmt: skip
"""Every ``codegym_service_*`` metric (the dashboard's service row queries these)."""


class MeasureRequests:
    """Count and time every HTTP request by its route template (not its raw path, which
    would make one series per session id). A request answered before routing (a 401 from
    the token check) is labelled with the route it was for, found from ``routes``; the
    scrape of ``/metrics`` is not counted in flight (it would read 1 on an idle service)."""

    def __init__(self, app: ASGIApp, routes: Callable[[], list[Any]] | None = None) -> None:
        self.app = app
        self.routes = routes

    def _template(self, scope: Scope) -> str:
        route = scope.get("route")
        name = getattr(route, "path", None)
        if name is None and self.routes is not None:
            from starlette.routing import Match

            for candidate in self.routes():
                try:
                    match, _ = candidate.matches(scope)
                except (KeyError, TypeError):
                    continue
                if match is Match.FULL:
                    name = getattr(candidate, "path", None)
                    break
        return name or "unmatched"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        status = 500
        t0 = time.perf_counter()

        async def send_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        counted = scope.get("path") != "/metrics"
        if counted:
            IN_FLIGHT.inc()
        try:
            await self.app(scope, receive, send_status)
        finally:
            if counted:
                IN_FLIGHT.dec()
            name = self._template(scope)
            REQUESTS.labels(name, scope["method"], str(status)).inc()
            LATENCY.labels(name).observe(time.perf_counter() - t0)


DISCARD_BYTES = 64 << 20


class LimitBody:
    """Refuse request bodies over ``max_bytes`` with 413, before any handler reads them.

    A declared ``Content-Length`` over the cap is refused at once; a chunked body is
    counted as it arrives and refused when it crosses the cap, so nothing larger is ever
    buffered.
    """

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] in ("GET", "HEAD", "DELETE"):
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            await self._refuse(receive, send)
            return
        chunks: list[bytes] = []
        size = 0
        more = True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            body = message.get("body", b"")
            size += len(body)
            if size > self.max_bytes:
                more = message.get("more_body", False)
                await self._refuse(receive, send, more)
                return
            chunks.append(body)
            more = message.get("more_body", False)
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": b"".join(chunks), "more_body": False}
            return await receive()  # after the body: wait for the disconnect

        await self.app(scope, replay, send)

    async def _refuse(self, receive: Receive, send: Send, more: bool = True) -> None:
        # Read (and drop) what the client is still sending, up to a bound: closing on a
        # client mid-upload resets the connection and it never sees the 413.
        budget = DISCARD_BYTES
        while more and budget > 0:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            budget -= len(message.get("body", b""))
            more = message.get("more_body", False)
        body = (
            b'{"detail":"request body is larger than %d bytes; send less data '
            b'(big files: upload them one by one into a session)"}' % self.max_bytes
        )
        await send(
            {
                "type": "http.response.start",
                "status": 413,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                    (b"connection", b"close"),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})
