"""``CodeEnv``: single-turn code generation, rewarded by the task's tests.

One step: extract the code from the model's turn, run the task's tests in the sandbox,
reward with the rubric (default ``tests_passed``). Outcomes follow
``codegym.tasks.outcomes``:

- ``truncated`` (cut at max tokens) and ``no_code`` (nothing extractable) are the model's
  outcomes: scored, with the rubric seeing ``score=None``;
- a sandbox ``infra`` result ends the step with ``outcome="infra"`` and ``reward=None``: the
  engine retries and then excludes the episode; it is never a reward of 0.

Options: ``style`` (``"chat"``: the prompt asks for a fenced block; ``"continuation"``: the
prompt is the task's own text, for base models on the completions API) and ``rewards``
(built-in reward names to weights, see ``codegym.envs.rewards``).
"""

from __future__ import annotations

from typing import Any, ClassVar

from codegym.envs.env import (
    Env,
    EnvError,
    Message,
    Resources,
    StepResult,
    Stopwatch,
    Turn,
    register,
)
from codegym.envs.rewards import RewardContext, Rubric, rubric_from_weights
from codegym.policies.extract import extract_code
from codegym.tasks import Score, Task, score


def chat_prompt(task: Task) -> str:
    """The instruction a chat model gets for ``task``."""
    if task.kind == "io":
        return (
            "Write a complete Python 3 program that reads standard input and prints the "
            f"answer. Reply with one ```python code block.\n\n{task.prompt}"
        )
    return (
        "Complete the following Python function. Reply with the whole function in one "
        f"```python code block.\n\n```python\n{task.prompt}```"
    )


@register("code")
class CodeEnv(Env):
    """Single turn: write the code, the tests decide."""

    defaults: ClassVar[dict[str, Any]] = {"style": "chat", "rewards": None}

    def __init__(self, resources: Resources, **options: Any) -> None:
        super().__init__(resources, **options)
        if self.options["style"] not in ("chat", "continuation"):
            raise EnvError(f"CodeEnv style={self.options['style']!r}: use 'chat' or 'continuation'")
        self.rubric: Rubric = rubric_from_weights(self.options["rewards"])
        self.task: Task | None = None
        self.messages: list[Message] = []

    def config(self) -> dict[str, Any]:
        return {"name": self.name, "style": self.options["style"], "rubric": self.rubric.config()}

    async def reset(self, task: Task, seed: int) -> list[Message]:
        self.task = task
        content = task.prompt if self.options["style"] == "continuation" else chat_prompt(task)
        self.messages = [{"role": "user", "content": content}]
        return list(self.messages)

    async def step(self, turn: Turn) -> StepResult:
        if self.task is None:
            raise EnvError("CodeEnv.step before reset")
        task = self.task
        self.messages.append({"role": "assistant", "content": turn.text})
        sw = Stopwatch()
        result: Score | None = None
        code = ""
        if turn.finish_reason == "length":
            outcome, detail = "truncated", "the completion hit max_tokens"
        else:
            found = extract_code(turn.text, task_prompt=task.prompt, style=self._extract_style())
            if found is None:
                outcome, detail = "no_code", "no code found in the completion"
            else:
                code = found
                with sw("sandbox"):
                    result = await score(
                        self.resources.require_sandbox(), task, code, self.resources.limits
                    )
                if result.is_infra:
                    return StepResult(
                        done=True,
                        outcome=result.outcome,
                        detail=result.detail,
                        timings=sw.seconds,
                    )
                outcome, detail = result.outcome, result.detail
        with sw("reward"):
            ctx = RewardContext(task, self.messages, code, result, turns=1)
            total, raw = self.rubric(ctx)
        info: dict[str, Any] = {"code": code}
        if result is not None:  # measured, not decided: a timing, not part of equality
            sw.seconds["sandbox_cpu"] = result.cpu_s
        return StepResult(
            done=True,
            reward=total,
            outcome=outcome,
            detail=detail,
            rewards=raw,
            timings=sw.seconds,
            info=info,
        )

    def _extract_style(self) -> Any:
        return self.options["style"]
