"""The sandbox as an HTTP service, and the client that uses it through the Sandbox API.

Server: ``create_app(ServiceConfig(token=...))`` is a FastAPI app (``codegym sandbox serve``
runs it under uvicorn, see ``server.serve``). Client: ``RemoteSandbox(urls, token=...)``
has the methods and results of ``codegym.sandbox.Sandbox``, over one service or a pool.
Names load on first use, so the CLI does not pay for FastAPI unless it serves.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from codegym._lazy import lazy_package

if TYPE_CHECKING:  # what type checkers see; held to _LAZY by tests/test_exported_members.py
    from codegym.service._pool import Batching as Batching
    from codegym.service._pool import ServiceRetry as ServiceRetry
    from codegym.service._state import ServiceConfig as ServiceConfig
    from codegym.service.app import create_app as create_app
    from codegym.service.client import RemoteSandbox as RemoteSandbox
    from codegym.service.client import RemoteSession as RemoteSession
    from codegym.service.client import RemoteWorkspace as RemoteWorkspace
    from codegym.service.server import running as running
    from codegym.service.server import serve as serve

_LAZY = {
    "Batching": "codegym.service._pool",
    "RemoteSandbox": "codegym.service.client",
    "RemoteSession": "codegym.service.client",
    "RemoteWorkspace": "codegym.service.client",
    "ServiceConfig": "codegym.service._state",
    "ServiceRetry": "codegym.service._pool",
    "create_app": "codegym.service.app",
    "running": "codegym.service.server",
    "serve": "codegym.service.server",
}

__getattr__, __dir__, __all__ = lazy_package(__name__, _LAZY)
