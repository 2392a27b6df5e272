"""Shared helpers: a scripted in-process policy and its reference answers."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any

from codegym.policies import Generation, PolicyError, SamplingParams
from codegym.tasks import Task


class ScriptedPolicy:
    """Deterministic in-process policy: text = answer(prompt, seed); optional faults/delays."""

    def __init__(
        self,
        answer: Callable[[Any, int | None], str],
        *,
        fail: Callable[[int], bool] | None = None,
        delay: Callable[[int], float] | None = None,
    ) -> None:
        self.name = "scripted"
        self.calls = 0
        self._answer, self._fail, self._delay = answer, fail, delay

    async def generate(self, prompt: Any, params: SamplingParams) -> list[Generation]:
        self.calls += 1
        call = self.calls
        if self._delay is not None:
            await asyncio.sleep(self._delay(call))
        if self._fail is not None and self._fail(call):
            raise PolicyError("http_status", f"injected failure on call {call}", status=500)
        text = self._answer(prompt, params.seed)
        return [Generation(text, "stop", tokens_out=len(text))] * params.n


def reference_answer(tasks: Sequence[Task]) -> Callable[[Any, int | None], str]:
    """Answers each synthetic task with its reference, wrapped in a code block."""
    by_prompt = {t.id: t for t in tasks}

    def answer(prompt: Any, seed: int | None) -> str:
        text = prompt[-1]["content"] if not isinstance(prompt, str) else prompt
        for t in by_prompt.values():
            if t.prompt in text:
                wrong = seed is not None and seed % 2 == 1
                body = t.reference if not wrong else "    return None\n"
                return f"```python\n{t.prompt}{body}\n```"
        return "no idea"

    return answer
