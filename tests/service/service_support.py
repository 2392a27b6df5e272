"""Support for the service tests: a real sandbox service on 127.0.0.1 (ephemeral port,
real jail sandbox), in this event loop or as a separate process that a test may kill."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass

import httpx
import pytest
from fastapi import FastAPI

from codegym.service import ServiceConfig, create_app, running

TOKEN = "test-token-0123456789abcdef"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@dataclass
class Service:
    url: str
    app: FastAPI
    http: httpx.AsyncClient
    """A client with the token set."""


Serve = Callable[..., AbstractAsyncContextManager[Service]]


def make_serve() -> Serve:
    """``async with serve(workers=1, queue=0) as svc``: a service with that config."""

    @contextlib.asynccontextmanager
    async def start(**overrides: object) -> AsyncIterator[Service]:
        options: dict[str, object] = {"token": TOKEN, "workers": 2}
        options.update(overrides)
        app = create_app(ServiceConfig(**options))  # type: ignore[arg-type]
        async with (
            running(app) as url,
            httpx.AsyncClient(base_url=url, headers=AUTH, timeout=60) as http,
        ):
            yield Service(url, app, http)

    return start


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Process:
    url: str
    proc: subprocess.Popen[bytes]


@contextlib.contextmanager
def service_process(*args: str, ready_s: float = 30.0) -> Iterator[Process]:
    """``python -m codegym.service`` (what ``codegym sandbox serve`` runs) on a free port."""
    port = free_port()
    cmd = [sys.executable, "-m", "codegym.service", "--port", str(port), *args]
    env = {**os.environ, "CODEGYM_TOKEN": TOKEN}
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + ready_s
        while True:
            if proc.poll() is not None:
                out = proc.stdout.read().decode() if proc.stdout else ""
                pytest.fail(f"the service exited with {proc.returncode}: {out[-2000:]}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{url}/readyz", timeout=1).status_code == 200:
                    break
            if time.monotonic() > deadline:
                pytest.fail("the service did not become ready")
            time.sleep(0.1)
        yield Process(url, proc)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
        proc.wait(10)
