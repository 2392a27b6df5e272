"""Tool-call parsing and stream shaping, without a model (sans-IO parts of the server)."""

from __future__ import annotations

import json

from codegym.serving.stream import Chunks
from codegym.serving.tools import OPEN, parse_calls, with_tools


def test_calls_are_parsed_and_the_rest_is_content() -> None:
    text = 'Let me run it.\n<tool_call>\n{"name": "run", "arguments": {"x": 1}}\n</tool_call>'
    content, calls = parse_calls(text)
    assert content == "Let me run it."
    assert [c["function"]["name"] for c in calls] == ["run"]
    assert json.loads(calls[0]["function"]["arguments"]) == {"x": 1}
    # a block that is not a call stays in the text: the model's mistake is shown
    bad = "<tool_call>not json</tool_call>"
    assert parse_calls(bad) == (bad, [])


def test_earlier_calls_are_rendered_as_the_model_wrote_them() -> None:
    call = {"id": "c", "type": "function", "function": {"name": "f", "arguments": '{"a": 2}'}}
    msgs = with_tools(
        [{"role": "assistant", "content": "", "tool_calls": [call]}],
        [{"type": "function", "function": {"name": "f"}}],
    )
    assert msgs[0]["role"] == "system" and '"name": "f"' in msgs[0]["content"]
    content, calls = parse_calls(msgs[1]["content"])
    assert calls[0]["function"]["name"] == "f" and content == ""


def test_the_stream_never_shows_text_a_stop_string_cuts() -> None:
    words = ["ab", "c", "d", "EN", "D", "x"]
    shaper = Chunks("c", "m", True, 1, ["END"])
    shown = ""
    for i in range(len(words)):
        chunk = shaper.token(0, i, lambda ids: "".join(words[j] for j in ids))
        if chunk is not None:
            shown += chunk["choices"][0]["delta"]["content"]
        assert "E" not in shown
    final = "abcd"  # what the policy's stop cut leaves
    tail = shaper.finish(0, final, [], "stop")
    shown += "".join(c["choices"][0]["delta"].get("content", "") for c in tail)
    assert shown == final and tail[-1]["choices"][0]["finish_reason"] == "stop"


def test_a_tool_call_is_sent_whole_at_the_end() -> None:
    text = 'ok <tool_call>{"name": "f", "arguments": {}}</tool_call>'
    shaper = Chunks("c", "m", True, 1, [OPEN])
    shown = ""
    for i in range(len(text)):
        chunk = shaper.token(0, i, lambda ids: text[: len(ids)])
        if chunk is not None:
            shown += chunk["choices"][0]["delta"]["content"]
    assert "<" not in shown
    content, calls = parse_calls(text)
    tail = shaper.finish(0, content, calls, "stop")
    assert tail[-2]["choices"][0]["delta"]["tool_calls"][0]["function"]["name"] == "f"
    assert tail[-1]["choices"][0]["finish_reason"] == "tool_calls"


def test_half_a_character_waits_for_the_rest() -> None:
    shaper = Chunks("c", "m", False, 1, [])
    assert shaper.token(0, 1, lambda ids: "a\ufffd") is not None  # "a" goes out
    assert shaper.token(0, 2, lambda ids: "a\ufffd") is None
    chunk = shaper.token(0, 3, lambda ids: "aé")
    assert chunk is not None and chunk["choices"][0]["text"] == "é"
