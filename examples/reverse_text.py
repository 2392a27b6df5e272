"""Reverse a string: a single-turn env with a partial-credit reward and no sandbox.

Reward = similarity between the answer and the reversed text (difflib ratio, 0..1).
Run: ``python examples/reverse_text.py`` (fake server) or add ``--base-url URL --model M``.
"""

from __future__ import annotations

import difflib
import random
from typing import Any

from codegym.envs import Env, Message, StepResult, Turn, register
from codegym.policies import SamplingParams
from codegym.rollout.quick import run_example
from codegym.tasks import IOCase, Task


@register("reverse_text")
class ReverseText(Env):
    async def reset(self, task: Task, seed: int) -> list[Message]:
        self.target = task.io_cases[0].expected
        return [
            {
                "role": "user",
                "content": f"Reverse this text exactly, reply with it only:\n{task.prompt}",
            }
        ]

    async def step(self, turn: Turn) -> StepResult:
        answer = turn.text.strip()
        reward = difflib.SequenceMatcher(None, answer, self.target).ratio()
        outcome = "pass" if answer == self.target else "fail"
        return StepResult(done=True, reward=reward, outcome=outcome, rewards={"similarity": reward})


def make_tasks(n: int, seed: int = 0) -> list[Task]:
    rng = random.Random(seed)
    words = ["gym", "code", "reward", "policy", "sandbox", "token", "group"]
    out = []
    for i in range(n):
        text = " ".join(rng.choice(words) for _ in range(4))
        out.append(Task(id=f"reverse/{i}", prompt=text, io_cases=(IOCase(text, text[::-1]),)))
    return out


def responder(prompt: Any, params: SamplingParams, index: int) -> str:
    """A scripted model: right for even seeds, one character off for odd ones."""
    text = prompt[-1]["content"].split("\n", 1)[1][::-1]
    return text if (params.seed or 0) % 2 == 0 else text[:-1]


if __name__ == "__main__":
    run_example("reverse_text", make_tasks(4), responder)
