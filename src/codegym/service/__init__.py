"""The sandbox as an HTTP service, and the client that uses it through the Sandbox API.

Server: ``create_app(ServiceConfig(token=...))`` is a FastAPI app (``codegym sandbox serve``
runs it under uvicorn, see ``server.serve``). Client: ``RemoteSandbox(urls, token=...)``
has the methods and results of ``codegym.sandbox.Sandbox``, over one service or a pool.
"""

from codegym.service.app import ServiceConfig, create_app
from codegym.service.client import RemoteSandbox, RemoteSession, Retry
from codegym.service.server import running, serve

__all__ = [
    "RemoteSandbox",
    "RemoteSession",
    "Retry",
    "ServiceConfig",
    "create_app",
    "running",
    "serve",
]
