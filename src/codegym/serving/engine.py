"""``ServingEngine``: OpenAI-shaped answers from a ``TransformersPolicy``; weight updates.

The engine turns validated requests (``codegym.serving.protocol``) into samples and the
samples into OpenAI / vLLM response bodies; it does no HTTP. Batching is the policy's: the
prompts of a request, and concurrent requests, are queued together and share forward passes.

Response shape (what ``codegym.policies.OpenAIPolicy`` parses, and vLLM emits):
completions choices carry ``text``, ``logprobs`` (``tokens``, ``token_logprobs``,
``top_logprobs``, ``text_offset``) and, with ``return_token_ids``, ``prompt_token_ids`` and
``token_ids``; chat choices carry ``message``, ``logprobs.content[]`` and ``token_ids``, the
chat response a top-level ``prompt_token_ids``. Every response and choice also carries
``policy_version``, the weights version that produced it. Logprobs are those of the policy's
``logprobs_mode`` (``raw``: untempered model log-probabilities, the default).

Streaming (``stream=true``): ``stream_complete`` / ``stream_chat`` yield the OpenAI chunk
bodies as the policy decodes each token; text that could still turn out to be part of a
stop string (or of a ``<tool_call>`` block) is held back until it cannot. Tool calls
(``codegym.serving.tools``) are parsed from the text. ``echo`` with ``logprobs`` scores the
prompt (``max_tokens=0``: nothing sampled), as likelihood evals (lm-eval) ask.

What is not honoured is refused (code ``unsupported``), never ignored: non-zero
``presence_penalty`` / ``frequency_penalty``, vLLM's ``top_k`` / ``min_p`` /
``repetition_penalty`` set to anything but their "off" value (the sampler does
temperature and top-p only), ``parallel_tool_calls=false``, a ``response_format`` other
than text, ``logit_bias``, ``best_of`` > 1, ``suffix``, a forced ``tool_choice``, logprobs
or echo while streaming, and any field this server does not know (``check_extras``). Only
the bookkeeping fields in ``IGNORED`` (``user``, ``store``, ``metadata``, …), which OpenAI
clients send and which change nothing in an answer, are accepted and ignored. A prompt plus
``max_tokens`` past the context is refused with code ``context_length_exceeded`` (never
clipped); without ``max_tokens`` chat samples up to the context.

``RequestError`` is a user's mistake (HTTP 400, naming the field and the fix; ``code`` a
string such as ``context_length_exceeded``).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import Any

from codegym.errors import CodegymError
from codegym.policies.errors import PolicyError
from codegym.policies.policy import SamplingParams
from codegym.policies.transformers_policy import Sample, TransformersPolicy
from codegym.serving.protocol import ChatRequest, CompletionRequest
from codegym.serving.stream import Chunks
from codegym.serving.tools import OPEN, parse_calls, with_tools

IGNORED = frozenset(
    {
        "user",
        "store",
        "metadata",
        "service_tier",
        "prompt_cache_key",
        "prompt_cache_retention",
        "safety_identifier",
    }
)
"""Fields accepted and ignored: OpenAI clients send them as bookkeeping (who asked, what to
keep, which tier or cache to use), and none of them changes what is sampled or returned."""

_DEFAULTS: dict[str, tuple[Any, ...]] = {
    "best_of": (1,),
    "top_k": (-1, 0),
    "min_p": (0,),
    "repetition_penalty": (1,),
    "parallel_tool_calls": (True,),
    "logit_bias": ({},),
    "functions": ([],),
    "suffix": ("",),
    "echo": (False,),
    "ignore_eos": (False,),
    "min_tokens": (0,),
    "skip_special_tokens": (True,),
    "include_stop_str_in_output": (False,),
    "stop_token_ids": ([],),
    "add_generation_prompt": (True,),
    "modalities": (["text"],),
}
"""Extra (OpenAI or vLLM) fields this server does not implement, with the values that mean
"off" and so ask for what it does anyway; any other value is refused by name."""

_HINTS = {
    "best_of": "best_of > 1 is not supported; send n instead",
    "parallel_tool_calls": "parallel_tool_calls=false is not honoured here (the model may "
    "write several calls in one answer); send true or leave it unset",
}


def _is(value: Any, accepted: Sequence[Any]) -> bool:
    """``value`` equals one of ``accepted``, a bool only a bool (``True == 1`` in Python)."""
    return any(value == a and isinstance(value, bool) == isinstance(a, bool) for a in accepted)


def check_extras(
    extras: dict[str, Any],
    defaults: dict[str, tuple[Any, ...]] | None = None,
    *,
    known: frozenset[str] = frozenset(),
) -> None:
    """Refuse every field of ``extras`` that asks for something this server does not do.

    A null value is an unset field; ``IGNORED`` and ``known`` fields (handled by the
    caller) pass; a field of ``defaults`` passes at its "off" value. Anything else is a
    ``RequestError`` (code ``unsupported``) that names the field.
    """
    table = _DEFAULTS if defaults is None else defaults
    for name, value in extras.items():
        if value is None or name in IGNORED or name in known:
            continue
        if name in table:
            if _is(value, table[name]):
                continue
            offs = " or ".join(repr(a) for a in table[name])
            hint = _HINTS.get(name) or (
                f"{name}={value!r} is not honoured by this server; send {offs} or leave it unset"
            )
            raise RequestError(hint, name, code="unsupported")
        raise RequestError(
            f"unknown field {name!r}: this server does not implement it, and would rather "
            "refuse it than ignore it; drop it (docs/serving.md lists what is honoured)",
            name,
            code="unsupported",
        )


class RequestError(CodegymError, ValueError):
    """A request the server cannot honour as asked (HTTP 400)."""

    def __init__(
        self, message: str, param: str | None = None, status: int = 400, code: str | None = None
    ) -> None:
        super().__init__(message)
        self.param = param
        self.status = status
        self.code = code


class ServingEngine:
    """Answers completions and chat requests from one policy (module doc)."""

    def __init__(self, policy: TransformersPolicy, model_name: str | None = None) -> None:
        self.policy = policy
        self.model_name = model_name or policy.name
        self.created = int(time.time())
        self._running = asyncio.Event()
        self._running.set()
        self._lease: asyncio.TimerHandle | None = None

    # ---- pausing (vLLM's /pause and /resume) --------------------------------------------

    @property
    def paused(self) -> bool:
        return not self._running.is_set()

    def pause(self, lease_s: float | None = None) -> None:
        """Hold new generation requests until ``resume`` (those decoding now finish), or
        for at most ``lease_s`` (then generation resumes by itself: a trainer that died
        between its /pause and /resume does not leave the server paused for good)."""
        self._running.clear()
        if self._lease is not None:
            self._lease.cancel()
            self._lease = None
        if lease_s is not None:
            self._lease = asyncio.get_running_loop().call_later(lease_s, self.resume)

    def resume(self) -> None:
        if self._lease is not None:
            self._lease.cancel()
            self._lease = None
        self._running.set()

    # ---- models and weights ---------------------------------------------------------

    def models(self) -> dict[str, Any]:
        return {
            "object": "list",
            "data": [
                {
                    "id": self.model_name,
                    "object": "model",
                    "created": self.created,
                    "owned_by": "codegym",
                    "root": str(self.policy.model_dir),
                    "max_model_len": self.policy.context_length,
                    "policy_version": self.policy.policy_version,
                    "logprobs_mode": self.policy.logprobs_mode,
                }
            ],
        }

    async def load_weights(self, path: str | Path | None = None) -> dict[str, Any]:
        """Load weights from ``path`` (default: the served folder); bump the version.

        Raises:
            RequestError: the path is missing or its weights do not fit the model.
        """
        source = Path(path) if path is not None else self.policy.model_dir
        start = time.perf_counter()
        try:
            version = await self.policy.aload_weights(source)
        except FileNotFoundError as e:
            raise RequestError(str(e), "path") from e
        except ValueError as e:
            raise RequestError(str(e), "path") from e
        return {
            "policy_version": version,
            "path": str(source),
            "load_s": round(time.perf_counter() - start, 4),
        }

    # ---- generation ---------------------------------------------------------------------

    def _check(self, req: CompletionRequest | ChatRequest) -> None:
        if req.model != self.model_name:
            raise RequestError(
                f"model {req.model!r} is not served here; this server serves "
                f"{self.model_name!r} (GET /v1/models)",
                "model",
                status=404,
                code="model_not_found",
            )
        check_extras(req.extras())
        for key, value in (req.stream_options or {}).items():
            if key == "include_obfuscation" or (key == "continuous_usage_stats" and not value):
                continue  # padding against a network side channel: nothing to honour locally
            if key != "include_usage":
                raise RequestError(
                    f"stream_options.{key} is not supported here; only include_usage is",
                    "stream_options",
                    code="unsupported",
                )
        if isinstance(req, ChatRequest) and req.top_logprobs and not req.logprobs:
            raise RequestError(
                "top_logprobs needs logprobs=true; send both", "top_logprobs", code="unsupported"
            )
        for name in ("presence_penalty", "frequency_penalty"):
            if getattr(req, name) != 0:
                raise RequestError(
                    f"{name} is not supported here; send 0", name, code="unsupported"
                )
        if req.response_format not in (None, {"type": "text"}):
            raise RequestError(
                "response_format other than {'type': 'text'} is not supported here",
                "response_format",
                code="unsupported",
            )
        if req.stream and (req.logprobs or getattr(req, "echo", False)):
            raise RequestError(
                "logprobs and echo are not streamed by this server; send stream=false",
                "stream",
                code="unsupported",
            )
        if any(not s for s in req.stop_tuple()):
            raise RequestError("stop strings must be non-empty", "stop")

    def _budget(self, prompts: Sequence[list[int]], asked: int | None) -> int:
        """Tokens to sample: ``asked``, or what the context leaves; a request that does not
        fit is refused (``context_length_exceeded``), never silently clipped."""
        longest = max(len(p) for p in prompts)
        room = self.policy.context_length - longest
        if asked is None:
            asked = room
        if room < 1 or longest + asked > self.policy.context_length:
            raise RequestError(
                f"This model's maximum context length is {self.policy.context_length} tokens. "
                f"However, you requested {longest + asked} tokens ({longest} in the prompt, "
                f"{asked} for the completion). Shorten the prompt or lower max_tokens.",
                "max_tokens" if room >= 1 else "messages",
                code="context_length_exceeded",
            )
        return asked

    def _params(self, req: CompletionRequest | ChatRequest, max_tokens: int) -> SamplingParams:
        return SamplingParams(
            temperature=req.temperature,
            top_p=req.top_p,
            max_tokens=max_tokens,
            n=req.n,
            seed=req.seed,
            stop=req.stop_tuple(),
        )

    async def _sample(
        self,
        prompts: Sequence[list[int]],
        params: SamplingParams,
        top: int,
        on_token: Callable[[int, int], None] | None = None,
    ) -> list[list[Sample]]:
        def relay(base: int) -> Callable[[int, int], None] | None:
            if on_token is None:
                return None
            call = on_token
            return lambda j, token: call(base + j, token)

        await self._running.wait()
        try:
            # gather: the policy's queue batches the prompts into shared forward passes
            return list(
                await asyncio.gather(
                    *(
                        self.policy.sample(
                            p, params, top_logprobs=top, on_token=relay(k * params.n)
                        )
                        for k, p in enumerate(prompts)
                    )
                )
            )
        except PolicyError as e:
            raise RequestError(str(e), "prompt") from e

    def _prompts(self, prompt: str | list[int] | list[str] | list[list[int]]) -> list[list[int]]:
        if isinstance(prompt, str):
            return [self.policy.encode(prompt)]
        if not prompt:
            raise RequestError("prompt is an empty list; give text or token ids", "prompt")
        if all(isinstance(p, int) for p in prompt):
            return [list(prompt)]  # type: ignore[arg-type]
        out: list[list[int]] = []
        for p in prompt:
            out.append(self.policy.encode(p) if isinstance(p, str) else list(p))  # type: ignore[arg-type]
        return out

    def _token(self, token_id: int, as_ids: bool) -> str:
        if as_ids:
            return f"token_id:{token_id}"
        return str(self.policy.tokenizer.decode([token_id], skip_special_tokens=False))

    def _completion_setup(
        self, req: CompletionRequest
    ) -> tuple[list[list[int]], SamplingParams, int]:
        self._check(req)
        prompts = self._prompts(req.prompt)
        if req.max_tokens == 0 and not req.echo:
            raise RequestError("max_tokens=0 samples nothing; send echo=true to score the "
                               "prompt, or max_tokens >= 1", "max_tokens")  # fmt: skip
        asked = 16 if req.max_tokens is None else req.max_tokens  # OpenAI's completions default
        budget = self._budget(prompts, asked)
        return prompts, self._params(req, max(budget, 1)), req.logprobs or 0

    async def complete(self, req: CompletionRequest) -> dict[str, Any]:
        """The body of a ``/v1/completions`` answer.

        Raises:
            RequestError: an unsupported option, an unknown model, a bad prompt, or a
                prompt and ``max_tokens`` past the context.
        """
        prompts, params, top = self._completion_setup(req)
        if req.max_tokens == 0:  # echo only: score the prompts, sample nothing
            groups = [[self._unsampled(p) for _ in range(req.n)] for p in prompts]
        else:
            groups = await self._sample(prompts, params, top)
        scored: list[Any] = [None] * len(prompts)
        if req.echo and req.logprobs is not None:
            try:
                scored = list(await asyncio.gather(*(self.policy.score(p, top) for p in prompts)))
            except PolicyError as e:
                raise RequestError(str(e), "prompt") from e
        choices: list[dict[str, Any]] = []
        for group, prompt, score in zip(groups, prompts, scored, strict=True):
            for s in group:
                text = (self.policy.decode(prompt) if req.echo else "") + s.text
                choice: dict[str, Any] = {
                    "index": len(choices),
                    "text": text,
                    "finish_reason": s.finish_reason,
                    "stop_reason": None,
                    "logprobs": None,
                    "policy_version": s.policy_version,
                }
                if req.logprobs is not None:
                    choice["logprobs"] = self._completion_logprobs(s, req, prompt, score)
                if req.return_token_ids:
                    choice["prompt_token_ids"] = list(s.prompt_token_ids)
                    choice["token_ids"] = list(s.token_ids)
                choices.append(choice)
        return self._body("text_completion", "cmpl", groups, choices)

    def _unsampled(self, prompt: list[int]) -> Sample:
        version = self.policy.policy_version
        return Sample(tuple(prompt), (), (), (), "", "length", version, 0.0)

    async def stream_complete(self, req: CompletionRequest) -> AsyncIterator[dict[str, Any]]:
        """Validate ``req`` now (raising ``RequestError``), then the chunks of its stream."""
        prompts, params, top = self._completion_setup(req)
        return self._stream("cmpl", prompts, params, top, req, chat=False)

    def _chat_setup(self, req: ChatRequest) -> tuple[list[int], SamplingParams, int]:
        self._check(req)
        if req.tool_choice not in (None, "auto", "none"):
            raise RequestError(
                "only tool_choice 'auto' or 'none' is honoured here (this server cannot force "
                "a call); send one of those",
                "tool_choice",
                code="unsupported",
            )
        tools = req.tools if req.tool_choice != "none" else None
        messages = with_tools([_plain_message(m, i) for i, m in enumerate(req.messages)], tools)
        try:
            prompt = self.policy.render_chat(messages)
        except (PolicyError, ValueError, TypeError) as e:  # template errors are the input's
            raise RequestError(f"messages cannot be rendered: {e}", "messages") from e
        budget = self._budget([prompt], req.max_completion_tokens or req.max_tokens)
        top = (req.top_logprobs or 0) if req.logprobs else 0
        return prompt, self._params(req, budget), top

    def _calls(self, req: ChatRequest, text: str) -> tuple[str, list[dict[str, Any]]]:
        if not req.tools or req.tool_choice == "none":
            return text, []
        return parse_calls(text)

    async def chat(self, req: ChatRequest) -> dict[str, Any]:
        """The body of a ``/v1/chat/completions`` answer.

        Raises:
            RequestError: an unsupported option, an unknown model, bad messages, or a
                prompt and ``max_tokens`` past the context.
        """
        prompt, params, top = self._chat_setup(req)
        groups = await self._sample([prompt], params, top)
        choices: list[dict[str, Any]] = []
        for s in groups[0]:
            content, calls = self._calls(req, s.text)
            message: dict[str, Any] = {"role": "assistant", "content": content}
            if calls:
                message["tool_calls"] = calls
            choice: dict[str, Any] = {
                "index": len(choices),
                "message": message,
                "finish_reason": "tool_calls" if calls else s.finish_reason,
                "stop_reason": None,
                "logprobs": None,
                "policy_version": s.policy_version,
            }
            if req.logprobs:
                choice["logprobs"] = {"content": self._chat_logprobs(s, req)}
            if req.return_token_ids:
                choice["token_ids"] = list(s.token_ids)
            choices.append(choice)
        body = self._body("chat.completion", "chatcmpl", groups, choices)
        if req.return_token_ids:
            body["prompt_token_ids"] = list(prompt)
        return body

    async def stream_chat(self, req: ChatRequest) -> AsyncIterator[dict[str, Any]]:
        """Validate ``req`` now (raising ``RequestError``), then the chunks of its stream."""
        prompt, params, top = self._chat_setup(req)
        return self._stream("chatcmpl", [prompt], params, top, req, chat=True)

    async def _stream(
        self,
        prefix: str,
        prompts: list[list[int]],
        params: SamplingParams,
        top: int,
        req: CompletionRequest | ChatRequest,
        *,
        chat: bool,
    ) -> AsyncIterator[dict[str, Any]]:
        """The chunks of a streamed answer (see ``codegym.serving.stream``)."""
        events: asyncio.Queue[tuple[int, int] | None] = asyncio.Queue()
        task = asyncio.ensure_future(
            self._sample(prompts, params, top, lambda i, t: events.put_nowait((i, t)))
        )
        task.add_done_callback(lambda _: events.put_nowait(None))
        hold = [*params.stop, *((OPEN,) if chat and getattr(req, "tools", None) else ())]
        shaper = Chunks(prefix, self.model_name, chat, len(prompts) * params.n, hold)
        try:
            for chunk in shaper.opening():
                yield chunk
            while (event := await events.get()) is not None:
                index, token = event
                delta = shaper.token(index, token, self.policy.decode)
                if delta is not None:
                    yield delta
            groups = task.result()  # raises what sampling raised
            flat = [s for g in groups for s in g]
            for i, s in enumerate(flat):
                content, calls = self._calls(req, s.text) if chat else (s.text, [])  # type: ignore[arg-type]
                for chunk in shaper.finish(i, content, calls, s.finish_reason):
                    yield chunk
            if (req.stream_options or {}).get("include_usage"):
                yield shaper.usage(self._body("", prefix, groups, [])["usage"])
        finally:
            if not task.done():
                task.cancel()

    def _body(
        self, obj: str, prefix: str, groups: list[list[Sample]], choices: list[dict[str, Any]]
    ) -> dict[str, Any]:
        prompt_tokens = sum(len(g[0].prompt_token_ids) for g in groups if g)
        completion_tokens = sum(len(s.token_ids) for g in groups for s in g)
        return {
            "id": f"{prefix}-{uuid.uuid4().hex}",
            "object": obj,
            "created": int(time.time()),
            "model": self.model_name,
            "choices": choices,
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
            },
            "policy_version": min(s.policy_version for g in groups for s in g),
        }

    def _completion_logprobs(
        self,
        s: Sample,
        req: CompletionRequest,
        prompt: list[int],
        scored: list[tuple[float | None, tuple[tuple[int, float], ...]]] | None,
    ) -> dict[str, Any]:
        as_ids = req.return_tokens_as_token_ids
        ids = list(s.token_ids)
        lps: list[float | None] = list(s.logprobs)
        alts_of: list[tuple[tuple[int, float], ...]] = list(s.top_logprobs) or [()] * len(ids)
        at = len(self.policy.decode(prompt))
        if req.echo and scored is not None:  # the prompt's tokens come first
            ids = prompt + ids
            lps = [lp for lp, _ in scored] + lps
            alts_of = [a for _, a in scored] + alts_of
            at = 0
        tokens = [self._token(t, as_ids) for t in ids]
        offsets = []
        for t in ids:
            offsets.append(at)
            at += len(self._token(t, False))
        tops: list[dict[str, float] | None] = []
        for tok, lp, alts in zip(tokens, lps, alts_of, strict=True):
            if lp is None:  # the prompt's first token: nothing before it to predict it
                tops.append(None)
                continue
            top = {self._token(a, as_ids): v for a, v in alts}
            top[tok] = lp  # OpenAI lists the chosen token among the alternatives
            tops.append(top)
        return {
            "tokens": tokens,
            "token_logprobs": lps,
            "top_logprobs": tops,
            "text_offset": offsets,
        }

    def _chat_logprobs(self, s: Sample, req: ChatRequest) -> list[dict[str, Any]]:
        as_ids = req.return_tokens_as_token_ids

        def entry(token_id: int, lp: float) -> dict[str, Any]:
            tok = self._token(token_id, as_ids)
            raw = self._token(token_id, False).encode("utf-8", "replace")
            return {"token": tok, "logprob": lp, "bytes": list(raw)}

        out = []
        for i, (t, lp) in enumerate(zip(s.token_ids, s.logprobs, strict=True)):
            e = entry(t, lp)
            e["top_logprobs"] = (
                [entry(a, v) for a, v in s.top_logprobs[i]] if s.top_logprobs else []
            )
            out.append(e)
        return out


def _plain_message(m: dict[str, Any], i: int) -> dict[str, Any]:
    """A message with string content (OpenAI content parts joined), or a RequestError."""
    role, content = m.get("role"), m.get("content")
    if not isinstance(role, str) or not role:
        raise RequestError(f"messages[{i}] has no 'role' string", "messages")
    if isinstance(content, list):
        texts = [p.get("text") for p in content if isinstance(p, dict) and p.get("type") == "text"]
        if len(texts) != len(content) or not all(isinstance(t, str) for t in texts):
            raise RequestError(f"messages[{i}].content: only text parts are supported", "messages")
        content = "".join(t for t in texts if isinstance(t, str))
    if content is not None and not isinstance(content, str):
        raise RequestError(f"messages[{i}].content must be a string or text parts", "messages")
    return {**m, "role": role, "content": content or ""}
