"""Score a completion against a task in the sandbox.

Outcomes follow ``codegym.tasks.outcomes``: model outcomes (``pass``, ``fail``, ``error``,
``timeout``, ``memory``, ``output_limit``, ``killed``) are scored; ``infra`` is ours and never
a failure. With several test cases the first failing case decides the outcome.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

from codegym.sandbox import ExecResult, Limits, Verdict
from codegym.sandbox.api import SandboxAPI
from codegym.sandbox.limits import MAX_CODE_BYTES
from codegym.tasks.outcomes import is_infra
from codegym.tasks.task import Task

if TYPE_CHECKING:
    from codegym.sandbox import Sandbox

HARNESS_VERSION = "2"
"""Bumped whenever scoring semantics change; part of every result key."""

DEFAULT_LIMITS = Limits(cpu_s=3.0, wall_s=10.0, memory_mb=512, output_bytes=1 << 20)


@dataclass(frozen=True)
class Score:
    """The outcome of one completion."""

    passed: bool
    outcome: str
    """A name from ``codegym.tasks.outcomes``."""
    detail: str
    """Why it did not pass (first failing test's message, or the infra reason)."""
    cpu_s: float
    """Sandbox CPU seconds across all test cases."""
    wall_s: float
    """Sandbox wall seconds for the whole call."""
    parts: tuple[tuple[str, str], ...] = ()
    """A task with named tests (``Task.parts``): each one's outcome, by name."""

    @property
    def is_infra(self) -> bool:
        return is_infra(self.outcome)


def outcome_of(result: ExecResult, parts: tuple[str, ...] = ()) -> Score:
    """Map a sandbox result (one or more tests) to a scored outcome; ``parts`` names the
    tests, when they have names, for their outcomes one by one."""
    score = _first_failure(result)
    if not parts or score.outcome == "infra" or len(result.tests) != len(parts):
        return score
    each = tuple(
        (name, "pass" if t.passed else "fail" if t.verdict is Verdict.OK else t.verdict.value)
        for name, t in zip(parts, result.tests, strict=True)
    )
    return dataclasses.replace(score, parts=each)


def _first_failure(result: ExecResult) -> Score:
    if result.verdict is Verdict.INFRA:
        return Score(False, "infra", result.reason, result.cpu_s, result.wall_s)
    if not result.tests:
        verdict = result.verdict
        outcome = "error" if verdict is Verdict.OK else verdict.value
        return Score(False, outcome, result.reason or "no test ran", result.cpu_s, result.wall_s)
    for test in result.tests:
        if test.passed:
            continue
        if test.verdict is Verdict.INFRA:
            return Score(False, "infra", test.detail, result.cpu_s, result.wall_s)
        outcome = "fail" if test.verdict is Verdict.OK else test.verdict.value
        return Score(False, outcome, test.detail, result.cpu_s, result.wall_s)
    return Score(True, "pass", "", result.cpu_s, result.wall_s)


async def score(
    sandbox: SandboxAPI, task: Task, completion: str, limits: Limits | None = None
) -> Score:
    """Run the task's tests against ``completion``.

    ``limits`` overrides; otherwise the task's own limits, else ``DEFAULT_LIMITS``.
    """
    lim = limits or task.limits or DEFAULT_LIMITS
    program = task.program(completion)
    unrunnable = _unrunnable(completion, program)
    if unrunnable:
        return Score(False, "error", unrunnable, 0.0, 0.0)
    workspace = None
    if task.image:
        from codegym.tasks import environments

        try:
            workspace = await environments.of(sandbox).digest(task.image)
        except environments.EnvironmentUnavailable as e:  # ours, never the sample's
            return Score(False, "infra", str(e), 0.0, 0.0)
    if task.checker:
        from codegym.tasks.checker import score_with_checker

        return Score(*await score_with_checker(sandbox, task, program, lim, workspace))
    if workspace is None:
        result = await sandbox.run_tests(program, task.tests(), limits=lim)
    else:  # environments.of() found the local Sandbox's image cache: only it runs these
        local = cast("Sandbox", sandbox)
        result = await local.run_tests(program, task.tests(), limits=lim, workspace=workspace)
    return outcome_of(result, task.part_names)


def _unrunnable(completion: str, program: str) -> str:
    """Why a completion cannot even be handed to the sandbox (the model's error), or ''.

    Text with no UTF-8 form (a lone surrogate) and oversized programs are the completion's
    fault, scored per sample as ``error``: never an exception that stops a whole run, and
    never ``infra``.
    """
    try:
        size = len(program.encode("utf-8"))
    except UnicodeEncodeError as e:
        bad = e.object[e.start : e.end]
        if not completion.isascii() and bad and bad in completion:
            return f"the completion has text with no UTF-8 form ({bad!r}, a lone surrogate)"
        raise
    if size > MAX_CODE_BYTES:
        return f"the program is {size} bytes; the sandbox runs at most {MAX_CODE_BYTES}"
    return ""
