"""The HTTP layer against callers who hold connections or hammer the open routes.

Real service on loopback; every wait is bounded and waits on state, never on a sleep.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time

import httpx
from service_support import Serve

from codegym.sandbox import Sandbox


class CountingSandbox(Sandbox):
    """A real sandbox that counts the programs it was asked to run."""

    runs = 0

    async def run_python(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        CountingSandbox.runs += 1
        return await super().run_python(*args, **kwargs)


def _counting(config):  # type: ignore[no-untyped-def]
    return CountingSandbox(tier=config.tier, workers=config.workers)


async def test_readiness_checks_share_one_probe_run(serve: Serve) -> None:
    from service_support import TOKEN

    from codegym.service import ServiceConfig, create_app, running

    CountingSandbox.runs = 0
    app = create_app(ServiceConfig(token=TOKEN, workers=2, ready_every_s=60), _counting)
    async with running(app) as url, httpx.AsyncClient(base_url=url, timeout=60) as anon:
        answers = await asyncio.gather(*(anon.get("/readyz") for _ in range(150)))
        assert {a.status_code for a in answers} == {200}
        assert CountingSandbox.runs == 1  # one shared probe, not one per caller
        for _ in range(50):
            assert (await anon.get("/readyz")).status_code == 200
        assert CountingSandbox.runs == 1  # and none again within ready_every_s


def _connect(url: str) -> socket.socket:
    host, port = url.removeprefix("http://").split(":")
    s = socket.create_connection((host, int(port)), timeout=5)
    return s


async def _wait_until(check, within_s: float = 15.0):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + within_s
    while True:
        got = await check()
        if got or time.monotonic() > deadline:
            return got
        await asyncio.sleep(0.05)


async def test_half_sent_requests_are_closed_and_callers_get_through(serve: Serve) -> None:
    async with serve(header_timeout_s=0.5, max_connections=24) as svc:
        held = [_connect(svc.url) for _ in range(20)]
        for i, s in enumerate(held):  # nothing, or half a request head
            if i % 2:
                s.sendall(b"POST /v1/run HTTP/1.1\r\nHost: x\r\nAuthoriz")
        try:
            # the server closes every one of them after the head deadline
            def closed(s: socket.socket) -> bool:
                s.settimeout(0.01)
                try:
                    return s.recv(1) == b""
                except (TimeoutError, BlockingIOError):
                    return False
                except OSError:
                    return True

            async def all_closed() -> bool:
                return all(closed(s) for s in held)

            assert await _wait_until(all_closed)
            r = await svc.http.post("/v1/run", json={"code": "print(1)"})
            assert r.status_code == 200 and r.json()["stdout"] == "1\n"
        finally:
            for s in held:
                s.close()


async def test_connections_beyond_the_cap_get_503_at_once(serve: Serve) -> None:
    async with serve(header_timeout_s=30, max_connections=8) as svc:
        host, port = svc.url.removeprefix("http://").split(":")
        held = [await asyncio.open_connection(host, int(port)) for _ in range(8)]
        try:
            reader, writer = await asyncio.open_connection(host, int(port))
            async with asyncio.timeout(10):
                head = await reader.read(4096)
            assert head.startswith(b"HTTP/1.1 503") and b"retry-after: 1" in head
            writer.close()
        finally:
            for _, w in held:
                w.close()

        # once they are gone, callers get through again
        async def served() -> bool:
            with contextlib.suppress(httpx.HTTPError):
                r = await svc.http.post("/v1/run", json={"code": "print(2)"})
                return r.status_code == 200
            return False

        assert await _wait_until(served)
