"""The outcome taxonomy (DESIGN.md principle 1): whose fault is each result?

Model outcomes are scored; infra outcomes are retried, then excluded and counted, and never
enter a statistic.
"""

from __future__ import annotations

from typing import Final

MODEL_OUTCOMES: Final = frozenset(
    {
        "pass",  # every test held
        "fail",  # the program ran; a test did not hold
        "error",  # the program raised or exited non-zero
        "timeout",  # CPU or wall limit
        "memory",  # memory limit
        "output_limit",  # wrote more than the output cap
        "killed",  # died by a signal it (or its children) caused
        "no_code",  # nothing extractable in the completion
        "truncated",  # the completion was cut at max tokens
        # repository tasks (SWE-style predictions; codegym.tasks.swe.grade)
        "resolved",  # every FAIL_TO_PASS and PASS_TO_PASS test passed
        "unresolved",  # the patch applied; a task test did not pass
        "patch_apply_failed",  # the patch does not apply to the task's state
        "empty_patch",  # no patch at all
        "tests_timeout",  # the task's tests ran past their limit
    }
)
INFRA_OUTCOMES: Final = frozenset(
    {
        "infra",  # the sandbox failed (worker died, jail broke)
        "policy_error",  # the model server failed after retries
        "harness_error",  # a bug on our side while scoring
        "broken_ground_truth",  # the task's own reference fails or flakes
    }
)
ALL_OUTCOMES: Final = MODEL_OUTCOMES | INFRA_OUTCOMES
PASSING_OUTCOMES: Final = frozenset({"pass", "resolved"})
"""The model outcomes that mean the sample passed (a program's tests; a repository task)."""


def is_infra(outcome: str) -> bool:
    """True when the outcome is ours, not the model's (it must not be scored)."""
    return outcome in INFRA_OUTCOMES
