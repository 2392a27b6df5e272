"""Shaping rewards pay for what they claim to measure, never for its look-alike."""

from __future__ import annotations

import pytest

from codegym.envs.rewards import RewardContext, fewer_turns, has_code_block
from codegym.tasks import Score
from codegym.tasks.synthetic import generate

TASK = generate("infer", 1, 3, 1)[0]


def _ctx(text: str, passed: bool | None, turns: int = 1) -> RewardContext:
    result = None if passed is None else Score(passed, "pass" if passed else "fail", "", 0, 0)
    msgs = [{"role": "user", "content": "q"}, {"role": "assistant", "content": text}]
    return RewardContext(TASK, msgs, "", result, turns)


@pytest.mark.parametrize(
    "text, paid",
    [
        ("```", 0.0),
        ("``````", 0.0),
        ("```python\n```", 0.0),
        ("```python\n   \n```", 0.0),
        ("```python\nprint(1)\n", 0.0),  # never closed
        ("```text\nI give up\n```", 0.0),
        ("```bash\nexit\n```", 0.0),
        ("```\n.\n```", 0.0),
        ("```python\nprint(1)\n```", 1.0),
    ],
)
def test_a_format_reward_pays_only_for_code(text: str, paid: float) -> None:
    assert has_code_block(_ctx(text, None)) == paid


def test_a_turn_reward_pays_only_for_a_pass() -> None:
    assert fewer_turns(_ctx("x", passed=False)) == 0.0
    assert fewer_turns(_ctx("x", passed=None)) == 0.0
    assert fewer_turns(_ctx("x", passed=True, turns=4)) == 0.25
