"""``OpenAIPolicy``: sample any OpenAI-compatible server (vLLM, SGLang, OpenAI).

Contract: ``generate`` returns exactly ``params.n`` generations or raises ``PolicyError``
after its retry budget (``codegym.policies.retry`` says what is retried and how long it
waits). The official ``openai`` SDK does the HTTP, with its own retries turned off so that
there is one retry policy, ours, and so that every attempt is bounded by ``timeout_s``.

At most ``concurrency`` requests are in flight per policy (a semaphore held only while a
request is on the wire, not while backing off). Bodies are read raw and parsed by
``codegym.policies._parse`` so vLLM's extra fields (token ids) survive and a garbled body
is a ``bad_response``, not an attribute error somewhere later.

The SDK's HTTP client is bound to the event loop that first used it; the policy keeps one
client per running loop and ``aclose()`` (or ``async with``) releases it.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import time
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import aiohttp
import httpx2
import openai

from codegym.policies._parse import BadResponse, parse_response
from codegym.policies.errors import PolicyError, PolicyErrorKind
from codegym.policies.policy import Generation, Prompt, SamplingParams
from codegym.policies.retry import Retry, is_retryable_status, parse_retry_after

Mode = Literal["completions", "chat"]


class _Attempt(Exception):
    """One failed attempt: what went wrong, whether another try may help, how long to wait."""

    def __init__(
        self,
        kind: PolicyErrorKind,
        detail: str,
        *,
        retryable: bool,
        status: int | None = None,
        retry_after_s: float | None = None,
    ) -> None:
        super().__init__(detail)
        self.kind: PolicyErrorKind = kind
        self.detail = detail
        self.retryable = retryable
        self.status = status
        self.retry_after_s = retry_after_s


class OpenAIPolicy:
    """A ``Policy`` backed by an OpenAI-compatible HTTP server."""

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key: str | None = None,
        mode: Mode = "completions",
        concurrency: int = 64,
        retry: Retry | None = None,
        timeout_s: float = 300.0,
        logprobs: bool = False,
        token_ids: bool = False,
        tools: Sequence[Mapping[str, Any]] | None = None,
        extra_body: Mapping[str, Any] | None = None,
        seed: int | None = None,
    ) -> None:
        """
        Args:
            base_url: the server's API root, e.g. ``http://127.0.0.1:8000/v1``.
            model: the model name the server serves.
            api_key: bearer token; None reads ``OPENAI_API_KEY``, else sends a dummy key
                (local servers usually need none).
            mode: ``"completions"`` (raw text prompts) or ``"chat"`` (message lists).
            concurrency: most requests in flight at once.
            retry: retry budget and backoff (default ``Retry()``).
            timeout_s: bound on each attempt, connect to last byte.
            logprobs: ask for per-token logprobs of the sampled tokens.
            token_ids: ask a vLLM server for prompt and output token ids
                (``return_token_ids``; with ``logprobs`` also ``return_tokens_as_token_ids``).
                Other servers reject unknown fields, so this is off by default.
            tools: chat tool definitions sent with every chat request.
            extra_body: more JSON fields for every request (server-specific options).
            seed: the jitter seed for backoff (tests); not the sampling seed.

        Raises:
            PolicyError(kind="config"): a bad argument (message says which and how to fix).
        """
        if mode not in ("completions", "chat"):
            raise PolicyError("config", f"OpenAIPolicy(mode={mode!r}): use 'completions' or 'chat'")
        if not base_url.startswith(("http://", "https://")):
            raise PolicyError(
                "config",
                f"OpenAIPolicy(base_url={base_url!r}): give an http(s) URL such as "
                "http://127.0.0.1:8000/v1",
            )
        if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
            raise PolicyError(
                "config", f"OpenAIPolicy(concurrency={concurrency!r}): use an int >= 1"
            )
        if not timeout_s > 0:
            raise PolicyError("config", f"OpenAIPolicy(timeout_s={timeout_s!r}): use seconds > 0")
        if tools and mode != "chat":
            raise PolicyError("config", "OpenAIPolicy(tools=...) needs mode='chat'")
        self.name = model
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.mode: Mode = mode
        self.concurrency = concurrency
        self.retry = retry or Retry()
        self.timeout_s = float(timeout_s)
        self.logprobs = logprobs
        self.token_ids = token_ids
        self.tools = [dict(t) for t in tools] if tools else None
        self._api_key = api_key
        self._extra_body = dict(extra_body or {})
        self._rng = random.Random(seed)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._client: openai.AsyncOpenAI | None = None
        self._sem: asyncio.Semaphore | None = None

    async def __aenter__(self) -> OpenAIPolicy:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the HTTP client of the current loop (idempotent)."""
        client, self._client, self._loop, self._sem = self._client, None, None, None
        if client is not None:
            await client.close()

    def _bind(self) -> tuple[openai.AsyncOpenAI, asyncio.Semaphore]:
        loop = asyncio.get_running_loop()
        if self._client is None or self._sem is None or self._loop is not loop:
            # A client from another (finished) loop cannot be reused or closed here; drop it.
            limits = httpx2.Limits(
                max_connections=self.concurrency, max_keepalive_connections=self.concurrency
            )
            # aiohttp transport: the default httpx pool scan caps a shared client at a few
            # hundred requests/s (docs/BENCHMARKS.md); aiohttp holds thousands.
            http = openai.DefaultAioHttpClient(
                limits=limits,
                timeout=httpx2.Timeout(self.timeout_s, connect=min(10.0, self.timeout_s)),
            )
            self._client = openai.AsyncOpenAI(
                base_url=self.base_url,
                api_key=self._api_key or _env_key() or "EMPTY",
                max_retries=0,
                timeout=self.timeout_s,
                http_client=http,
            )
            self._sem = asyncio.Semaphore(self.concurrency)
            self._loop = loop
        return self._client, self._sem

    def _request(self, prompt: Prompt, params: SamplingParams, tools: Any) -> dict[str, Any]:
        extra: dict[str, Any] = dict(self._extra_body)
        if self.token_ids:
            extra["return_token_ids"] = True
            if self.logprobs:
                extra["return_tokens_as_token_ids"] = True
        kw: dict[str, Any] = {
            "model": self.model,
            "max_tokens": params.max_tokens,
            "temperature": params.temperature,
            "top_p": params.top_p,
            "n": params.n,
        }
        if params.seed is not None:
            kw["seed"] = params.seed
        if params.stop:
            kw["stop"] = list(params.stop)
        if self.mode == "chat":
            if isinstance(prompt, str):
                prompt = [{"role": "user", "content": prompt}]
            kw["messages"] = list(prompt)
            if self.logprobs:
                kw["logprobs"] = True
            if tools:
                kw["tools"] = list(tools)
        else:
            if not isinstance(prompt, str):
                raise PolicyError(
                    "config",
                    f"{self.model} at {self.base_url}: mode='completions' takes a text prompt, "
                    "got a message list; use OpenAIPolicy(..., mode='chat') for conversations",
                )
            kw["prompt"] = prompt
            if self.logprobs:
                kw["logprobs"] = 1  # the sampled token's logprob (+1 alternative, ignored)
        if extra:
            kw["extra_body"] = extra
        return kw

    async def _attempt(self, kw: dict[str, Any], n: int) -> list[Generation]:
        client, sem = self._bind()
        async with sem:
            start = time.perf_counter()
            try:
                async with asyncio.timeout(self.timeout_s):
                    if self.mode == "chat":
                        raw = await client.chat.completions.with_raw_response.create(**kw)
                    else:
                        raw = await client.completions.with_raw_response.create(**kw)
                    content = raw.content
            except TimeoutError as e:
                raise _Attempt(
                    "timeout", f"no answer within {self.timeout_s:g} s", retryable=True
                ) from e
            except openai.APITimeoutError as e:
                refused = _refused(e)
                if refused is not None:
                    raise _Attempt("connection", refused, retryable=True) from e
                raise _Attempt(
                    "timeout", f"no answer within {self.timeout_s:g} s", retryable=True
                ) from e
            except openai.APIConnectionError as e:
                cause = e.__cause__ or e
                raise _Attempt(
                    "connection", f"{type(cause).__name__}: {cause}", retryable=True
                ) from e
            except openai.APIStatusError as e:
                status = e.status_code
                raise _Attempt(
                    "http_status",
                    f"HTTP {status}: {_snippet(e.response.text)}",
                    retryable=is_retryable_status(status),
                    status=status,
                    retry_after_s=parse_retry_after(e.response.headers.get("retry-after")),
                ) from e
            model_s = time.perf_counter() - start
        try:
            return parse_response(json.loads(content), self.mode, n, model_s)
        except (ValueError, BadResponse) as e:  # JSONDecodeError is a ValueError
            raise _Attempt(
                "bad_response", f"{e} (body: {_snippet(content)})", retryable=True
            ) from e

    async def generate(
        self,
        prompt: Prompt,
        params: SamplingParams,
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
    ) -> list[Generation]:
        """Sample ``params.n`` generations for ``prompt``.

        ``tools`` overrides the policy's chat tools for this call.

        Raises:
            PolicyError: after ``retry.attempts`` failed attempts, or at once for a
                non-retryable status or a config mistake.
        """
        kw = self._request(prompt, params, tools if tools is not None else self.tools)
        last: _Attempt | None = None
        for attempt in range(self.retry.attempts):
            if last is not None:
                await asyncio.sleep(self.retry.delay(attempt - 1, last.retry_after_s, self._rng))
            try:
                return await self._attempt(kw, params.n)
            except _Attempt as failure:
                last = failure
                if not failure.retryable:
                    raise self._error(failure, attempt + 1) from failure
        assert last is not None
        raise self._error(last, self.retry.attempts) from last

    def _error(self, failure: _Attempt, attempts: int) -> PolicyError:
        where = f"model {self.model!r} at {self.base_url}"
        tries = f"after {attempts} attempt{'s' if attempts != 1 else ''}"
        fix = {
            "timeout": "raise timeout_s, lower max_tokens or concurrency, or check the server load",
            "connection": "check that the server is running and --base-url is right",
            "bad_response": "the server does not speak the OpenAI API here; check --base-url "
            "(it usually ends in /v1) and any proxy in between",
            "config": "fix the arguments",
            "http_status": _status_fix(failure.status, self.base_url),
        }[failure.kind]
        return PolicyError(
            failure.kind,
            f"{where}: {failure.detail} {tries}; {fix}",
            status=failure.status,
            attempts=attempts,
        )


def _status_fix(status: int | None, base_url: str) -> str:
    if status in (401, 403):
        return "pass api_key (or set OPENAI_API_KEY) with access to this model"
    if status == 404:
        return f"check the model name against {base_url}/models and the endpoint (mode)"
    if status is not None and (status in (408, 409, 429) or status >= 500):
        return "the server is overloaded or failing; lower concurrency or retry later"
    return "the server rejected the request; check the sampling parameters it supports"


def _env_key() -> str | None:
    return os.environ.get("OPENAI_API_KEY") or None


def _snippet(body: str | bytes, limit: int = 200) -> str:
    text = body.decode("utf-8", "replace") if isinstance(body, bytes) else body
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit] + "…"


def _refused(e: BaseException) -> str | None:
    """The aiohttp transport reports a refused connection as a connect *timeout*; find the
    real cause in the exception chain so it is classified as ``connection``."""
    seen: BaseException | None = e
    for _ in range(6):
        if seen is None:
            return None
        if isinstance(seen, (ConnectionRefusedError, aiohttp.ClientConnectorError)) or (
            "Connect call failed" in str(seen)
        ):
            return f"connection refused: {seen}"
        seen = seen.__cause__ or seen.__context__
    return None
