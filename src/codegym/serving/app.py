"""The model server's FastAPI app: the OpenAI API over a ``ServingEngine``.

Routes: ``GET /v1/models``, ``POST /v1/completions``, ``POST /v1/chat/completions``
(both also streamed: ``stream=true`` answers server-sent events ending ``data: [DONE]``),
``POST /v1/responses`` (the Responses API over the same engine), ``POST /v1/weights``
(``{"path": DIR_OR_SAFETENSORS}``), ``POST /v1/reload`` (``{}`` or ``{"path": ...}``) and
``GET /health``; with a ``WeightReceiver``, vLLM's weight-transfer and pause routes too
(``codegym.serving.weight_transfer``). Generation requests never wait on the event loop:
the policy decodes in its worker thread.

Auth: with ``api_key`` every ``/v1`` route needs ``Authorization: Bearer <api_key>``
(like vLLM's ``--api-key``). With ``weights_token`` the weight routes (and the
weight-transfer ones) need that token instead. Without either, anyone who can reach the
port can make the server load any safetensors file it can read: keep the default loopback
address, or set a token.

Errors are OpenAI error JSON, ``{"error": {"message", "type", "param", "code"}}`` with a
string ``code`` (or null), as clients expect: 400 for a bad field (the message names it;
``context_length_exceeded`` for a prompt and ``max_tokens`` past the context,
``unsupported`` for an option this server does not honour), 401 for a missing/wrong token
(``invalid_api_key``), 404 for an unknown model (``model_not_found``) or route, 500 for a
server fault. An error during a stream is sent as a last ``data: {"error": ...}`` event.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any, TypeVar

from fastapi import FastAPI, Request, Response
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, ValidationError

from codegym.policies.weight_wire import GROUP_HEADER
from codegym.serving.engine import RequestError, ServingEngine
from codegym.serving.protocol import (
    ChatRequest,
    CompletionRequest,
    InitTransferRequest,
    ReloadRequest,
    ResponsesRequest,
    StartUpdateRequest,
    UpdateWeightsRequest,
    WeightsRequest,
)
from codegym.serving.responses import as_chat, as_response, response_events
from codegym.serving.weight_transfer import WeightReceiver

log = logging.getLogger("codegym.serving")
M = TypeVar("M", bound=BaseModel)


def _json(body: Any, status: int = 200, version: int | None = None) -> Response:
    headers = {"x-policy-version": str(version)} if version is not None else None
    raw = json.dumps(body, separators=(",", ":"), allow_nan=False).encode()
    return Response(raw, status_code=status, media_type="application/json", headers=headers)


def error_body(status: int, message: str, param: str | None, code: str | None) -> dict[str, Any]:
    kind = {401: "authentication_error", 404: "not_found_error"}.get(
        status, "server_error" if status >= 500 else "invalid_request_error"
    )
    if code is None:
        code = {401: "invalid_api_key"}.get(status)
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


def error_response(
    status: int, message: str, param: str | None = None, code: str | None = None
) -> Response:
    return _json(error_body(status, message, param, code), status)


async def _sse(chunks: AsyncIterator[dict[str, Any]]) -> AsyncIterator[bytes]:
    """Server-sent events of ``chunks``, then ``[DONE]``; a failure is a last error event."""
    try:
        async for chunk in chunks:
            yield b"data: " + json.dumps(chunk, separators=(",", ":")).encode() + b"\n\n"
    except RequestError as e:
        body = error_body(e.status, str(e), e.param, e.code)
        yield b"data: " + json.dumps(body).encode() + b"\n\n"
    except Exception as e:
        log.exception("stream failed")
        body = error_body(500, f"server error: {type(e).__name__}: {e}", None, None)
        yield b"data: " + json.dumps(body).encode() + b"\n\n"
    yield b"data: [DONE]\n\n"


def _streamed(chunks: AsyncIterator[dict[str, Any]]) -> Response:
    headers = {"cache-control": "no-cache", "x-accel-buffering": "no"}
    return StreamingResponse(_sse(chunks), media_type="text/event-stream", headers=headers)


def _validation_message(e: ValidationError) -> tuple[str, str | None]:
    first = e.errors()[0]
    loc = ".".join(str(p) for p in first["loc"])
    more = f" (and {e.error_count() - 1} more)" if e.error_count() > 1 else ""
    return f"field {loc!r}: {first['msg']}{more}", (str(first["loc"][0]) if first["loc"] else None)


async def _parse(request: Request, model: type[M]) -> M | Response:
    raw = await request.body()
    try:
        body = json.loads(raw) if raw.strip() else {}
    except ValueError:
        return error_response(400, "the request body is not JSON; send a JSON object")
    if not isinstance(body, dict):
        return error_response(400, "the request body must be a JSON object")
    try:
        return model.model_validate(body)
    except ValidationError as e:
        message, param = _validation_message(e)
        return error_response(400, message, param)


def create_model_app(
    engine: ServingEngine,
    *,
    api_key: str | None = None,
    weights_token: str | None = None,
    receiver: WeightReceiver | None = None,
) -> FastAPI:
    """The app serving ``engine`` (see the module doc for routes and auth); with
    ``receiver``, vLLM's weight-transfer routes too (``codegym.serving.weight_transfer``)."""
    app = FastAPI(title="codegym model server", version="1")
    admin = weights_token or api_key

    def denied(request: Request, token: str | None) -> Response | None:
        if token is None:
            return None
        got = request.headers.get("authorization", "")
        if hmac.compare_digest(got.encode(), f"Bearer {token}".encode()):
            return None
        return error_response(401, "missing or wrong bearer token (Authorization: Bearer ...)")

    async def guarded(request: Request, token: str | None, call: Any) -> Response:
        if (refused := denied(request, token)) is not None:
            return refused
        try:
            result: Response = await call()
            return result
        except RequestError as e:
            return error_response(e.status, str(e), e.param, e.code)
        except Exception as e:
            log.exception("request failed")
            return error_response(500, f"server error: {type(e).__name__}: {e}")

    @app.get("/health")
    async def health() -> Response:
        body = {"status": "ok", "policy_version": engine.policy.policy_version}
        if engine.paused:
            body["paused"] = True  # generation is held for a weight update (/pause)
        return _json(body)

    @app.get("/v1/models")
    async def models(request: Request) -> Response:
        async def call() -> Response:
            return _json(engine.models(), version=engine.policy.policy_version)

        return await guarded(request, api_key, call)

    @app.post("/v1/completions")
    async def completions(request: Request) -> Response:
        async def call() -> Response:
            req = await _parse(request, CompletionRequest)
            if isinstance(req, Response):
                return req
            if req.stream:
                return _streamed(await engine.stream_complete(req))
            body = await engine.complete(req)
            return _json(body, version=body["policy_version"])

        return await guarded(request, api_key, call)

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> Response:
        async def call() -> Response:
            req = await _parse(request, ChatRequest)
            if isinstance(req, Response):
                return req
            if req.stream:
                return _streamed(await engine.stream_chat(req))
            body = await engine.chat(req)
            return _json(body, version=body["policy_version"])

        return await guarded(request, api_key, call)

    @app.post("/v1/responses")
    async def responses(request: Request) -> Response:
        async def call() -> Response:
            req = await _parse(request, ResponsesRequest)
            if isinstance(req, Response):
                return req
            chat = as_chat(req)
            if req.stream:
                return _streamed(response_events(req, await engine.stream_chat(chat)))
            return _json(as_response(req, await engine.chat(chat)))

        return await guarded(request, api_key, call)

    @app.post("/v1/weights")
    async def weights(request: Request) -> Response:
        async def call() -> Response:
            req = await _parse(request, WeightsRequest)
            if isinstance(req, Response):
                return req
            body = await engine.load_weights(req.path)
            log.info("weights loaded from %s: policy_version %s", req.path, body["policy_version"])
            return _json(body, version=body["policy_version"])

        return await guarded(request, admin, call)

    @app.post("/v1/reload")
    async def reload(request: Request) -> Response:
        async def call() -> Response:
            req = await _parse(request, ReloadRequest)
            if isinstance(req, Response):
                return req
            body = await engine.load_weights(req.path)
            return _json(body, version=body["policy_version"])

        return await guarded(request, admin, call)

    if receiver is not None:
        _transfer_routes(app, engine, receiver, lambda r, c: guarded(r, admin, c))
    return app


