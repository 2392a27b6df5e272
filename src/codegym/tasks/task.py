"""A task: one problem a model must solve, with the tests that judge it."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Task:
    """One code problem with assert-style tests (HumanEval shape)."""

    id: str
    """Stable identifier, e.g. ``HumanEval/0``."""
    prompt: str
    """What the model sees; completions continue it."""
    entry_point: str
    """The function the tests call."""
    test: str
    """Python source defining ``check(candidate)``."""
    reference: str = ""
    """A known-good completion (the canonical solution), used as ground truth."""
    cluster: str = ""
    """Group label for clustered standard errors."""
    metadata: dict[str, str] = field(default_factory=dict, compare=False, hash=False)

    def program(self, completion: str) -> str:
        """The program that defines the solution and the ``check`` function."""
        return f"{self.prompt}{completion}\n\n{self.test}\n"

    def check_call(self) -> str:
        return f"check({self.entry_point})"
