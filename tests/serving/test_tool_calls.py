"""A real tool call over HTTP: the model writes a ``<tool_call>`` block and the official
``openai`` SDK gets parsed ``tool_calls`` back (chat, streamed chat, Responses API).

The tiny random model never writes a call by itself, so its logits are forced: the served
policy's model is wrapped so that each forward pass still runs the real network (and its
KV cache) but its last-position logits allow only the next token of a fixed call text,
then EOS. Everything after the logits is the server's own path: the policy's sampler and
stop handling, the engine's tool parsing, the stream shaping, the HTTP app.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
import torch

from codegym.serving import ModelServer

TEXT = 'Let me look.<tool_call>{"name": "bash", "arguments": {"command": "ls -a"}}</tool_call>'
CHAT_TOOLS: Any = [
    {
        "type": "function",
        "function": {
            "name": "bash",
            "parameters": {"type": "object", "properties": {"command": {"type": "string"}}},
        },
    }
]
RESPONSES_TOOLS: Any = [{"type": "function", "name": "bash", "parameters": {"type": "object"}}]
MESSAGES: Any = [{"role": "user", "content": "list the files"}]


class Forced(torch.nn.Module):
    """``inner`` with its next-token logits forced to ``tokens`` in turn (then ``eos``).

    A forward pass over more than one position (or without a cache) starts a new decode;
    each one-token pass after it moves one step along ``tokens``. Every row of a batch is
    at the same step, as the policy decodes a batch's rows together.
    """

    def __init__(self, inner: Any, tokens: list[int], eos: int) -> None:
        super().__init__()
        self.inner = inner
        self.config = inner.config
        self.tokens = [*tokens, eos]
        self.step = 0

    def forward(self, **kw: Any) -> Any:
        out = self.inner(**kw)
        ids = kw["input_ids"]
        fresh = ids.shape[1] > 1 or all(kw.get(k) is None for k in ("cache", "past_key_values"))
        self.step = 0 if fresh else self.step + 1
        target = self.tokens[min(self.step, len(self.tokens) - 1)]
        logits = torch.full_like(out.logits, -1e4)
        logits[:, -1, target] = 0.0
        out.logits = logits
        return out


@pytest.fixture(scope="module")
def calling(model_dir: Path) -> Iterator[ModelServer]:
    with ModelServer(model_dir, model_name="tiny") as srv:
        policy = srv.policy
        tokens = policy.encode(TEXT)
        assert policy.decode(tokens) == TEXT
        policy.model = Forced(policy.model, tokens, policy.tokenizer.eos_token_id)
        yield srv


def client(srv: ModelServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=srv.base_url, api_key="EMPTY", max_retries=0, timeout=120)


def assert_the_call(name: str, arguments: str) -> None:
    assert name == "bash"
    assert json.loads(arguments) == {"command": "ls -a"}


def test_a_chat_completion_returns_the_tool_call(calling: ModelServer) -> None:
    r = client(calling).chat.completions.create(
        model="tiny", messages=MESSAGES, tools=CHAT_TOOLS, max_tokens=200, seed=1
    )
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content == "Let me look."
    (call,) = choice.message.tool_calls or []
    assert call.type == "function" and call.id.startswith("call_")
    assert_the_call(call.function.name, call.function.arguments)
    # without tools (or with tool_choice none) the same text is plain content
    plain = client(calling).chat.completions.create(
        model="tiny", messages=MESSAGES, tools=CHAT_TOOLS, tool_choice="none", max_tokens=200
    )
    assert plain.choices[0].message.tool_calls is None
    assert plain.choices[0].message.content == TEXT
    assert plain.choices[0].finish_reason == "stop"


def test_a_streamed_chat_completion_returns_the_tool_call(calling: ModelServer) -> None:
    chunks = list(
        client(calling).chat.completions.create(
            model="tiny", messages=MESSAGES, tools=CHAT_TOOLS, max_tokens=200, stream=True
        )
    )
    deltas = [c.choices[0].delta for c in chunks if c.choices]
    content = "".join(d.content or "" for d in deltas)
    assert "<tool_call>" not in content and content.strip() == "Let me look."
    calls = [tc for d in deltas for tc in d.tool_calls or []]
    assert len(calls) == 1 and calls[0].function is not None
    assert calls[0].index == 0 and calls[0].id
    assert_the_call(calls[0].function.name or "", calls[0].function.arguments or "")
    finals = [
        c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason
    ]
    assert finals == ["tool_calls"]


def test_the_responses_api_returns_the_function_call(calling: ModelServer) -> None:
    r = client(calling).responses.create(
        model="tiny", input="list the files", tools=RESPONSES_TOOLS, max_output_tokens=200
    )
    assert r.status == "completed"
    assert r.output_text == "Let me look."
    (call,) = [o for o in r.output if o.type == "function_call"]
    assert call.call_id.startswith("call_")
    assert_the_call(call.name, call.arguments)
    events = list(
        client(calling).responses.create(
            model="tiny", input="x", tools=RESPONSES_TOOLS, max_output_tokens=200, stream=True
        )
    )
    done = events[-1]
    assert done.type == "response.completed"
    (streamed,) = [o for o in done.response.output if o.type == "function_call"]
    assert_the_call(streamed.name, streamed.arguments)
    assert any(e.type == "response.function_call_arguments.done" for e in events)
