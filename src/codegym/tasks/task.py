"""A task: one problem a model must solve, with the tests that judge it.

Two shapes share one record: assert-style (``entry_point`` + ``test`` defining
``check(candidate)``, HumanEval) and stdin/stdout (``io_cases`` compared by ``compare``,
MBPP/APPS/CodeContests style). ``digest`` covers everything that decides a verdict, so a
result keyed by it is invalidated when the task changes.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from functools import cached_property
from typing import Literal

from codegym.errors import CodegymError
from codegym.sandbox import AssertTest, Compare, IOTest, Limits

_OWN_CHECK = "__codegym_check__"
"""What the test's ``check`` is called when the task's function is itself ``check``."""


class TaskError(CodegymError, ValueError):
    """A task, or an option that makes tasks, is invalid; the message names it and the fix."""


@dataclass(frozen=True)
class IOCase:
    """One stdin/stdout test case."""

    stdin: str
    """Fed to the program's standard input."""
    expected: str
    """The standard output a correct program prints."""


@dataclass(frozen=True)
class Task:
    """One code problem and the tests that judge it."""

    id: str
    """Stable identifier, e.g. ``HumanEval/0``."""
    prompt: str
    """What the model sees; for assert-style tasks completions continue it."""
    entry_point: str = ""
    """Assert-style: the function the tests call."""
    test: str = ""
    """Assert-style: Python source defining ``check(candidate)``."""
    io_cases: tuple[IOCase, ...] = ()
    """Stdin/stdout style: the cases a full program must pass."""
    compare: Compare = "tokens"
    """Stdin/stdout style: how stdout is compared (see ``codegym.sandbox.IOTest``)."""
    reference: str = ""
    """A known-good completion (assert-style) or program (stdin/stdout), the ground truth."""
    cluster: str = ""
    """Group label for clustered standard errors (defaults to the id)."""
    limits: Limits | None = None
    """Per-task limits (set from the reference's measured CPU time); None: the suite's."""
    parts: tuple[tuple[str, str], ...] = ()
    """Assert-style, instead of ``test``: named tests, each code the judge runs in a fresh
    run of the program (EvalPlus's ``base`` and ``plus``); the sample passes when all
    do, and each part's outcome is reported (``Score.parts``)."""
    harness: str = ""
    """Trusted code the judge runs before each test instead of the prompt (a checker
    library the parts call); empty: the prompt (see ``_judge_setup``)."""
    checker: str = ""
    """Stdin/stdout style: a special judge, Python source defining ``check(input, output,
    expected)``, that decides instead of ``compare`` (``codegym.tasks.checker``)."""
    preamble: str = ""
    """Code the program starts with that the model is not shown: the imports a benchmark's
    own harness puts before every program (LiveCodeBench's ``from typing import *``, …)."""
    image: str = ""
    """The environment the program and its tests run in: a shipped one's name (``numpy``)
    or an image spec's path (``codegym.tasks.environments``); empty: the sandbox's own
    Python, standard library only."""
    repo: str = ""
    """A repository task instead of tests here: its ``SweTask`` as JSON, graded by
    ``codegym.tasks.swe.grade`` on a copy of its repository (the ``repo`` environment)."""
    metadata: dict[str, str] = field(default_factory=dict, compare=False, hash=False)
    """Free-form labels (source, difficulty, family); not part of the digest."""

    def __post_init__(self) -> None:
        if not self.id:
            raise TaskError("a task needs a non-empty id")
        if sum(map(bool, (self.io_cases, self.test or self.parts, self.repo))) != 1 or (
            self.test and self.parts
        ):
            raise TaskError(
                f"task {self.id!r}: give either assert tests (entry_point + test or parts), "
                "io_cases, or a repository task (repo), exactly one of them"
            )
        if self.checker and not self.io_cases:
            raise TaskError(f"task {self.id!r}: a checker judges stdin/stdout cases only")
        if self.image and self.repo:
            raise TaskError(
                f"task {self.id!r}: a repository task runs in its own image (repo), not image"
            )
        if (self.test or self.parts) and not self.entry_point:
            raise TaskError(f"task {self.id!r}: assert-style tests need an entry_point")

    @property
    def part_names(self) -> tuple[str, ...]:
        """The names of the tests ``tests()`` returns, when they have names."""
        return tuple(name for name, _ in self.parts)

    @property
    def kind(self) -> Literal["assert", "io", "repo"]:
        return "repo" if self.repo else "io" if self.io_cases else "assert"

    @property
    def group(self) -> str:
        """The cluster label used for clustered errors."""
        return self.cluster or self.id

    def program(self, completion: str) -> str:
        """The Python program to run for ``completion``.

        Assert-style: the prompt continued by the completion; the test is not part of it
        (it runs in the sandbox's judge, see ``tests``). Stdin/stdout: the completion
        itself is the program. Either way after the ``preamble``, if any.
        """
        if self.kind == "io":
            return self.preamble + completion
        return f"{self.preamble}{self.prompt}{completion}\n"

    def check_call(self) -> str:
        return f"check({self.entry_point})"

    def tests(self) -> list[AssertTest] | list[IOTest]:
        """The sandbox test cases for this task.

        Assert-style: one test, the task's ``check`` called on the entry point, run by a
        judge the program cannot reach; the prompt is the judge's trusted set-up, so the
        helpers it defines (and the test calls) are the task's, never the completion's.
        """
        if self.kind == "io":
            return [IOTest(c.stdin, c.expected, compare=self.compare) for c in self.io_cases]
        if self.kind == "repo":
            raise TaskError(
                f"task {self.id!r} is a repository task: grade it with the repo environment "
                "(codegym.tasks.swe.grade), not with sandbox tests"
            )
        if self.parts:
            # each part looks the entry point up itself, when it is ready to time the
            # program (its import included): no name is forced in from the program
            return [AssertTest(code, setup=self._judge_setup) for _, code in self.parts]
        root = re.match(r"[A-Za-z_]\w*", self.entry_point)
        names = (root.group(0),) if root else ()
        test, call = self.test, self.check_call()
        if names == ("check",):
            # the task's own function is called check (MBPP/56): the test's check() would
            # hide it (and call itself); the test's gets a name no program is judged by
            test = re.sub(r"^def check\(", f"def {_OWN_CHECK}(", test, flags=re.M)
            call = f"{_OWN_CHECK}({self.entry_point})"
        code = f"{test}\n\n{call}\n"
        return [AssertTest(code, setup=self._judge_setup, program=names)]

    @cached_property
    def _judge_setup(self) -> str:
        """The prompt as code the judge can run before the test.

        As it is when it compiles (HumanEval's prompts end in a docstring); with a stub
        body when it stops right after a function's header (``def f(x):``); empty when
        neither compiles, and then every name the test uses comes from the program.
        """
        if self.harness:
            return self.harness
        for candidate in (self.prompt, self.prompt.rstrip("\n") + "\n    ...\n"):
            try:
                compile(candidate, "<prompt>", "exec")
            except (SyntaxError, ValueError):
                continue
            return candidate
        return ""

    def digest(self) -> str:
        """sha256 over everything that decides a verdict (not ``metadata``)."""
        return self._digest

    @cached_property
    def _digest(self) -> str:  # a frozen record: compute once (result keys use it per sample)
        body = {
            "id": self.id,
            "prompt": self.prompt,
            "entry_point": self.entry_point,
            "test": self.test,
            "io": [[c.stdin, c.expected] for c in self.io_cases],
            "compare": self.compare,
            "limits": self.limits.to_wire() if self.limits else None,
        }
        if self.parts:  # absent otherwise: every digest made before parts existed holds
            body["parts"] = [list(p) for p in self.parts]
            body["harness"] = self.harness
        if self.preamble:
            body["preamble"] = self.preamble
        if self.checker:
            body["checker"] = self.checker
        if self.image:  # what the environment is made of, not where its spec lies
            from codegym.tasks.environments import spec_key

            body["image"] = spec_key(self.image)
        raw = json.dumps(body, sort_keys=True, ensure_ascii=False).encode("utf-8", "surrogatepass")
        return hashlib.sha256(raw).hexdigest()
