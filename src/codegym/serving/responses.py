"""The Responses API (``POST /v1/responses``) over the chat engine (no I/O here).

A request's ``instructions`` become a system message and its ``input`` (a string, or
items: messages with text parts, ``function_call`` and ``function_call_output``) the
conversation; function tools are passed on as chat tools. The answer is a ``response``
object whose ``output`` holds a ``message`` item (``output_text``) and one
``function_call`` item per call; a sample cut at ``max_output_tokens`` is ``incomplete``.
Streamed, the chat chunks become the Responses events (``response.created``,
``response.output_text.delta``, …, ``response.completed``).

Refused with a 400 (code ``unsupported``) rather than ignored: ``previous_response_id``
(no responses are kept), built-in tools (web search, file search, …), a ``text.format``
other than text, ``text.verbosity``, ``parallel_tool_calls=false``, ``truncation="auto"``,
``background``, ``reasoning`` options, ``top_logprobs``, ``max_tool_calls``, an
``include`` that asks for output this server does not produce (logprobs, tool outputs),
and any field it does not know. ``seed`` and vLLM's sampling extras go to the chat engine,
which honours or refuses them as it does for chat. The bookkeeping fields clients send by
default (``store``, ``metadata``, ``user``, … ``codegym.serving.engine.IGNORED``) are
ignored; ``include: ["reasoning.encrypted_content"]`` is accepted, as there is no
reasoning to include.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

from pydantic import ValidationError

from codegym.serving.engine import RequestError, check_extras
from codegym.serving.protocol import ChatRequest, ResponsesRequest

_TO_CHAT = ("seed", "top_k", "min_p", "repetition_penalty", "presence_penalty",
            "frequency_penalty")  # fmt: skip
"""Extra fields passed on to the chat request, where the engine honours or refuses them."""

_DEFAULTS: dict[str, tuple[Any, ...]] = {
    "truncation": ("disabled",),
    "parallel_tool_calls": (True,),
    "background": (False,),
    "top_logprobs": (0,),
    "reasoning": ({},),
}
"""Responses fields this server does not implement, with their "off" values."""


def _text(content: Any, where: str) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for p in content:
            if isinstance(p, dict) and p.get("type") in ("input_text", "output_text", "text"):
                parts.append(str(p.get("text", "")))
            else:
                raise RequestError(f"{where}: only text content parts are supported", "input")
        return "".join(parts)
    raise RequestError(f"{where}: content must be a string or text parts", "input")


def as_chat(req: ResponsesRequest) -> ChatRequest:
    """The chat request that answers ``req``.

    Raises:
        RequestError: an option or item this server does not honour.
    """
    if req.previous_response_id:
        raise RequestError(
            "previous_response_id is not supported: this server keeps no responses; send the "
            "whole conversation as input",
            "previous_response_id",
            code="unsupported",
        )
    for key, value in (req.text or {}).items():
        if key == "format" and value not in (None, {"type": "text"}):
            raise RequestError(
                "text.format other than {'type': 'text'} is not supported here",
                "text",
                code="unsupported",
            )
        if key != "format" and value is not None:
            raise RequestError(
                f"text.{key} is not supported here; only text.format (type text) is",
                "text",
                code="unsupported",
            )
    extras = dict(req.model_extra or {})
    include = extras.pop("include", None) or []
    for item in include if isinstance(include, list) else [include]:
        if item != "reasoning.encrypted_content":  # no reasoning here: nothing to include
            raise RequestError(
                f"include {item!r} is not supported here (this server returns text and "
                "function calls only)",
                "include",
                code="unsupported",
            )
    stream_options = extras.pop("stream_options", None) or {}
    if not isinstance(stream_options, dict) or any(
        k != "include_obfuscation" for k in stream_options
    ):
        raise RequestError(
            f"stream_options {stream_options!r} is not supported here",
            "stream_options",
            code="unsupported",
        )
    passed = {k: extras[k] for k in _TO_CHAT if k in extras}
    check_extras(extras, _DEFAULTS, known=frozenset(_TO_CHAT))
    messages: list[dict[str, Any]] = []
    if req.instructions:
        messages.append({"role": "system", "content": req.instructions})
    items = [{"role": "user", "content": req.input}] if isinstance(req.input, str) else req.input
    for i, item in enumerate(items):
        kind = item.get("type", "message")
        if kind == "message":
            role = item.get("role")
            if role not in ("user", "assistant", "system", "developer"):
                raise RequestError(f"input[{i}]: unknown role {role!r}", "input")
            role = "system" if role == "developer" else role
            messages.append({"role": role, "content": _text(item.get("content"), f"input[{i}]")})
        elif kind == "function_call":
            call = {
                "id": item.get("call_id", ""),
                "type": "function",
                "function": {"name": item.get("name", ""), "arguments": item.get("arguments", "")},
            }
            last = messages[-1] if messages else None
            if last is not None and last["role"] == "assistant" and "tool_calls" in last:
                last["tool_calls"].append(call)
            else:
                messages.append({"role": "assistant", "content": "", "tool_calls": [call]})
        elif kind == "function_call_output":
            output = item.get("output", "")
            messages.append(
                {
                    "role": "tool",
                    "tool_call_id": item.get("call_id", ""),
                    "content": output if isinstance(output, str) else json.dumps(output),
                }
            )
        elif kind == "reasoning":
            continue  # a reasoning model's summary: nothing for this model to read
        else:
            raise RequestError(f"input[{i}]: items of type {kind!r} are not supported", "input")
    tools = None
    if req.tools:
        tools = []
        for t in req.tools:
            if t.get("type") != "function":
                raise RequestError(
                    f"tool type {t.get('type')!r} is not supported here (function tools only)",
                    "tools",
                    code="unsupported",
                )
            fn = {k: t[k] for k in ("name", "description", "parameters") if k in t}
            tools.append({"type": "function", "function": fn})
    choice = req.tool_choice if isinstance(req.tool_choice, str) or req.tool_choice is None else "x"
    try:
        return _chat_request(req, messages, tools, choice, passed)
    except ValidationError as e:  # e.g. an empty input, or a passed-on field's bad value
        first = e.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "input"
        name = "input" if where.startswith("messages") else where.split(".")[0]
        raise RequestError(f"field {name!r}: {first['msg']}", name) from e


def _chat_request(
    req: ResponsesRequest,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]] | None,
    choice: str | None,
    passed: dict[str, Any],
) -> ChatRequest:
    return ChatRequest(
        model=req.model,
        messages=messages,
        max_tokens=req.max_output_tokens,
        temperature=req.temperature,
        top_p=req.top_p,
        tools=tools,
        tool_choice=choice,
        stream=req.stream,
        stream_options={"include_usage": True} if req.stream else None,
        **passed,
    )


def _items(content: str, calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    if content or not calls:
        items.append(
            {
                "type": "message",
                "id": f"msg_{uuid.uuid4().hex}",
                "status": "completed",
                "role": "assistant",
                "content": [{"type": "output_text", "text": content, "annotations": []}],
            }
        )
    for c in calls:
        items.append(
            {
                "type": "function_call",
                "id": f"fc_{uuid.uuid4().hex}",
                "call_id": c["id"],
                "name": c["function"]["name"],
                "arguments": c["function"]["arguments"],
                "status": "completed",
            }
        )
    return items


def _response(
    req: ResponsesRequest,
    rid: str,
    output: list[dict[str, Any]],
    usage: dict[str, int] | None,
    finish: str | None,
) -> dict[str, Any]:
    cut = finish == "length"
    status = "in_progress" if finish is None else ("incomplete" if cut else "completed")
    body: dict[str, Any] = {
        "id": rid,
        "object": "response",
        "created_at": int(time.time()),
        "status": status,
        "error": None,
        "incomplete_details": {"reason": "max_output_tokens"} if cut else None,
        "instructions": req.instructions,
        "max_output_tokens": req.max_output_tokens,
        "model": req.model,
        "output": output,
        "parallel_tool_calls": True,
        "temperature": req.temperature,
        "top_p": req.top_p,
        "tool_choice": req.tool_choice or "auto",
        "tools": req.tools or [],
        "metadata": {},
        "usage": None,
    }
    if usage is not None:
        body["usage"] = {
            "input_tokens": usage["prompt_tokens"],
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": usage["completion_tokens"],
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": usage["total_tokens"],
        }
    return body


def as_response(req: ResponsesRequest, chat: dict[str, Any]) -> dict[str, Any]:
    """The ``response`` object of a chat answer to ``as_chat(req)``."""
    choice = chat["choices"][0]
    message = choice["message"]
    output = _items(message.get("content") or "", message.get("tool_calls") or [])
    rid = "resp_" + chat["id"].split("-", 1)[-1]
    return _response(req, rid, output, chat["usage"], choice["finish_reason"])


async def response_events(
    req: ResponsesRequest, chunks: AsyncIterator[dict[str, Any]]
) -> AsyncIterator[dict[str, Any]]:
    """The Responses stream events of a streamed chat answer (one choice)."""
    rid, mid = f"resp_{uuid.uuid4().hex}", f"msg_{uuid.uuid4().hex}"
    seq = 0

    def event(kind: str, **fields: Any) -> dict[str, Any]:
        nonlocal seq
        seq += 1
        return {"type": kind, "sequence_number": seq - 1, **fields}

    yield event("response.created", response=_response(req, rid, [], None, None))
    message = {"type": "message", "id": mid, "status": "in_progress", "role": "assistant",
               "content": []}  # fmt: skip
    yield event("response.output_item.added", output_index=0, item=message)
    part = {"type": "output_text", "text": "", "annotations": []}
    yield event("response.content_part.added", item_id=mid, output_index=0, content_index=0,
                part=part)  # fmt: skip
    text, calls, finish, usage = "", [], "stop", None
    async for chunk in chunks:
        usage = chunk.get("usage") or usage
        for choice in chunk["choices"]:
            delta = choice.get("delta", {})
            if delta.get("content"):
                text += delta["content"]
                yield event("response.output_text.delta", item_id=mid, output_index=0,
                            content_index=0, delta=delta["content"])  # fmt: skip
            for c in delta.get("tool_calls") or []:
                calls.append({"id": c["id"], "function": c["function"]})
            if choice.get("finish_reason"):
                finish = choice["finish_reason"]
    done_part = {"type": "output_text", "text": text, "annotations": []}
    yield event("response.output_text.done", item_id=mid, output_index=0, content_index=0,
                text=text)  # fmt: skip
    yield event("response.content_part.done", item_id=mid, output_index=0, content_index=0,
                part=done_part)  # fmt: skip
    done_message = {**message, "status": "completed", "content": [done_part]}
    yield event("response.output_item.done", output_index=0, item=done_message)
    output = [done_message]
    for k, item in enumerate((i for i in _items("", calls) if i["type"] == "function_call"), 1):
        yield event("response.output_item.added", output_index=k, item=item)
        yield event("response.function_call_arguments.done", item_id=item["id"], output_index=k,
                    arguments=item["arguments"])  # fmt: skip
        yield event("response.output_item.done", output_index=k, item=item)
        output.append(item)
    yield event("response.completed", response=_response(req, rid, output, usage, finish))
