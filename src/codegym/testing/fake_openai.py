"""A real OpenAI-compatible HTTP server on loopback, with faults a test controls.

``FakeOpenAIServer`` runs FastAPI + uvicorn in a background thread on an ephemeral port of
127.0.0.1 and serves ``/v1/models``, ``/v1/completions`` and ``/v1/chat/completions``
(``n``, ``seed``, ``stop``, ``max_tokens``, logprobs, vLLM's ``return_token_ids``,
``return_tokens_as_token_ids``, usage; a completions ``prompt`` may be a list of token
ids). Tests and benchmarks talk to it over real sockets::

    with FakeOpenAIServer(latency_s=0.05) as srv:
        srv.fail("rate_limit", times=2, retry_after_s=0.1)   # the next 2 requests get 429
        srv.fail("drop", at=5)                                # the 5th request is cut off
        policy = OpenAIPolicy(srv.base_url, srv.model)

Text comes from ``responder(prompt, params, index) -> str | FakeReply`` (``index`` is the
sample's place among the request's ``n``); the default is deterministic in
(prompt, seed, index). The fake's tokenizer is one token per character, token id
``ord(char)``, so a test can check token ids against text exactly. ``max_tokens`` cuts the
text (finish reason ``length``) and ``stop`` ends it before the first stop string.

Faults (counted over generation requests, 1-based): ``rate_limit`` (429 + Retry-After),
``server_error`` (500), ``status`` (any status), ``garbage`` (200 with a body that is not
JSON), ``hang`` (no answer until ``hang_s`` or shutdown), ``drop`` (headers and half the
body, then the connection is closed). ``python -m codegym.testing.fake_openai --latency 0.05``
serves it from its own process (benchmarks: sharing the GIL with the client skews numbers).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import random
import socket
import threading
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import uvicorn
from fastapi import FastAPI, Request, Response
from starlette.types import Receive, Scope, Send

from codegym.policies.policy import Prompt, SamplingParams

FaultKind = Literal["rate_limit", "server_error", "status", "garbage", "hang", "drop"]


@dataclass(frozen=True)
class FakeReply:
    """A responder's answer when plain text is not enough."""

    text: str
    """The generated text (cut by ``max_tokens`` and ``stop`` like plain text)."""
    tool_calls: tuple[dict[str, Any], ...] = ()
    """Chat tool calls to return (finish reason ``tool_calls``)."""
    finish_reason: str | None = None
    """Force a finish reason; None derives it from max_tokens/stop."""


Responder = Callable[[Prompt, SamplingParams, int], "str | FakeReply"]


@dataclass(frozen=True)
class Fault:
    """One injected failure."""

    kind: FaultKind
    status: int = 500
    """HTTP status for ``kind="status"``."""
    retry_after_s: float | None = 1.0
    """Retry-After header for ``rate_limit`` (None: no header)."""
    hang_s: float = 3600.0
    """How long ``hang`` holds the request (it is also released at shutdown)."""


_WORDS = ("x", "y", "1", "len(x)", "x[0]", "sum(x)", "max(x)", "None", "True", "0")


def default_responder(prompt: Prompt, params: SamplingParams, index: int) -> str:
    """Deterministic in (prompt, seed, index): a short Python function body."""
    key = json.dumps(prompt, sort_keys=True) if not isinstance(prompt, str) else prompt
    digest = hashlib.sha256(f"{params.seed}|{index}|{key}".encode()).hexdigest()
    rng = random.Random(digest)
    expr = " + ".join(rng.choice(_WORDS) for _ in range(rng.randint(1, 4)))
    return f"    return {expr}\n"


def _cut(text: str, params: SamplingParams) -> tuple[str, str]:
    cuts = [text.find(s) for s in params.stop if s in text]
    if cuts:
        return text[: min(cuts)], "stop"
    if len(text) > params.max_tokens:
        return text[: params.max_tokens], "length"
    return text, "stop"


def _logprobs(text: str, seed: int | None, index: int) -> list[float]:
    rng = random.Random(f"lp|{seed}|{index}|{text}")
    return [-round(rng.random() * 2, 6) for _ in text]


def _is_id_list(value: Any) -> bool:
    return (
        isinstance(value, list)
        and bool(value)
        and all(isinstance(i, int) and not isinstance(i, bool) and 0 <= i < 0x110000 for i in value)
    )


