"""``OpenAIPolicy``: sample any OpenAI-compatible server (vLLM, SGLang, OpenAI).

Contract: ``generate`` returns exactly ``params.n`` generations or raises ``PolicyError``
after its retry budget (``codegym.policies.retry`` says what is retried and how long it
waits). There is one retry policy, ours, and every attempt is bounded by ``timeout_s``.

Transport: one shared ``aiohttp.ClientSession`` per event loop (keep-alive pool of
``concurrency`` connections) posts the JSON body and reads it raw. The ``openai`` SDK is not
on this path on purpose: measured on the benchmark machine (``benchmarks/rollout_bench.py``,
``docs/BENCHMARKS.md``), its request pipeline (parameter transforms, httpx2 request
building, the aiohttp adapter) cost 1.6-2.1 ms of CPU per request, this path 0.4 ms (a
bare aiohttp post 0.3 ms); at 512 episodes in flight on 2 cores the SDK's cost alone was
the rollout's limit. The wire format is the OpenAI API's (``/completions``,
``/chat/completions``, bearer auth, extra body fields merged at the top level, as the SDK
sends them).

At most ``concurrency`` requests are in flight per policy (a semaphore held only while a
request is on the wire, not while backing off). Copies of a request (``Hedge``: a hedge of
a slow one, tail copies into idle room at the end of a run) ride on the original's slot:
they never delay a first attempt, the first good answer wins and cancels the others, and a
request that fails in every copy fails as its original did, so copies change neither what
an episode is counted as nor which ``PolicyError`` kind an infra failure ends as; with
copies, an answer wins only if it parses. Only requests whose copies sample the same thing
are copied: greedy ones, and seeded ones with ``Hedge(seeded=True)`` (for servers that
honour seeds exactly); any other is never copied, since the copy that answers first would
favour short completions. Tail copies are off unless ``Hedge(tail=...)`` asks for them.

Bodies are parsed by ``codegym.policies._parse`` so vLLM's extra fields (token ids) survive
and a garbled body is a ``bad_response``, not an attribute error somewhere later.

The HTTP session is bound to the event loop that first used it; the policy keeps one
session per running loop and ``aclose()`` (or ``async with``) releases it.

Token-exact generation: ``generate_tokens(prompt_ids, params)`` (the ``TokenPolicy``
protocol of ``codegym.envs.tokens``) sends the id list itself as the completions ``prompt``
(the OpenAI API accepts a list of ints; vLLM and SGLang skip tokenization then) with
``return_token_ids`` and logprobs, whatever ``mode`` is, so the sampled ids and their
logprobs come back exactly. A server that returns no ids is a ``bad_response`` at once:
retrying cannot make it return them, and re-tokenizing the text would not be exact.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Literal

import aiohttp

from codegym.policies._parse import BadResponse, parse_response
from codegym.policies.errors import PolicyError, PolicyErrorKind
from codegym.policies.policy import Generation, Prompt, SamplingParams
from codegym.policies.retry import Hedge, Latencies, Retry, is_retryable_status, parse_retry_after

Mode = Literal["completions", "chat"]
Answer = tuple[int, bytes, "str | None"]
"""One HTTP answer: status, body, Retry-After."""
CopyRole = Literal["original", "hedge", "tail"]


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
        fast: bool = False,
    ) -> None:
        super().__init__(detail)
        self.kind: PolicyErrorKind = kind
        self.detail = detail
        self.retryable = retryable
        self.status = status
        self.retry_after_s = retry_after_s
        self.fast = fast
        """The server answered at once, badly (``Retry.at_once``)."""


class _Race:
    """One request's copies on the wire. The first good answer (status < 400) wins and the
    other copies are cancelled; once every copy has ended badly, the original's outcome is
    the race's, so a hedged request fails exactly as an unhedged one would."""

    def __init__(
        self,
        policy: OpenAIPolicy,
        post: Callable[[], Awaitable[Answer]],
        copyable: bool,
        good: Callable[[Answer], bool],
    ) -> None:
        self.policy = policy
        self.post = post
        self.good = good
        """Whether an answer is usable (it parses): with copies, a garbled 200 must not
        beat a good original."""
        self.copyable = copyable
        """Whether a copy gives the same answer (module doc: seeded or greedy)."""
        self.winner: asyncio.Future[asyncio.Task[Answer]] = (
            asyncio.get_running_loop().create_future()
        )
        self.copies: dict[asyncio.Task[Answer], CopyRole] = {}
        self.original: asyncio.Task[Answer] | None = None
        self.sent = 0
        """Copies sent so far, the original included (ended ones too)."""

    def add(self, role: CopyRole) -> None:
        task = asyncio.ensure_future(self.post())
        self.copies[task] = role
        self.sent += 1
        self.original = self.original or task
        self.policy._on_wire += 1
        self.policy._hedges_on_wire += role == "hedge"
        task.add_done_callback(self._ended)

    def _ended(self, task: asyncio.Task[Answer]) -> None:
        policy, role = self.policy, self.copies.pop(task)
        policy._on_wire -= 1
        policy._hedges_on_wire -= role == "hedge"
        if not task.cancelled():
            failed = task.exception() is not None or task.result()[0] >= 400
            if not failed and self.sent > 1:  # alone, the original is judged as before
                failed = not self.good(task.result())
            if not failed and not self.winner.done():
                self.winner.set_result(task)
                policy.hedge_wins += role == "hedge"
                policy.tail_wins += role == "tail"
                self.cancel()
            elif not self.copies and not self.winner.done():
                assert self.original is not None
                self.winner.set_result(self.original)  # every copy failed: the original's
        policy._fill_soon()  # a copy's room is free

    def cancel(self) -> None:
        for task in self.copies:
            task.cancel()


