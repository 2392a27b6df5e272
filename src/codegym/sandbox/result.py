"""What an execution produced, and whose fault a failure was."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field


class Verdict(enum.StrEnum):
    """How an execution ended.

    All but ``INFRA`` are the program's doing and may be scored. ``INFRA`` is ours (the
    sandbox failed) and must never be scored as a failure; ``ExecResult.reason`` says why.
    """

    OK = "ok"
    """Exited with status 0."""
    ERROR = "error"
    """Exited with a non-zero status (an uncaught exception, a compile error, ...)."""
    TIMEOUT = "timeout"
    """Used more CPU time than allowed, or hit the wall-clock backstop."""
    MEMORY = "memory"
    """Ran out of its memory allowance (OOM kill or MemoryError)."""
    OUTPUT_LIMIT = "output_limit"
    """Wrote more to stdout and stderr than allowed; killed."""
    KILLED = "killed"
    """Died from a signal that was not one of our limits (a segfault, an abort, ...)."""
    INFRA = "infra"
    """The sandbox failed, not the program."""

    @property
    def is_infra(self) -> bool:
        return self is Verdict.INFRA


@dataclass(frozen=True)
class TestResult:
    """The outcome of one test case of a batch."""

    __test__ = False  # not a pytest class

    index: int
    """Position of the test in the batch."""
    passed: bool
    """The test ran to completion and its check held."""
    verdict: Verdict
    """How the program ended for this test (``OK`` with ``passed=False`` is a wrong answer)."""
    detail: str = ""
    """Why it failed: the assertion, the exception, the first bytes of a wrong answer."""
    cpu_s: float | None = None
    wall_s: float | None = None


@dataclass(frozen=True)
class ExecResult:
    """The outcome of one execution."""

    verdict: Verdict
    exit_code: int | None
    """The exit status, or None when the program died from a signal or never ran."""
    signal: str | None
    """The name of the signal that ended the program (``SIGSEGV``), if any."""
    stdout: str
    stderr: str
    cpu_s: float
    """CPU seconds used by the whole process tree."""
    wall_s: float
    peak_memory_mb: float | None = None
    """Peak memory of the process tree, when the tier can measure it."""
    truncated: bool = False
    """stdout/stderr were cut at ``Limits.output_bytes``."""
    reason: str = ""
    """For ``INFRA``: what failed. For other verdicts: a short human explanation."""
    tests: tuple[TestResult, ...] = field(default=())
    """Per-test outcomes of a batch call, in order; empty for a plain run."""

    @classmethod
    def infra(cls, reason: str) -> ExecResult:
        """The result of an execution the sandbox itself failed (nothing ran, or nothing
        of it can be trusted)."""
        return cls(Verdict.INFRA, None, None, "", "", 0.0, 0.0, reason=reason)

    @property
    def ok(self) -> bool:
        return self.verdict is Verdict.OK

    @property
    def passed(self) -> bool:
        """A batch passed when every test passed; a plain run when it exited 0."""
        if self.tests:
            return self.verdict is Verdict.OK and all(t.passed for t in self.tests)
        return self.ok
