"""Support for the service tests: a real sandbox service on 127.0.0.1 (ephemeral port,
real jail sandbox), in this event loop or as a separate process that a test may kill;
``Hold``, a sandboxed step that lasts until the test ends it."""

from __future__ import annotations

import contextlib
import os
import secrets
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
from codegym.testing import await_until

TOKEN = "test-token-0123456789abcdef"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@dataclass
class Service:
    url: str
    app: FastAPI
    http: httpx.AsyncClient
    """A client with the token set."""


Serve = Callable[..., AbstractAsyncContextManager[Service]]

HELD = {"cpu_s": 1, "wall_s": 20}
"""Limits of a run that holds: its wall limit is the backstop that ends a ``Hold`` a
failed test never released, well past any handshake on a busy host."""


class Hold:
    """A step of a sandboxed run that lasts until the test ends it, in place of a sleep
    that guesses how long the test needs the run to go on.

    ``command`` is a ``sleep`` whose argument, unique to this hold, finds it among the
    host's processes; ``release(n)`` waits until ``n`` of them run, then kills them, and
    each run goes on after its ``sleep`` (``f"{hold.command}; echo late"`` prints). Give
    such runs ``HELD`` limits. As a context manager it kills what is left on the way out.
    """

    def __init__(self) -> None:
        self.marker = f"{10**6 + secrets.randbelow(10**8)}.5"  # seconds: past any wall limit
        self.command = f"sleep {self.marker}"
        self._released: set[int] = set()  # killed; a moment may pass before they are gone

    def pids(self) -> list[int]:
        """Host pids of the sleeps that run now and were not released."""
        want = f"sleep\0{self.marker}\0".encode()
        out = []
        for entry in os.scandir("/proc"):
            if entry.name.isdigit():
                with contextlib.suppress(OSError), open(f"{entry.path}/cmdline", "rb") as f:
                    if f.read() == want and int(entry.name) not in self._released:
                        out.append(int(entry.name))
        return out

    async def release(self, n: int = 1, *, timeout: float = 30.0) -> None:
        """Wait until ``n`` sleeps of this hold run (the runs reached their workers),
        then end them."""

        def running() -> list[int]:
            pids = self.pids()
            return pids if len(pids) >= n else []

        what = f"{n} run(s) holding on {self.command!r}"
        self._kill(await await_until(running, timeout=timeout, what=what))

    def _kill(self, pids: list[int]) -> None:
        self._released.update(pids)
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)

    def __enter__(self) -> Hold:
        return self

    def __exit__(self, *exc: object) -> None:
        self._kill(self.pids())


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
