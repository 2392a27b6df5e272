"""Multi-turn: write a function, see the failing test, try again (up to three attempts).

Each turn's code runs the task's tests in the sandbox; a failure goes back to the model as
feedback. Reward = 1 / attempts when the tests pass, else 0. Sandbox infra failures end the
step with outcome "infra" (excluded by the engine, never a 0).
Run: ``python examples/fix_until_pass.py`` (fake server) or add ``--base-url URL --model M``.
"""

from __future__ import annotations

from typing import Any

from codegym.envs import Env, Message, StepResult, Turn, register
from codegym.envs.code_env import chat_prompt
from codegym.policies import SamplingParams, extract_code
from codegym.rollout.quick import run_example
from codegym.tasks import Task, score
from codegym.tasks.synthetic import generate


@register("fix_until_pass")
class FixUntilPass(Env):
    defaults = {"max_attempts": 3}

    async def reset(self, task: Task, seed: int) -> list[Message]:
        self.task, self.attempts = task, 0
        return [{"role": "user", "content": chat_prompt(task)}]

    async def step(self, turn: Turn) -> StepResult:
        self.attempts += 1
        code = extract_code(turn.text, task_prompt=self.task.prompt, style="chat")
        if code is None:
            result_outcome, detail, passed = "no_code", "no code block found", False
        else:
            s = await score(self.resources.require_sandbox(), self.task, code)
            if s.is_infra:
                return StepResult(done=True, outcome=s.outcome, detail=s.detail)
            result_outcome, detail, passed = s.outcome, s.detail, s.passed
        if passed or self.attempts >= self.options["max_attempts"]:
            reward = 1.0 / self.attempts if passed else 0.0
            return StepResult(
                done=True,
                reward=reward,
                outcome=result_outcome,
                detail=detail,
                info={"attempts": self.attempts},
            )
        feedback = f"The tests failed ({result_outcome}): {detail[:500]}\nFix the code."
        return StepResult(observation=({"role": "user", "content": feedback},))


TASKS = generate("infer", 4, seed=11, difficulty=2)


def responder(prompt: Any, params: SamplingParams, index: int) -> str:
    """A scripted model that gets it right on its second try."""
    task = next(t for t in TASKS if t.prompt in prompt[0]["content"])
    tries = sum(m["role"] == "assistant" for m in prompt)
    body = task.reference if tries >= 1 else "    return None\n"
    return f"```python\n{task.prompt}{body}```"


if __name__ == "__main__":
    run_example("fix_until_pass", TASKS, responder)