def _transfer_routes(
    app: FastAPI, engine: ServingEngine, receiver: WeightReceiver, guarded: Any
) -> None:
    """vLLM's weight-transfer and pause routes (at the root, as vLLM serves them).

    Their blocking calls (joining a group, receiving tensors) run on a pool of their own,
    so transfers that wait on a slow or hung trainer never hold the threads the rest of
    the server loads weights with.
    """
    pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="weight-transfer")
    loop_of: dict[str, asyncio.AbstractEventLoop] = {}

    async def blocking(fn: Any, *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(pool, partial(fn, *args))

    def resume_from_any_thread() -> None:
        loop = loop_of.get("loop")
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(engine.resume)

    receiver.on_abandon = resume_from_any_thread  # a given-up transfer unpauses the server

    def route(path: str, model: type[BaseModel] | None, act: Any, method: str = "post") -> None:
        async def handler(request: Request) -> Response:
            loop_of["loop"] = asyncio.get_running_loop()
            group = request.headers.get(GROUP_HEADER)

            async def call() -> Response:
                if model is None:
                    return _json(await act(None, group))
                req = await _parse(request, model)
                if isinstance(req, Response):
                    if act is update:  # the trainer is about to broadcast: fail it now
                        receiver.abandon()
                    return req
                return _json(await act(req, group))

            answer: Response = await guarded(request, call)
            return answer

        getattr(app, method)(path)(handler)

    async def world_size(_: None, group: str | None) -> dict[str, Any]:
        return {"world_size": 1}

    async def init(req: InitTransferRequest, group: str | None) -> dict[str, Any]:
        i = req.init_info
        out: dict[str, Any] = await blocking(
            receiver.init, i.master_address, i.master_port, i.rank_offset, i.world_size
        )
        return out

    async def start(req: StartUpdateRequest, group: str | None) -> dict[str, Any]:
        return receiver.start(req.is_checkpoint_format, group)

    async def update(req: UpdateWeightsRequest, group: str | None) -> dict[str, Any]:
        u = req.update_info
        call = partial(
            receiver.update,
            u.names,
            u.dtype_names,
            u.shapes,
            packed=u.packed,
            bucket_bytes=u.packed_buffer_size_bytes,
            group=group,
        )
        out: dict[str, Any] = await blocking(call)
        return out

    async def finish(_: None, group: str | None) -> dict[str, Any]:
        out: dict[str, Any] = await blocking(receiver.finish, group)
        return out

    async def pause(_: None, group: str | None) -> dict[str, Any]:
        engine.pause(lease_s=receiver.timeout_s)
        return {"status": "ok", "is_paused": True}

    async def resume(_: None, group: str | None) -> dict[str, Any]:
        engine.resume()
        return {"status": "ok", "is_paused": False}

    async def is_paused(_: None, group: str | None) -> dict[str, Any]:
        return {"is_paused": engine.paused}

    route("/get_world_size", None, world_size, "get")
    route("/init_weight_transfer_engine", InitTransferRequest, init)
    route("/start_weight_update", StartUpdateRequest, start)
    route("/update_weights", UpdateWeightsRequest, update)
    route("/finish_weight_update", None, finish)
    route("/pause", None, pause)
    route("/resume", None, resume)
    route("/is_paused", None, is_paused, "get")