def _render_chat(messages: Sequence[dict[str, Any]]) -> str:
    return "".join(f"<|{m.get('role')}|>{m.get('content') or ''}\n" for m in messages)


def _json(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    raw = json.dumps(body, separators=(",", ":")).encode()
    return Response(raw, status_code=status, media_type="application/json", headers=headers)


def _error(status: int, message: str, headers: dict[str, str] | None = None) -> Response:
    kind = (
        "rate_limit_error"
        if status == 429
        else "server_error"
        if status >= 500
        else "invalid_request_error"
    )
    return _json({"error": {"message": message, "type": kind, "code": status}}, status, headers)


class _DropFault(ConnectionAbortedError):
    """Raised on purpose by the ``drop`` fault so uvicorn closes the connection."""


class _QuietDrops(logging.Filter):
    """Keep uvicorn from logging a traceback for every intentional ``drop``."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.exc_info and isinstance(record.exc_info[1], _DropFault))


logging.getLogger("uvicorn.error").addFilter(_QuietDrops())


class _DroppedResponse(Response):
    """Promise a body, send half of it, then fail so uvicorn closes the connection."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"application/json"), (b"content-length", b"4096")],
            }
        )
        await send({"type": "http.response.body", "body": b'{"choices": [', "more_body": True})
        raise _DropFault("fake_openai: connection dropped on purpose (fault 'drop')")


