"""The sandbox as an HTTP service, and the client that uses it through the Sandbox API.

Server: ``create_app(ServiceConfig(token=...))`` is a FastAPI app (``codegym sandbox serve``
runs it under uvicorn, see ``server.serve``). Client: ``RemoteSandbox(urls, token=...)``
has the methods and results of ``codegym.sandbox.Sandbox``, over one service or a pool.
Names load on first use, so the CLI does not pay for FastAPI unless it serves.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from codegym._lazy import lazy_exports

if TYPE_CHECKING:
    from codegym.service._pool import Batching, ServiceRetry
    from codegym.service.app import ServiceConfig, create_app
    from codegym.service.client import RemoteSandbox, RemoteSession, RemoteWorkspace
    from codegym.service.server import running, serve

_LAZY = {
    "Batching": "codegym.service._pool",
    "ServiceConfig": "codegym.service.app",
    "create_app": "codegym.service.app",
    "RemoteSandbox": "codegym.service.client",
    "RemoteSession": "codegym.service.client",
    "RemoteWorkspace": "codegym.service.client",
    "ServiceRetry": "codegym.service._pool",
    "running": "codegym.service.server",
    "serve": "codegym.service.server",
}


__getattr__ = lazy_exports(__name__, _LAZY)

__all__ = [
    "Batching",
    "RemoteSandbox",
    "RemoteSession",
    "RemoteWorkspace",
    "ServiceConfig",
    "ServiceRetry",
    "create_app",
    "running",
    "serve",
]
