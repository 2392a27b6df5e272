"""Turn an OpenAI-compatible JSON body into ``Generation`` records (pure, no I/O).

Field names follow the OpenAI API plus vLLM's extensions (``vllm/entrypoints/openai``
protocol): with ``return_token_ids`` a completions choice carries ``prompt_token_ids`` and
``token_ids``; a chat response carries ``prompt_token_ids`` at the top level and each choice
``token_ids``. With ``return_tokens_as_token_ids`` the logprob tokens read
``"token_id:<id>"``, which also gives the ids when ``token_ids`` is absent. Anything that is
not this shape raises ``BadResponse`` (the caller maps it to ``PolicyError("bad_response")``).
"""

from __future__ import annotations

from typing import Any, Literal

from codegym.errors import CodegymError
from codegym.policies.policy import Generation

Mode = Literal["completions", "chat"]
_TOKEN_ID_PREFIX = "token_id:"


class BadResponse(CodegymError, ValueError):
    """The body is not an OpenAI-compatible answer."""

    exit_code = 3


def _int_tuple(value: Any, what: str) -> tuple[int, ...] | None:
    if value is None:
        return None
    if not isinstance(value, list) or not all(
        isinstance(v, int) and not isinstance(v, bool) for v in value
    ):
        raise BadResponse(f"{what} is not a list of ints")
    return tuple(value)


def _float_tuple(values: list[Any], what: str) -> tuple[float, ...]:
    out: list[float] = []
    for v in values:
        if v is None:  # vLLM reports None for the first prompt token; never for outputs
            out.append(float("nan"))
        elif isinstance(v, int | float) and not isinstance(v, bool):
            out.append(float(v))
        else:
            raise BadResponse(f"{what} holds a non-number {v!r}")
    return tuple(out)


def _ids_from_tokens(tokens: list[Any]) -> tuple[int, ...] | None:
    """Ids from ``"token_id:123"`` strings (vLLM ``return_tokens_as_token_ids``)."""
    ids: list[int] = []
    for t in tokens:
        if not (isinstance(t, str) and t.startswith(_TOKEN_ID_PREFIX)):
            return None
        try:
            ids.append(int(t[len(_TOKEN_ID_PREFIX) :]))
        except ValueError:
            return None
    return tuple(ids)


def _completion_logprobs(lp: Any) -> tuple[tuple[float, ...] | None, tuple[int, ...] | None]:
    if lp is None:
        return None, None
    if not isinstance(lp, dict) or not isinstance(lp.get("token_logprobs"), list):
        raise BadResponse("choice.logprobs has no token_logprobs list")
    tokens = lp.get("tokens")
    ids = _ids_from_tokens(tokens) if isinstance(tokens, list) else None
    return _float_tuple(lp["token_logprobs"], "choice.logprobs.token_logprobs"), ids


def _chat_logprobs(lp: Any) -> tuple[tuple[float, ...] | None, tuple[int, ...] | None]:
    if lp is None:
        return None, None
    if not isinstance(lp, dict):
        raise BadResponse("choice.logprobs is not an object")
    entries = lp.get("content")
    if entries is None:
        return None, None
    if not isinstance(entries, list):
        raise BadResponse("choice.logprobs.content is not a list")
    if not all(isinstance(e, dict) for e in entries):
        raise BadResponse("choice.logprobs.content holds a non-object")
    values = _float_tuple([e.get("logprob") for e in entries], "choice.logprobs.content[].logprob")
    return values, _ids_from_tokens([e.get("token") for e in entries])


def parse_response(body: Any, mode: Mode, n: int, model_s: float) -> list[Generation]:
    """Exactly ``n`` generations from a response body, ordered by choice index.

    Raises:
        BadResponse: not the OpenAI shape, or not exactly ``n`` choices.
    """
    if not isinstance(body, dict):
        raise BadResponse(f"the body is a JSON {type(body).__name__}, not an object")
    choices = body.get("choices")
    if not isinstance(choices, list) or not all(isinstance(c, dict) for c in choices):
        raise BadResponse("the body has no 'choices' list")
    if len(choices) != n:
        raise BadResponse(f"asked for n={n} samples, the server returned {len(choices)}")
    usage: dict[str, Any] = body["usage"] if isinstance(body.get("usage"), dict) else {}
    tokens_in = usage.get("prompt_tokens") if isinstance(usage.get("prompt_tokens"), int) else None
    total_out = usage.get("completion_tokens")
    shared_prompt_ids = _int_tuple(body.get("prompt_token_ids"), "prompt_token_ids")
    ordered = sorted(
        choices, key=lambda c: c.get("index", 0) if isinstance(c.get("index"), int) else 0
    )
    out: list[Generation] = []
    for choice in ordered:
        tool_calls: tuple[dict[str, Any], ...] = ()
        if mode == "chat":
            message = choice.get("message")
            if not isinstance(message, dict):
                raise BadResponse("a chat choice has no 'message' object")
            content = message.get("content")
            if content is not None and not isinstance(content, str):
                raise BadResponse("choice.message.content is not a string")
            text = content or ""
            calls = message.get("tool_calls") or []
            if not isinstance(calls, list) or not all(isinstance(c, dict) for c in calls):
                raise BadResponse("choice.message.tool_calls is not a list of objects")
            tool_calls = tuple(calls)
            logprobs, lp_ids = _chat_logprobs(choice.get("logprobs"))
        else:
            text = choice.get("text")
            if not isinstance(text, str):
                raise BadResponse("a completions choice has no 'text' string")
            logprobs, lp_ids = _completion_logprobs(choice.get("logprobs"))
        finish = choice.get("finish_reason")
        if finish is not None and not isinstance(finish, str):
            raise BadResponse("choice.finish_reason is not a string")
        token_ids = _int_tuple(choice.get("token_ids"), "choice.token_ids") or lp_ids
        prompt_ids = _int_tuple(choice.get("prompt_token_ids"), "choice.prompt_token_ids")
        version = choice.get("policy_version", body.get("policy_version"))
        if version is not None and (isinstance(version, bool) or not isinstance(version, int)):
            raise BadResponse("choice.policy_version is not an int")
        if token_ids is not None:
            tokens_out: int | None = len(token_ids)
        elif logprobs is not None:
            tokens_out = len(logprobs)
        elif n == 1 and isinstance(total_out, int):
            tokens_out = total_out
        else:
            tokens_out = None  # usage is summed over the n samples; we will not guess a split
        out.append(
            Generation(
                text=text,
                finish_reason=finish or "stop",
                tokens_in=tokens_in,
                tokens_out=tokens_out,
                model_s=model_s,
                prompt_token_ids=prompt_ids or shared_prompt_ids,
                token_ids=token_ids,
                logprobs=logprobs,
                policy_version=version,
                tool_calls=tool_calls,
            )
        )
    return out