class OpenAIPolicy:
    """A ``Policy`` (and ``TokenPolicy``) backed by an OpenAI-compatible HTTP server."""

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key: str | None = None,
        mode: Mode = "completions",
        concurrency: int = 64,
        retry: Retry | None = None,
        hedge: Hedge | None = Hedge(),  # frozen: one shared default is safe
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
            hedge: when to send more copies of a request: a hedge of one slower than the
                server usually is, tail copies into room left idle at the end of a run
                (default ``Hedge()``); None sends no copies.
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
        self.hedge = hedge
        self._latencies = Latencies(hedge) if hedge is not None else None
        self.hedges = 0
        """Requests sent a second time because the first was slow."""
        self.hedge_wins = 0
        """... of which the second copy answered first."""
        self.tail_copies = 0
        """Copies sent into idle room at the end of a run (``Hedge.tail``)."""
        self.tail_wins = 0
        """... of which one answered first."""
        self._races: dict[_Race, None] = {}  # in flight, oldest first
        self._on_wire = 0  # copies in flight, originals included
        self._peak = 0  # most requests in flight since the policy was last idle
        self._hedges_on_wire = 0
        self._last_first = 0.0  # perf_counter of the latest first attempt
        self._fill_at: asyncio.TimerHandle | None = None
        self._failing = 0.0  # recent share of failed attempts (moving average)
        self.timeout_s = float(timeout_s)
        self.logprobs = logprobs
        self.token_ids = token_ids
        self.tools = [dict(t) for t in tools] if tools else None
        self._api_key = api_key
        self._extra_body = dict(extra_body or {})
        self._rng = random.Random(seed)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._session: aiohttp.ClientSession | None = None
        self._headers = {
            "Authorization": f"Bearer {api_key or _env_key() or 'EMPTY'}",
            "Content-Type": "application/json",
            "User-Agent": "codegym",
        }
        self._sem: asyncio.Semaphore | None = None
        self._hedge_cap = 0

    @property
    def on_wire(self) -> int:
        """Requests on the wire now, hedges and tail copies included."""
        return self._on_wire

    async def __aenter__(self) -> OpenAIPolicy:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the HTTP session of the current loop (idempotent)."""
        session, self._session, self._loop, self._sem = self._session, None, None, None
        if self._fill_at is not None:
            self._fill_at.cancel()
            self._fill_at = None
        if session is not None and not session.closed:
            await session.close()

    def _bind(self) -> tuple[aiohttp.ClientSession, asyncio.Semaphore]:
        loop = asyncio.get_running_loop()
        if self._session is None or self._sem is None or self._loop is not loop:
            # A session from another (finished) loop cannot be reused or closed here; drop it.
            # Room for copies beside the originals: a copy must never hold the connection
            # a new first attempt needs (copies in flight never exceed the concurrency).
            copies = self.hedge is not None and (self.hedge.tail > 1 or self.hedge.budget > 0)
            connector = aiohttp.TCPConnector(
                limit=self.concurrency * (2 if copies else 1),
                limit_per_host=0,
                # Under the 5 s keep-alive of uvicorn-based servers (vLLM, SGLang): a pooled
                # connection is never reused just as the server closes it.
                keepalive_timeout=4.0,
                ttl_dns_cache=None,
            )
            self._session = aiohttp.ClientSession(
                connector=connector,
                timeout=aiohttp.ClientTimeout(
                    total=self.timeout_s, connect=min(10.0, self.timeout_s)
                ),
                headers=self._headers,
                # Bodies are parsed by our own parser; skip aiohttp's cookie handling.
                cookie_jar=aiohttp.DummyCookieJar(),
            )
            self._sem = asyncio.Semaphore(self.concurrency)
            # Requests of a dead loop are gone: their copies and timer with them.
            self._races.clear()
            self._on_wire = self._hedges_on_wire = self._peak = 0
            self._fill_at = None
            budget = self.hedge.budget if self.hedge is not None else 0.0
            self._hedge_cap = int(budget * self.concurrency) or (1 if budget > 0 else 0)
            self._loop = loop
        return self._session, self._sem

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
        kw.update(extra)  # server-specific fields sit at the top level of the body
        return kw

    async def _attempt(
        self, body: bytes, n: int, mode: Mode, first: bool, copyable: bool
    ) -> list[Generation]:
        try:
            gens = await self._attempt_once(body, n, mode, first, copyable)
        except _Attempt:
            self._failing += (1.0 - self._failing) / 16
            raise
        self._failing -= self._failing / 16
        return gens

    async def _attempt_once(
        self, body: bytes, n: int, mode: Mode, first: bool, copyable: bool
    ) -> list[Generation]:
        session, sem = self._bind()
        url = (
            f"{self.base_url}/chat/completions"
            if mode == "chat"
            else f"{self.base_url}/completions"
        )
        async with sem:
            start = time.perf_counter()
            if first:
                self._last_first = start
            status, content, retry_after = await self._race(
                session, url, body, copyable, lambda a: _parses(a[1], mode, n)
            )
            model_s = time.perf_counter() - start
        self._fill_soon()  # a slot is free: maybe the tail has come
        if status >= 400:
            wait = parse_retry_after(retry_after)
            raise _Attempt(
                "http_status",
                f"HTTP {status}: {_snippet(content)}",
                retryable=is_retryable_status(status),
                status=status,
                retry_after_s=wait,
                fast=status >= 500 and wait is None,
            )
        try:
            gens = parse_response(json.loads(content), mode, n, model_s)
        except (ValueError, BadResponse) as e:  # JSONDecodeError is a ValueError
            raise _Attempt(
                "bad_response", f"{e} (body: {_snippet(content)})", retryable=True, fast=True
            ) from e
        if self._latencies is not None:
            self._latencies.add(model_s)
        return gens

    async def _post(
        self, session: aiohttp.ClientSession, url: str, body: bytes
    ) -> tuple[int, bytes, str | None]:
        """One HTTP request: (status, body, Retry-After), or ``_Attempt`` for no answer."""
        try:
            async with (
                asyncio.timeout(self.timeout_s),
                session.post(url, data=body) as resp,
            ):
                return resp.status, await resp.read(), resp.headers.get("retry-after")
        except aiohttp.ClientConnectorError as e:  # refused, unreachable, DNS
            raise _Attempt("connection", f"{type(e).__name__}: {e}", retryable=True) from e
        except TimeoutError as e:  # before ClientError: ServerTimeoutError is both
            raise _Attempt(
                "timeout", f"no answer within {self.timeout_s:g} s", retryable=True
            ) from e
        except (aiohttp.ClientError, OSError) as e:  # reset, dropped, cut-off body
            raise _Attempt(
                "connection", f"{type(e).__name__}: {e}", retryable=True, fast=True
            ) from e

    async def _race(
        self,
        session: aiohttp.ClientSession,
        url: str,
        body: bytes,
        copyable: bool,
        good: Callable[[Answer], bool],
    ) -> Answer:
        """``_post`` with copies (``Hedge``): a hedge once the request is slower than usual
        (if the hedge budget allows), tail copies while room is idle (``_fill``); none for
        a request that is not ``copyable``."""
        race = _Race(self, lambda: self._post(session, url, body), copyable, good)
        self._races[race] = None
        self._peak = max(self._peak, len(self._races))
        try:
            race.add("original")
            self._fill_soon()
            delay = self._latencies.delay() if self._latencies is not None and copyable else None
            if delay is not None:
                done, _ = await asyncio.wait({race.winner}, timeout=delay)
                if not done and self._hedges_on_wire < self._hedge_cap:
                    self.hedges += 1
                    race.add("hedge")
            return (await race.winner).result()
        finally:
            del self._races[race]
            race.cancel()
            if not self._races:
                self._peak = 0  # idle: the next burst sets its own peak

    def _fill_soon(self) -> None:
        """Arrange a ``_fill`` when room is idle and no first attempt has been sent for
        ``Hedge.tail_quiet`` usual latencies (one timer at a time, none in steady state)."""
        hedge, lat, sem = self.hedge, self._latencies, self._sem
        if hedge is None or lat is None or sem is None or self._fill_at is not None:
            return
        usual = lat.usual()
        if hedge.tail < 2 or usual is None or not self._races or sem.locked():
            return
        if self._on_wire >= self._room():
            return
        wait = self._last_first + hedge.tail_quiet * usual - time.perf_counter()
        loop = asyncio.get_running_loop()
        self._fill_at = loop.call_later(max(0.0, wait), self._fill)

    def _room(self) -> int:
        """Copies the server may have in flight: what this run has used, up to the cap (a
        caller that sends one request at a time gets no tail copies)."""
        return min(self.concurrency, self._peak)

    def _fill(self) -> None:
        """Fill idle room with copies of the requests in flight, fewest copies first; a
        request gets at most ``Hedge.tail`` copies in all (a copy that fails is not
        replaced past that), so a server failing fast is not hammered."""
        self._fill_at = None
        hedge, lat, sem = self.hedge, self._latencies, self._sem
        if hedge is None or lat is None or sem is None or sem.locked():
            return  # a request is waiting for a slot: the run is not at its tail
        if self._failing >= 0.5:
            return  # an outage, not a tail: copies would only multiply failing requests
        usual = lat.usual() or 0.0
        if time.perf_counter() < self._last_first + hedge.tail_quiet * usual:
            self._fill_soon()  # a first attempt went out since the timer was set
            return
        room = self._room() - self._on_wire
        races = sorted(
            (
                r
                for r in self._races
                if r.copyable and not r.winner.done() and r.copies and r.sent < hedge.tail
            ),
            key=lambda r: r.sent,
        )  # sorted() is stable: the oldest first among equals
        while room > 0 and races:
            more = []
            for race in races[:room]:
                race.add("tail")
                self.tail_copies += 1
                room -= 1
                if race.sent < hedge.tail:
                    more.append(race)
            races = more

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
        return await self._with_retries(kw, params.n, self.mode)

    async def generate_tokens(
        self, prompt_ids: Sequence[int], params: SamplingParams
    ) -> list[Generation]:
        """Sample ``params.n`` generations from a prompt given as token ids (token-exact).

        Uses the completions endpoint whatever ``mode`` is; each generation has
        ``token_ids`` (the sampled ids) and ``logprobs`` (aligned with them).

        Raises:
            PolicyError: ``config`` for a prompt that is not a non-empty list of ids;
                ``bad_response`` at once when the server returns no token ids (it is not a
                vLLM-style server, or too old for ``return_token_ids``); otherwise as
                ``generate``.
        """
        ids = list(prompt_ids)
        if not ids or not all(
            isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in ids
        ):
            raise PolicyError(
                "config",
                f"{self.model}: generate_tokens(prompt_ids=...) takes a non-empty list of "
                "token ids (ints >= 0); render the conversation with the tokenizer first",
            )
        kw = self._token_request(ids, params)
        gens = await self._with_retries(kw, params.n, "completions")
        for g in gens:
            if g.token_ids is None:
                raise PolicyError(
                    "bad_response",
                    f"model {self.model!r} at {self.base_url}: the server returned no token "
                    "ids for a token-id prompt; token mode needs a server that supports "
                    "return_token_ids (vLLM >= 0.10.2, or codegym serve-model)",
                )
            if g.logprobs is not None and len(g.logprobs) != len(g.token_ids):
                raise PolicyError(
                    "bad_response",
                    f"model {self.model!r} at {self.base_url}: {len(g.logprobs)} logprobs "
                    f"for {len(g.token_ids)} token ids; the server's answer is inconsistent",
                )
        return gens

    def _token_request(self, ids: list[int], params: SamplingParams) -> dict[str, Any]:
        extra: dict[str, Any] = {
            **self._extra_body,
            "return_token_ids": True,
            "return_tokens_as_token_ids": True,
        }
        kw: dict[str, Any] = {
            "model": self.model,
            "prompt": ids,
            "max_tokens": params.max_tokens,
            "temperature": params.temperature,
            "top_p": params.top_p,
            "n": params.n,
            "logprobs": 1,
        }
        if params.seed is not None:
            kw["seed"] = params.seed
        if params.stop:
            kw["stop"] = list(params.stop)
        kw.update(extra)
        return kw

    async def _with_retries(self, kw: dict[str, Any], n: int, mode: Mode) -> list[Generation]:
        body = json.dumps(kw, ensure_ascii=False).encode("utf-8")  # once, for every attempt
        # A copy of a greedy request (or a seeded one, where Hedge.seeded says the server
        # honours seeds) samples what the original would; a copy of any other is another
        # sample, and keeping the first to answer would favour short, fast completions (a
        # biased sample for an eval, an off-policy one for training).
        seeded = self.hedge is not None and self.hedge.seeded and kw.get("seed") is not None
        copyable = seeded or kw.get("temperature") == 0
        last: _Attempt | None = None
        for attempt in range(self.retry.attempts):
            if last is not None:
                fast = last.fast and self._failing < 0.5  # otherwise healthy
                wait = self.retry.delay(attempt - 1, last.retry_after_s, self._rng, fast=fast)
                if wait > 0:
                    await asyncio.sleep(wait)
            try:
                return await self._attempt(body, n, mode, attempt == 0, copyable)
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


def _parses(content: bytes, mode: Mode, n: int) -> bool:
    try:
        parse_response(json.loads(content), mode, n, 0.0)
    except (ValueError, BadResponse):
        return False
    return True


def _snippet(body: str | bytes, limit: int = 200) -> str:
    text = body.decode("utf-8", "replace") if isinstance(body, bytes) else body
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit] + "…"
