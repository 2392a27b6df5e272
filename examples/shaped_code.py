"""Reward shaping: the code env with weighted reward functions, one of them custom.

total = 1.0 × tests_passed + 0.1 × has_code_block − 0.2 × too_long
A custom reward function is any callable ``(RewardContext) -> float``.
Run: ``python examples/shaped_code.py`` (fake server) or add ``--base-url URL --model M``.
"""

from __future__ import annotations

from typing import Any

from codegym.envs import CodeEnv, Resources, RewardContext, Rubric, register
from codegym.envs.rewards import has_code_block, tests_passed
from codegym.policies import SamplingParams
from codegym.rollout.quick import run_example
from codegym.tasks.synthetic import generate


def too_long(ctx: RewardContext) -> float:
    """1.0 when the solution is over 20 lines (a length penalty when weighted negative)."""
    return 1.0 if ctx.completion.count("\n") > 20 else 0.0


@register("shaped_code")
class ShapedCode(CodeEnv):
    def __init__(self, resources: Resources, **options: Any) -> None:
        super().__init__(resources, **options)
        self.rubric = Rubric(
            (
                ("tests_passed", tests_passed, 1.0),
                ("has_code_block", has_code_block, 0.1),
                ("too_long", too_long, -0.2),
            )
        )


TASKS = generate("bugfix", 4, seed=5, difficulty=1)


def responder(prompt: Any, params: SamplingParams, index: int) -> str:
    """A scripted model: correct in a code block for even seeds, padded and wrong otherwise."""
    task = next(t for t in TASKS if t.prompt in prompt[-1]["content"])
    if (params.seed or 0) % 2 == 0:
        return f"```python\n{task.prompt}{task.reference}```"
    return f"```python\n{task.prompt}    return None\n" + "# pad\n" * 25 + "```"


if __name__ == "__main__":
    run_example("shaped_code", TASKS, responder)
