"""The sandbox service's HTTP layer alone: CPU per ``POST /v1/run`` through the ASGI app,
with no network and a sandbox that answers at once, against a bare FastAPI endpoint that
takes the same body model and returns the same answer (the framework's floor).

    .venv/bin/python benchmarks/service_app_bench.py [--requests 4000] [--rounds 5]

What it isolates: routing, the token gate, body parsing and validation, idempotency,
admission, metrics and the response, i.e. what the service adds per request on top of
uvicorn's socket work and the sandbox's own. Alternating rounds, medians.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
import uuid
from typing import Any

from fastapi import FastAPI, Response

from codegym.sandbox import ExecResult, Limits, Verdict
from codegym.service.app import ServiceConfig, create_app
from codegym.service.models import ExecResultModel, LimitsModel, RunRequest, encode_data

TOKEN = "bench-token-0123456789abcdef"
RESULT = ExecResult(
    verdict=Verdict.OK,
    exit_code=0,
    signal=None,
    stdout="1\n",
    stderr="",
    cpu_s=0.01,
    wall_s=0.002,
)
BODY = (
    RunRequest(code="print(1)", stdin=encode_data(""), limits=LimitsModel.of(Limits(2, 10)))
    .model_dump_json(exclude_none=True)
    .encode()
)


class _InstantSandbox:
    size = 2

    async def start(self) -> None:
        return None

    async def close(self) -> None:
        return None

    async def run_python(self, *args: Any, **kwargs: Any) -> ExecResult:
        return RESULT


def _service_app() -> Any:
    app = create_app(ServiceConfig(token=TOKEN), lambda config: _InstantSandbox())  # type: ignore[arg-type,return-value]
    app.state.service.ready = True  # no lifespan here: nothing to start
    return app


def _bare_app() -> FastAPI:
    app = FastAPI()
    answer = ExecResultModel.of(RESULT).model_dump_json().encode()

    @app.post("/v1/run")
    async def run(req: RunRequest) -> Response:
        return Response(answer, media_type="application/json")

    return app


async def _per_request_us(app: Any, n: int) -> float:
    headers = [
        (b"host", b"127.0.0.1:8080"),
        (b"authorization", f"Bearer {TOKEN}".encode()),
        (b"content-type", b"application/json"),
        (b"content-length", str(len(BODY)).encode()),
    ]

    async def one() -> None:
        sent: list[dict[str, Any]] = []
        delivered = False

        async def receive() -> dict[str, Any]:
            nonlocal delivered
            if not delivered:
                delivered = True
                return {"type": "http.request", "body": BODY, "more_body": False}
            await asyncio.sleep(3600)  # the app never waits for a disconnect here
            return {"type": "http.disconnect"}

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)

        key = (b"idempotency-key", uuid.uuid4().hex.encode())
        scope = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": "POST",
            "scheme": "http",
            "path": "/v1/run",
            "raw_path": b"/v1/run",
            "query_string": b"",
            "root_path": "",
            "server": ("127.0.0.1", 8080),
            "client": ("127.0.0.1", 50000),
            "headers": [*headers, key],
            "state": {},
        }
        await app(scope, receive, send)
        assert sent[0]["status"] == 200, sent

    t = time.process_time()
    for _ in range(n):
        await one()
    return (time.process_time() - t) / n * 1e6


async def _main(requests: int, rounds: int) -> None:
    apps = {"service app": _service_app(), "bare FastAPI endpoint": _bare_app()}
    for app in apps.values():
        await _per_request_us(app, 300)  # warm up
    got: dict[str, list[float]] = {name: [] for name in apps}
    for _ in range(rounds):
        for name, app in apps.items():
            got[name].append(await _per_request_us(app, requests))
    print(f"{requests} requests x {rounds} alternating rounds, CPU µs per request (median)")
    for name, xs in got.items():
        print(f"  {name:24}{statistics.median(xs):8.0f}   rounds: {[round(x) for x in xs]}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--requests", type=int, default=4000)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    asyncio.run(_main(args.requests, args.rounds))


if __name__ == "__main__":
    main()
