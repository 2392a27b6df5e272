"""Pluggable reward shaping: weighted reward functions over a finished episode.

A reward function is a one-method protocol: ``__call__(ctx) -> float``. ``Rubric`` holds
``(name, function, weight)`` entries and returns the weighted sum plus each function's raw
value (stored on the trajectory). The default code reward is ``tests_passed``: 1.0 when
every test held, else 0.0.

Reward functions only see model outcomes: an episode whose outcome is an infra outcome is
never rewarded (the engine excludes it), so a function never has to guess whether a 0 is
the model's fault.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from codegym.envs.env import EnvError, Message
from codegym.tasks import Score, Task


@dataclass(frozen=True)
class RewardContext:
    """What a reward function may look at."""

    task: Task
    messages: Sequence[Message]
    """The whole conversation, the model's turns included."""
    completion: str
    """The final answer (extracted code for code envs, '' when none)."""
    score: Score | None
    """The test result for code envs; None when the env runs no tests."""
    turns: int
    """Model turns taken."""


class RewardFn(Protocol):
    """Maps a finished episode to a number (higher is better)."""

    def __call__(self, ctx: RewardContext) -> float: ...


def tests_passed(ctx: RewardContext) -> float:
    """1.0 when every test held, else 0.0 (the default code reward)."""
    return 1.0 if ctx.score is not None and ctx.score.passed else 0.0


_BLOCK = re.compile(r"```([^\n`]*)\n(.*?)```", re.S)
_PYTHON = frozenset({"", "python", "py", "python3", "py3"})


def has_code_block(ctx: RewardContext) -> float:
    """1.0 when the last assistant message holds a closed, fenced Python block whose
    contents parse as Python (a format reward: a bare or empty fence, prose in a ``text``
    block or a ``bash`` one earn nothing)."""
    for m in reversed(ctx.messages):
        if m.get("role") == "assistant":
            text = str(m.get("content") or "")
            return 1.0 if any(_is_python(lang, b) for lang, b in _BLOCK.findall(text)) else 0.0
    return 0.0


def _is_python(lang: str, body: str) -> bool:
    if lang.strip().lower() not in _PYTHON or not body.strip():
        return False
    try:
        ast.parse(body)
    except (SyntaxError, ValueError):
        return False
    return True


def fewer_turns(ctx: RewardContext) -> float:
    """1 / turns for an episode whose tests passed, else 0: rewards solving in fewer
    turns, never ending early (a quick wrong answer earns nothing)."""
    if ctx.score is None or not ctx.score.passed:
        return 0.0
    return 1.0 / max(1, ctx.turns)


@dataclass(frozen=True)
class Rubric:
    """Weighted reward functions; ``total = sum(weight × fn(ctx))``."""

    entries: tuple[tuple[str, RewardFn, float], ...] = (("tests_passed", tests_passed, 1.0),)

    def __post_init__(self) -> None:
        names = [n for n, _, _ in self.entries]
        if not names or len(set(names)) != len(names):
            raise EnvError(f"Rubric needs at least one entry and unique names, got {names}")

    def __call__(self, ctx: RewardContext) -> tuple[float, dict[str, float]]:
        """The weighted total and each function's raw value."""
        raw = {name: float(fn(ctx)) for name, fn, _ in self.entries}
        total = sum(w * raw[name] for name, _, w in self.entries)
        return total, raw

    def config(self) -> list[tuple[str, float]]:
        """Names and weights (part of the env's digest)."""
        return [(n, w) for n, _, w in self.entries]


BUILTIN_REWARDS: dict[str, RewardFn] = {
    "tests_passed": tests_passed,
    "has_code_block": has_code_block,
    "fewer_turns": fewer_turns,
}


def rubric_from_weights(weights: dict[str, float] | None) -> Rubric:
    """A rubric of built-in functions by name, e.g. ``{"tests_passed": 1, "has_code_block": 0.1}``.

    Raises:
        EnvError: an unknown function name (the message lists the known ones).
    """
    if not weights:
        return Rubric()
    unknown = set(weights) - set(BUILTIN_REWARDS)
    if unknown:
        raise EnvError(
            f"unknown reward function(s) {sorted(unknown)}; built-in: {sorted(BUILTIN_REWARDS)}"
        )
    return Rubric(tuple((n, BUILTIN_REWARDS[n], float(w)) for n, w in sorted(weights.items())))
