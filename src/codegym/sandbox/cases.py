"""What a run takes as tests (``AssertTest``, ``IOTest``: a ``TestCase``) and as text
(``Text``), below ``Sandbox``, its workspaces and the ``SandboxAPI`` contract so that each
of them can name these types without importing the others. Re-exported from
``codegym.sandbox`` (and ``codegym.sandbox.sandbox``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Text = str | bytes
Compare = Literal["exact", "tokens", "float", "lines"]


@dataclass(frozen=True)
class AssertTest:
    """Python test code (usually asserts) that calls the program's functions.

    The test runs in a judge process the program cannot reach, never in the program's
    own: a name the test uses and does not define is looked up in the program, whose
    functions and classes are called across the boundary with plain data (numbers,
    strings, bytes, booleans, None, and lists, tuples, dicts and sets of them) going in
    and coming back; anything else a program returns fails the test as its error.
    """

    code: str
    setup: str = ""
    """Trusted code the judge runs first, e.g. a task's prompt: the helper functions it
    defines are the task's own, and the program cannot replace them."""
    program: tuple[str, ...] = ()
    """Names the test takes from the program even when ``setup`` defines them (the
    function under test, which a prompt defines as a stub)."""


@dataclass(frozen=True)
class IOTest:
    """A test that feeds ``stdin`` to a fresh run of the program and compares stdout."""

    stdin: Text
    expected: Text
    compare: Compare = "exact"
    """``exact`` (trailing whitespace ignored), ``tokens``, ``float`` (tokens, numbers
    compared with ``tolerance``) or ``lines`` (line by line, numbers as exact decimals:
    LiveCodeBench's rule)."""
    tolerance: float = 1e-6


TestCase = AssertTest | IOTest
