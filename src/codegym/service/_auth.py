"""The bearer-token gate in front of every ``/v1`` route, and its OpenAPI description.

One ASGI layer, not a FastAPI dependency per route: no route can forget it, a refused
request is answered before its body is read, and it costs a few microseconds where the
dependency cost ~120 µs of CPU per request (FastAPI solves dependencies per request;
docs/BENCHMARKS.md, service).
"""

from __future__ import annotations

import hmac
import json
from typing import Any

from fastapi import FastAPI

from codegym.service._metrics import ASGIApp, Receive, Scope, Send

GUARDED_PREFIX = "/v1/"
SCHEME_NAME = "bearer"
_REFUSAL = json.dumps({"detail": "missing or wrong bearer token"}).encode()


class RequireToken:
    """Answer 401 to a ``/v1`` request whose ``Authorization`` is not ``Bearer <token>``
    (the scheme's case aside, as RFC 7235 says); the token is compared in constant time,
    so the time taken does not say how much of it matched."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app = app
        self._token = token.encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"].startswith(GUARDED_PREFIX):
            if not self._valid(scope):
                await _refuse(send)
                return
        await self.app(scope, receive, send)

    def _valid(self, scope: Scope) -> bool:
        value = next((v for k, v in scope["headers"] if k == b"authorization"), b"")
        scheme, _, given = value.partition(b" ")
        # compare_digest runs even for a wrong scheme, so the two take the same time
        same = hmac.compare_digest(given, self._token)
        return same and scheme.lower() == b"bearer"


async def _refuse(send: Send) -> None:
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(_REFUSAL)).encode()),
        (b"www-authenticate", b"Bearer"),
    ]
    await send({"type": "http.response.start", "status": 401, "headers": headers})
    await send({"type": "http.response.body", "body": _REFUSAL})


def document_token(app: FastAPI, description: str) -> None:
    """Declare the bearer scheme in ``app``'s OpenAPI spec and require it on every
    ``/v1`` operation (FastAPI only documents security that comes as a dependency)."""
    plain = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is not None:
            return app.openapi_schema
        spec = plain()  # FastAPI caches it on app.openapi_schema; amended in place
        schemes = spec.setdefault("components", {}).setdefault("securitySchemes", {})
        schemes[SCHEME_NAME] = {"type": "http", "scheme": "bearer", "description": description}
        for path, operations in spec.get("paths", {}).items():
            if path.startswith(GUARDED_PREFIX):
                for operation in operations.values():
                    operation["security"] = [{SCHEME_NAME: []}]
        return spec

    app.openapi = openapi  # type: ignore[method-assign]  # FastAPI's documented way