class FakeOpenAIServer:
    """An OpenAI-compatible server on 127.0.0.1 in a background thread (see module doc)."""

    def __init__(
        self,
        *,
        responder: Responder | None = None,
        latency_s: float = 0.0,
        model: str = "fake-model",
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        self.responder: Responder = responder or default_responder
        self.latency_s = latency_s
        """Seconds each generation request waits before answering (settable at run time)."""
        self.model = model
        self._host = host
        self._port = port
        self._lock = threading.Lock()
        self._next_faults: deque[Fault] = deque()
        self._faults_at: dict[int, Fault] = {}
        self.requests = 0
        """Generation requests received (the index faults count against)."""
        self.in_flight = 0
        self.max_in_flight = 0
        """Most generation requests held at once since the last ``reset_stats``."""
        self.faults_served: list[tuple[int, FaultKind]] = []
        self.bodies: deque[dict[str, Any]] = deque(maxlen=1000)
        """The last 1000 generation request bodies, oldest first."""
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._release: asyncio.Event | None = None
        self.app = self._build_app()

    # ---- control -------------------------------------------------------------------

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:PORT/v1``."""
        if self._server is None:
            raise RuntimeError("FakeOpenAIServer is not running; use it as a context manager")
        return f"http://{self._host}:{self._port}/v1"

    def fail(
        self,
        kind: FaultKind,
        *,
        times: int = 1,
        at: int | Sequence[int] | None = None,
        status: int = 500,
        retry_after_s: float | None = 1.0,
        hang_s: float = 3600.0,
    ) -> None:
        """Inject a fault into the next ``times`` requests, or into request numbers ``at``."""
        fault = Fault(kind, status=status, retry_after_s=retry_after_s, hang_s=hang_s)
        with self._lock:
            if at is None:
                self._next_faults.extend([fault] * times)
            else:
                for i in [at] if isinstance(at, int) else at:
                    self._faults_at[i] = fault

    def clear_faults(self) -> None:
        with self._lock:
            self._next_faults.clear()
            self._faults_at.clear()

    def reset_stats(self) -> None:
        self.max_in_flight = self.in_flight
        self.faults_served = []
        self.bodies.clear()

    def __enter__(self) -> FakeOpenAIServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self._host, self._port))
        self._port = sock.getsockname()[1]
        config = uvicorn.Config(
            self.app,
            log_level="warning",
            access_log=False,
            lifespan="off",
            backlog=2048,
            timeout_graceful_shutdown=1,
            timeout_keep_alive=30,
        )
        server = uvicorn.Server(config)
        self._server = server
        self._thread = threading.Thread(
            target=server.run, kwargs={"sockets": [sock]}, name="fake-openai", daemon=True
        )
        self._thread.start()
        for _ in range(1000):  # up to 10 s for the loop to start serving
            if server.started:
                return
            if not self._thread.is_alive():
                break
            threading.Event().wait(0.01)
        raise RuntimeError(f"FakeOpenAIServer did not start on {self._host}:{self._port}")

    def stop(self) -> None:
        server, thread = self._server, self._thread
        if server is None or thread is None:
            return
        if self._loop is not None and self._release is not None:
            self._loop.call_soon_threadsafe(self._release.set)  # let hung requests finish
        server.should_exit = True
        thread.join(timeout=10)
        self._server = None
        self._thread = None

    # ---- serving -------------------------------------------------------------------

    def _take_fault(self) -> tuple[int, Fault | None]:
        with self._lock:
            self.requests += 1
            index = self.requests
            fault = self._faults_at.pop(index, None)
            if fault is None and self._next_faults:
                fault = self._next_faults.popleft()
        if fault is not None:
            self.faults_served.append((index, fault.kind))
        return index, fault

    async def _fault_response(self, fault: Fault) -> Response:
        if fault.kind == "rate_limit":
            headers = (
                {} if fault.retry_after_s is None else {"retry-after": f"{fault.retry_after_s:g}"}
            )
            return _error(429, "fake_openai: rate limited (injected fault)", headers)
        if fault.kind == "server_error":
            return _error(500, "fake_openai: internal error (injected fault)")
        if fault.kind == "status":
            return _error(fault.status, f"fake_openai: status {fault.status} (injected fault)")
        if fault.kind == "garbage":
            return Response(b'{"choices": [{"text": "oops', media_type="application/json")
        if fault.kind == "hang":
            assert self._release is not None
            try:
                await asyncio.wait_for(self._release.wait(), fault.hang_s)
            except TimeoutError:
                pass
            return _error(503, "fake_openai: hang released")
        return _DroppedResponse()

    async def _generate(self, request: Request, chat: bool) -> Response:
        if self._release is None:
            self._loop = asyncio.get_running_loop()
            self._release = asyncio.Event()
        _, fault = self._take_fault()
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            if fault is not None and fault.kind != "hang" and self.latency_s > 0:
                await asyncio.sleep(self.latency_s)
            if fault is not None:
                return await self._fault_response(fault)
            try:
                body = json.loads(await request.body())
            except ValueError:
                return _error(400, "fake_openai: the request body is not JSON")
            if not isinstance(body, dict):
                return _error(400, "fake_openai: the request body is not a JSON object")
            self.bodies.append(body)
            if self.latency_s > 0:
                await asyncio.sleep(self.latency_s)
            return self._answer(body, chat)
        finally:
            self.in_flight -= 1

    def _answer(self, body: dict[str, Any], chat: bool) -> Response:
        if body.get("model") != self.model:
            return _error(
                404, f"fake_openai: model {body.get('model')!r} not found; serving {self.model!r}"
            )
        stop = body.get("stop") or ()
        try:
            params = SamplingParams(
                temperature=float(body.get("temperature", 1.0)),
                top_p=float(body.get("top_p", 1.0)),
                max_tokens=int(body.get("max_tokens") or body.get("max_completion_tokens") or 16),
                n=int(body.get("n", 1)),
                seed=body.get("seed"),
                stop=(stop,) if isinstance(stop, str) else tuple(stop),
            )
        except (TypeError, ValueError) as e:
            return _error(400, f"fake_openai: bad sampling parameters: {e}")
        if chat:
            messages = body.get("messages")
            if not isinstance(messages, list) or not messages:
                return _error(400, "fake_openai: 'messages' must be a non-empty list")
            prompt: Prompt = messages
            prompt_text = _render_chat(messages)
        else:
            raw_prompt = body.get("prompt")
            if isinstance(raw_prompt, list) and _is_id_list(raw_prompt):
                # A token-id prompt (vLLM accepts one): the fake's tokenizer is chr/ord.
                prompt = prompt_text = "".join(map(chr, raw_prompt))
            elif isinstance(raw_prompt, str):
                prompt = prompt_text = raw_prompt
            else:
                return _error(
                    400, "fake_openai: 'prompt' must be one string or one list of token ids"
                )
        want_ids = bool(body.get("return_token_ids"))
        ids_as_tokens = bool(body.get("return_tokens_as_token_ids"))
        want_lp = bool(body.get("logprobs"))
        prompt_ids = [ord(c) for c in prompt_text]
        choices: list[dict[str, Any]] = []
        total_out = 0
        for index in range(params.n):
            reply = self.responder(prompt, params, index)
            if isinstance(reply, str):
                reply = FakeReply(reply)
            text, finish = _cut(reply.text, params)
            if reply.tool_calls:
                finish = "tool_calls"
            finish = reply.finish_reason or finish
            total_out += len(text)
            ids = [ord(c) for c in text]
            tokens = [f"token_id:{i}" for i in ids] if ids_as_tokens else list(text)
            lps = _logprobs(text, params.seed, index) if want_lp else None
            choice: dict[str, Any] = {"index": index, "finish_reason": finish, "stop_reason": None}
            if chat:
                message: dict[str, Any] = {"role": "assistant", "content": text}
                if reply.tool_calls:
                    message["tool_calls"] = list(reply.tool_calls)
                choice["message"] = message
                choice["logprobs"] = (
                    {
                        "content": [
                            {"token": t, "logprob": lp, "bytes": None, "top_logprobs": []}
                            for t, lp in zip(tokens, lps, strict=True)
                        ]
                    }
                    if lps is not None
                    else None
                )
            else:
                choice["text"] = text
                choice["logprobs"] = (
                    {
                        "tokens": tokens,
                        "token_logprobs": lps,
                        "top_logprobs": [{t: lp} for t, lp in zip(tokens, lps, strict=True)],
                        "text_offset": list(range(len(prompt_text), len(prompt_text) + len(text))),
                    }
                    if lps is not None
                    else None
                )
                if want_ids:
                    choice["prompt_token_ids"] = prompt_ids
            if want_ids:
                choice["token_ids"] = ids
            choices.append(choice)
        out: dict[str, Any] = {
            "id": f"fake-{self.requests}",
            "object": "chat.completion" if chat else "text_completion",
            "created": 0,
            "model": self.model,
            "choices": choices,
            "usage": {
                "prompt_tokens": len(prompt_ids),
                "completion_tokens": total_out,
                "total_tokens": len(prompt_ids) + total_out,
            },
        }
        if chat and want_ids:
            out["prompt_token_ids"] = prompt_ids
        return _json(out)

    def _build_app(self) -> FastAPI:
        app = FastAPI(
            title="codegym fake OpenAI server", openapi_url=None, docs_url=None, redoc_url=None
        )

        @app.get("/v1/models")
        async def models() -> Response:
            return _json(
                {
                    "object": "list",
                    "data": [{"id": self.model, "object": "model", "owned_by": "codegym"}],
                }
            )

        @app.post("/v1/completions")
        async def completions(request: Request) -> Response:
            return await self._generate(request, chat=False)

        @app.post("/v1/chat/completions")
        async def chat(request: Request) -> Response:
            return await self._generate(request, chat=True)

        return app


def humaneval_responder() -> Responder:
    """Answers HumanEval prompts: the reference for even indexes, ``return None`` otherwise."""
    from codegym.tasks import load_humaneval

    refs = {t.prompt: t.reference for t in load_humaneval()}

    def respond(prompt: Prompt, params: SamplingParams, index: int) -> str:
        ref = refs.get(prompt) if isinstance(prompt, str) else None
        if ref is None:
            return default_responder(prompt, params, index)
        return ref if index % 2 == 0 else "    return None\n"

    return respond


def main(argv: Sequence[str] | None = None) -> None:
    """Serve the fake from this process until interrupted (for benchmarks)."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m codegym.testing.fake_openai")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--latency", type=float, default=0.0, help="seconds per request")
    parser.add_argument("--model", default="fake-model")
    parser.add_argument(
        "--responder",
        choices=("default", "humaneval"),
        default="default",
        help="humaneval: the reference solution for even sample indexes, a wrong one otherwise",
    )
    args = parser.parse_args(argv)
    responder = humaneval_responder() if args.responder == "humaneval" else None
    srv = FakeOpenAIServer(
        responder=responder,
        latency_s=args.latency,
        model=args.model,
        host=args.host,
        port=args.port,
    )
    with srv:
        print(srv.base_url, flush=True)
        try:
            threading.Event().wait()
        except KeyboardInterrupt:
            pass


if __name__ == "__main__":
    main()
