"""Native tool calls for a model that only writes text, the way vLLM's ``hermes`` parser
does it: the tools are described to the model in a system message, the model answers a
call as ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``, and the server turns
each such block into an OpenAI ``tool_calls`` entry (``finish_reason`` ``tool_calls``).

Conversations that already hold calls and results (an assistant message with
``tool_calls``, a ``tool`` message) are rendered back into the same text form, so the
model sees its earlier calls as it wrote them. A block that is not a JSON object with a
string ``name`` stays in the content as text: the model's mistake is shown, not dropped.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

OPEN, CLOSE = "<tool_call>", "</tool_call>"
_BLOCK = re.compile(re.escape(OPEN) + r"\s*(.*?)\s*" + re.escape(CLOSE), re.S)


def system_text(tools: Sequence[Mapping[str, Any]]) -> str:
    """The instructions that tell the model which functions it may call, and how."""
    specs = [t.get("function", t) for t in tools]
    return (
        "You may call functions to help with the user's request. The functions are:\n"
        f"<tools>\n{json.dumps(specs, ensure_ascii=False)}\n</tools>\n"
        f'To call one, answer with {OPEN}{{"name": <function name>, "arguments": '
        f"<object of arguments>}}{CLOSE}; you may make several calls."
    )


def with_tools(
    messages: list[dict[str, Any]], tools: Sequence[Mapping[str, Any]] | None
) -> list[dict[str, Any]]:
    """``messages`` as the model reads them: the tools' system message first (when there
    are tools), earlier calls and their results as text."""
    out: list[dict[str, Any]] = []
    if tools:
        out.append({"role": "system", "content": system_text(tools)})
    for m in messages:
        calls = m.get("tool_calls") or []
        if m.get("role") == "assistant" and calls:
            blocks = []
            for c in calls:
                fn = c.get("function", {}) if isinstance(c, Mapping) else {}
                args = fn.get("arguments", "{}")
                try:
                    parsed = json.loads(args) if isinstance(args, str) else args
                except ValueError:
                    parsed = args
                call = {"name": fn.get("name", ""), "arguments": parsed}
                blocks.append(OPEN + json.dumps(call, ensure_ascii=False) + CLOSE)
            text = (m.get("content") or "") + "".join(blocks)
            out.append({"role": "assistant", "content": text})
        elif m.get("role") == "tool":
            out.append({"role": "tool", "content": m.get("content") or ""})
        else:
            out.append(m)
    return out


def parse_calls(text: str) -> tuple[str, list[dict[str, Any]]]:
    """(content without the call blocks, OpenAI ``tool_calls``) of a model's answer."""
    calls: list[dict[str, Any]] = []
    kept: list[str] = []
    at = 0
    for m in _BLOCK.finditer(text):
        try:
            call = json.loads(m.group(1))
        except ValueError:
            continue
        if not isinstance(call, dict) or not isinstance(call.get("name"), str):
            continue
        args = call.get("arguments", {})
        kept.append(text[at : m.start()])
        at = m.end()
        calls.append(
            {
                "id": f"call_{uuid.uuid4().hex[:24]}",
                "type": "function",
                "function": {
                    "name": call["name"],
                    "arguments": args if isinstance(args, str) else json.dumps(args),
                },
            }
        )
    kept.append(text[at:])
    return "".join(kept).strip() if calls else text, calls
