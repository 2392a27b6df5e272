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

``RequestError`` is a user's mistake (HTTP 400, naming the field and the fix).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from codegym.policies.errors import PolicyError
from codegym.policies.policy import SamplingParams
from codegym.policies.transformers_policy import Sample, TransformersPolicy
from codegym.serving.protocol import ChatRequest, CompletionRequest

_UNSUPPORTED = ("best_of", "logit_bias", "tools", "tool_choice", "functions", "suffix")


class RequestError(ValueError):
    """A request the server cannot honour as asked (HTTP 400)."""

    def __init__(self, message: str, param: str | None = None, status: int = 400) -> None:
        super().__init__(message)
        self.param = param
        self.status = status


class ServingEngine:
    """Answers completions and chat requests from one policy (module doc)."""

    def __init__(self, policy: TransformersPolicy, model_name: str | None = None) -> None:
        self.policy = policy
        self.model_name = model_name or policy.name
        self.created = int(time.time())

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
            )
        if req.stream:
            raise RequestError("stream=true is not supported; send stream=false", "stream")
        for name in _UNSUPPORTED:
            if req.extras().get(name) not in (None, [], {}):
                raise RequestError(f"{name!r} is not supported by this server; drop it", name)
        if any(not s for s in req.stop_tuple()):
            raise RequestError("stop strings must be non-empty", "stop")

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
        self, prompts: Sequence[list[int]], params: SamplingParams, top: int
    ) -> list[list[Sample]]:
        try:
            # gather: the policy's queue batches the prompts into shared forward passes
            return list(
                await asyncio.gather(
                    *(self.policy.sample(p, params, top_logprobs=top) for p in prompts)
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

    async def complete(self, req: CompletionRequest) -> dict[str, Any]:
        """The body of a ``/v1/completions`` answer.

        Raises:
            RequestError: an unsupported option, an unknown model, or a bad prompt.
        """
        self._check(req)
        if req.echo:
            raise RequestError("echo=true is not supported; send echo=false", "echo")
        prompts = self._prompts(req.prompt)
        params = self._params(req, req.max_tokens or 16)  # OpenAI's completions default
        top = req.logprobs or 0
        groups = await self._sample(prompts, params, top)
        choices: list[dict[str, Any]] = []
        for group in groups:
            for s in group:
                choice: dict[str, Any] = {
                    "index": len(choices),
                    "text": s.text,
                    "finish_reason": s.finish_reason,
                    "stop_reason": None,
                    "logprobs": None,
                    "policy_version": s.policy_version,
                }
                if req.logprobs is not None:
                    choice["logprobs"] = self._completion_logprobs(s, req)
                if req.return_token_ids:
                    choice["prompt_token_ids"] = list(s.prompt_token_ids)
                    choice["token_ids"] = list(s.token_ids)
                choices.append(choice)
        return self._body("text_completion", "cmpl", groups, choices)

    async def chat(self, req: ChatRequest) -> dict[str, Any]:
        """The body of a ``/v1/chat/completions`` answer.

        Raises:
            RequestError: an unsupported option, an unknown model, or bad messages.
        """
        self._check(req)
        messages = [_plain_message(m, i) for i, m in enumerate(req.messages)]
        try:
            prompt = self.policy.render_chat(messages)
        except (PolicyError, ValueError, TypeError) as e:  # template errors are the input's
            raise RequestError(f"messages cannot be rendered: {e}", "messages") from e
        limit = req.max_completion_tokens or req.max_tokens or self.policy.context_length
        params = self._params(req, limit)
        top = (req.top_logprobs or 0) if req.logprobs else 0
        groups = await self._sample([prompt], params, top)
        choices: list[dict[str, Any]] = []
        for s in groups[0]:
            choice: dict[str, Any] = {
                "index": len(choices),
                "message": {"role": "assistant", "content": s.text},
                "finish_reason": s.finish_reason,
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

    def _completion_logprobs(self, s: Sample, req: CompletionRequest) -> dict[str, Any]:
        as_ids = req.return_tokens_as_token_ids
        tokens = [self._token(t, as_ids) for t in s.token_ids]
        offsets, at = [], len(self.policy.decode(s.prompt_token_ids))
        for t in s.token_ids:
            offsets.append(at)
            at += len(self._token(t, False))
        tops: list[dict[str, float]] = []
        for i, (tok, lp) in enumerate(zip(tokens, s.logprobs, strict=True)):
            alts = (
                {self._token(a, as_ids): v for a, v in s.top_logprobs[i]} if s.top_logprobs else {}
            )
            alts[tok] = lp  # OpenAI lists the sampled token among the alternatives
            tops.append(alts)
        return {
            "tokens": tokens,
            "token_logprobs": list(s.logprobs),
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
