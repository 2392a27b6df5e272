"""The chunks of a streamed answer, in the OpenAI shapes (no I/O here).

Completions chunks are ``text_completion`` objects whose choices carry a ``text`` delta;
chat chunks are ``chat.completion.chunk`` objects whose choices carry a ``delta`` (the
role first, then ``content`` pieces, then ``tool_calls``). Each choice ends with a chunk
whose ``finish_reason`` is set; with ``stream_options.include_usage`` a last chunk with no
choices carries the usage (the server then sends ``data: [DONE]``).

Text is released as tokens decode, except the tail that could still be the start of a
stop string or of a ``<tool_call>`` block (``hold``), and a trailing partial UTF-8
character; what the final, cut text holds beyond what was released comes with the choice's
last chunk. Once a ``<tool_call>`` block has begun nothing more of that choice streams until
the end, when its calls are sent whole.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any


class Chunks:
    """Builds the chunks of one streamed response with ``n`` choices."""

    def __init__(self, prefix: str, model: str, chat: bool, n: int, hold: Sequence[str]) -> None:
        self.id = f"{prefix}-{uuid.uuid4().hex}"
        self.created = int(time.time())
        self.model = model
        self.chat = chat
        self.hold = [h for h in hold if h]
        self.keep = max((len(h) for h in self.hold), default=1) - 1
        self.tokens: list[list[int]] = [[] for _ in range(n)]
        self.sent = [""] * n
        self.frozen = [False] * n

    def _chunk(self, choices: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
        obj = "chat.completion.chunk" if self.chat else "text_completion"
        return {
            "id": self.id,
            "object": obj,
            "created": self.created,
            "model": self.model,
            "choices": choices,
            **extra,
        }

    def _piece(self, index: int, text: str, finish: str | None = None) -> dict[str, Any]:
        if self.chat:
            delta: dict[str, Any] = {"content": text} if text else {}
            return {"index": index, "delta": delta, "logprobs": None, "finish_reason": finish}
        return {"index": index, "text": text, "logprobs": None, "finish_reason": finish}

    def opening(self) -> list[dict[str, Any]]:
        """The role of every chat choice (nothing for completions)."""
        if not self.chat:
            return []
        return [
            self._chunk(
                [
                    {
                        "index": i,
                        "delta": {"role": "assistant", "content": ""},
                        "logprobs": None,
                        "finish_reason": None,
                    }
                    for i in range(len(self.tokens))
                ]
            )
        ]

    def token(
        self, index: int, token: int, decode: Callable[[list[int]], str]
    ) -> dict[str, Any] | None:
        """The chunk a newly decoded token releases, if any."""
        self.tokens[index].append(token)
        if self.frozen[index]:
            return None
        text = decode(self.tokens[index])
        cut = len(text)
        for h in self.hold:  # a hold marker seen whole: nothing past it may stream
            at = text.find(h, len(self.sent[index]))
            if at >= 0:
                cut = min(cut, at)
                self.frozen[index] = True
        if not self.frozen[index]:
            cut = max(len(self.sent[index]), cut - self.keep) if self.hold else cut
        while cut > len(self.sent[index]) and text[cut - 1] == "\ufffd":
            cut -= 1  # half of a multi-byte character: wait for the rest
        if cut <= len(self.sent[index]):
            return None
        piece = text[len(self.sent[index]) : cut]
        self.sent[index] = text[:cut]
        return self._chunk([self._piece(index, piece)])

    def finish(
        self, index: int, text: str, calls: list[dict[str, Any]], reason: str
    ) -> list[dict[str, Any]]:
        """The last chunks of a choice: what was held back, its tool calls, its end."""
        out: list[dict[str, Any]] = []
        sent = self.sent[index]
        rest = text[len(sent) :] if text.startswith(sent) else ""
        if rest:
            out.append(self._chunk([self._piece(index, rest)]))
        if calls:
            deltas = [
                {"index": k, "id": c["id"], "type": "function", "function": c["function"]}
                for k, c in enumerate(calls)
            ]
            out.append(
                self._chunk(
                    [
                        {
                            "index": index,
                            "delta": {"tool_calls": deltas},
                            "logprobs": None,
                            "finish_reason": None,
                        }
                    ]
                )
            )
        out.append(self._chunk([self._piece(index, "", "tool_calls" if calls else reason)]))
        return out

    def usage(self, usage: dict[str, int]) -> dict[str, Any]:
        return self._chunk([], usage=usage)
