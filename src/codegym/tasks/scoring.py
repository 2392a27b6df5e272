"""Score a completion against a task in the sandbox.

Outcomes follow DESIGN.md: model outcomes (``pass``, ``fail``, ``error``, ``timeout``,
``memory``, ``output_limit``) are scored; ``infra`` is ours and never a failure.
"""

from __future__ import annotations

from dataclasses import dataclass

from codegym.sandbox import AssertTest, ExecResult, Limits, Sandbox, Verdict
from codegym.tasks.task import Task

DEFAULT_LIMITS = Limits(cpu_s=3.0, wall_s=10.0, memory_mb=512, output_bytes=1 << 20)


@dataclass(frozen=True)
class Score:
    """The outcome of one completion."""

    passed: bool
    outcome: str
    """``pass``, ``fail`` (a test assertion failed), ``error``, ``timeout``, ``memory``,
    ``output_limit``, ``killed`` or ``infra``."""
    detail: str
    cpu_s: float
    wall_s: float

    @property
    def is_infra(self) -> bool:
        return self.outcome == "infra"


def outcome_of(result: ExecResult) -> Score:
    test = result.tests[0] if result.tests else None
    if result.verdict is Verdict.INFRA:
        return Score(False, "infra", result.reason, result.cpu_s, result.wall_s)
    if test is not None and test.passed:
        return Score(True, "pass", "", result.cpu_s, result.wall_s)
    verdict = test.verdict if test is not None else result.verdict
    detail = test.detail if test is not None else result.reason
    if verdict is Verdict.OK:
        outcome = "fail"  # the program ran; the check did not hold
    else:
        outcome = verdict.value
    return Score(False, outcome, detail, result.cpu_s, result.wall_s)


async def score(
    sandbox: Sandbox, task: Task, completion: str, limits: Limits = DEFAULT_LIMITS
) -> Score:
    """Run the task's tests against ``completion``."""
    result = await sandbox.run_tests(
        task.program(completion), [AssertTest(task.check_call())], limits=limits
    )
    return outcome_of(result)
