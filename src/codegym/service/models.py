"""Wire models of the sandbox service: what travels over HTTP, one pydantic model each.

Encoding of bytes. Program text (``code``, test ``code``) is JSON text and must be
valid UTF-8, as for the in-process sandbox. Every other byte payload (``stdin``, files,
IO-test ``stdin``/``expected``) is a ``Data`` value: a JSON string taken as UTF-8, or an
object ``{"base64": "..."}`` for arbitrary bytes. Outputs (``stdout``/``stderr``) are JSON
strings, exactly the ``str`` the in-process ``ExecResult`` holds. The session file API
(``PUT``/``GET /v1/sessions/{id}/files/{path}``) moves raw bytes
(``application/octet-stream``), no encoding at all.

Conversions to and from ``codegym.sandbox`` types live here so the server and the client
agree by construction.
"""

from __future__ import annotations

import base64
import binascii
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from codegym.sandbox import (
    AssertTest,
    Compare,
    ExecResult,
    IOTest,
    Limits,
    SandboxInputError,
    TestCase,
    TestResult,
    Verdict,
)


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)


class Base64Data(_Model):
    """Arbitrary bytes, base64-encoded (RFC 4648, standard alphabet)."""

    base64: str


Data = str | Base64Data
"""A byte payload: a JSON string (UTF-8) or ``{"base64": ...}``."""


def decode_data(value: Data, what: str) -> bytes:
    """The bytes a ``Data`` value stands for.

    Raises:
        SandboxInputError: the base64 text is malformed.
    """
    if isinstance(value, str):
        return value.encode("utf-8", "surrogateescape")
    try:
        return base64.b64decode(value.base64, validate=True)
    except (binascii.Error, ValueError):
        raise SandboxInputError(
            f"{what}: invalid base64; encode the bytes with the standard base64 alphabet"
        ) from None


def encode_data(value: str | bytes) -> Data:
    """The ``Data`` for a str or bytes: text when it is clean UTF-8, base64 otherwise."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
            return value
        except UnicodeEncodeError:  # lone surrogates: bytes smuggled through surrogateescape
            value = value.encode("utf-8", "surrogateescape")
    return Base64Data(base64=base64.b64encode(bytes(value)).decode("ascii"))


class LimitsModel(_Model):
    """Limits for one execution; the same fields and defaults as ``codegym.sandbox.Limits``."""

    cpu_s: float = 2.0
    """CPU seconds for the whole process tree."""
    wall_s: float | None = None
    """Wall-clock backstop; default ``max(3 × cpu_s, cpu_s + 2)``."""
    memory_mb: int = 512
    """Memory for the process tree, in MB."""
    output_bytes: int = 1 << 20
    """stdout + stderr captured; the program is killed when it writes more."""
    max_processes: int = 64
    """Processes and threads alive at once."""
    disk_mb: int = 64
    """Size of the private work dir and /tmp."""
    open_files: int = 256
    """Open file descriptors per process."""

    def to_limits(self) -> Limits:
        """Raises: SandboxInputError: a value out of range."""
        return Limits(**self.model_dump())

    @classmethod
    def of(cls, limits: Limits) -> LimitsModel:
        return cls(
            cpu_s=limits.cpu_s,
            wall_s=limits.wall_s,
            memory_mb=limits.memory_mb,
            output_bytes=limits.output_bytes,
            max_processes=limits.max_processes,
            disk_mb=limits.disk_mb,
            open_files=limits.open_files,
        )


Command = str | list[str]
"""A string runs through ``/bin/sh -c``; a list is an argv."""


class RunRequest(_Model):
    """One execution: a Python program (``code``) or a command, never both."""

    code: str | None = None
    """Python source, run in a warm interpreter."""
    command: Command | None = None
    """A command run as a fresh process (bash, gcc, node, ...)."""
    argv: list[str] = Field(default_factory=list)
    """Extra ``sys.argv`` entries for a Python program."""
    stdin: Data = ""
    """Bytes fed to the program's standard input."""
    files: dict[str, Data] = Field(default_factory=dict)
    """Files written into the work dir first: relative path -> content."""
    limits: LimitsModel = Field(default_factory=LimitsModel)
    """Resource limits."""
    workspace: str | None = Field(default=None, max_length=200)
    """An image reference (digest or name): run in a fresh copy-on-write workspace of it
    (``GET /v1/images``). Ignored in a session or kept workspace, which has its own."""


class AssertTestModel(_Model):
    """Python test code (usually asserts) that calls the program's functions; it runs in a
    judge the program cannot reach (see ``codegym.sandbox.AssertTest``)."""

    kind: Literal["assert"] = "assert"
    code: str
    """The test code."""
    setup: str = ""
    """Trusted code the judge runs first (a task's prompt); its helpers are the task's."""
    program: list[str] = Field(default_factory=list)
    """Names the test takes from the program even when ``setup`` defines them."""


class IOTestModel(_Model):
    """Feed ``stdin`` to a fresh run of the program and compare its stdout."""

    kind: Literal["io"] = "io"
    stdin: Data = ""
    """Standard input of this test."""
    expected: Data
    """The expected standard output."""
    compare: Compare = "exact"
    """How stdout is compared with ``expected``."""
    tolerance: float = 1e-6
    """Absolute/relative tolerance for ``compare="float"``."""


TestModel = Annotated[AssertTestModel | IOTestModel, Field(discriminator="kind")]


class TestsRequest(_Model):
    """One program against many test cases in a single round trip (``Sandbox.run_tests``)."""

    __test__ = False  # not a pytest class

    code: str | None = None
    """Python source under test."""
    command: Command | None = None
    """The command each IO test runs (any language); pass ``files`` and ``build`` with it."""
    build: Command | None = None
    """Run once before the tests (compile)."""
    tests: list[TestModel] = Field(min_length=1)
    """The test cases, all of one kind."""
    files: dict[str, Data] = Field(default_factory=dict)
    """Files written into the work dir first."""
    limits: LimitsModel = Field(default_factory=LimitsModel)
    """Limits applied per test."""

    def test_cases(self) -> list[TestCase]:
        """Raises: SandboxInputError: bad base64 in a test."""
        out: list[TestCase] = []
        for i, t in enumerate(self.tests):
            if isinstance(t, AssertTestModel):
                out.append(AssertTest(t.code, setup=t.setup, program=tuple(t.program)))
            else:
                out.append(
                    IOTest(
                        decode_data(t.stdin, f"tests[{i}].stdin"),
                        decode_data(t.expected, f"tests[{i}].expected"),
                        t.compare,
                        t.tolerance,
                    )
                )
        return out


def tests_to_wire(tests: list[TestCase]) -> list[AssertTestModel | IOTestModel]:
    """Wire models for in-process test cases."""
    out: list[AssertTestModel | IOTestModel] = []
    for t in tests:
        if isinstance(t, AssertTest):
            out.append(AssertTestModel(code=t.code, setup=t.setup, program=list(t.program)))
        elif isinstance(t, IOTest):
            out.append(
                IOTestModel(
                    stdin=encode_data(t.stdin),
                    expected=encode_data(t.expected),
                    compare=t.compare,
                    tolerance=t.tolerance,
                )
            )
        else:
            raise SandboxInputError(
                f"tests must be AssertTest or IOTest instances, got {type(t).__name__}"
            )
    return out


class TestResultModel(_Model):
    """The outcome of one test case of a batch."""

    __test__ = False

    index: int
    """Position of the test in the batch."""
    passed: bool
    """The test ran to completion and its check held."""
    verdict: Verdict
    """How the program ended for this test."""
    detail: str = ""
    """Why it failed."""
    cpu_s: float | None = None
    wall_s: float | None = None


class ExecResultModel(_Model):
    """The outcome of one execution: the fields of ``codegym.sandbox.ExecResult``."""

    verdict: Verdict
    """ok, error, timeout, memory, output_limit, killed, or infra (the sandbox's fault)."""
    exit_code: int | None
    """Exit status, or null when the program died from a signal or never ran."""
    signal: str | None
    """Name of the signal that ended the program, if any."""
    stdout: str
    stderr: str
    cpu_s: float
    """CPU seconds of the whole process tree."""
    wall_s: float
    """Wall-clock seconds."""
    peak_memory_mb: float | None = None
    """Peak memory of the process tree, when measured."""
    truncated: bool = False
    """stdout/stderr were cut at ``output_bytes``."""
    reason: str = ""
    """For infra: what failed; otherwise a short explanation."""
    tests: list[TestResultModel] = Field(default_factory=list)
    """Per-test outcomes of a batch, in order."""

    @classmethod
    def of(cls, r: ExecResult) -> ExecResultModel:
        return cls(
            verdict=r.verdict,
            exit_code=r.exit_code,
            signal=r.signal,
            stdout=r.stdout,
            stderr=r.stderr,
            cpu_s=r.cpu_s,
            wall_s=r.wall_s,
            peak_memory_mb=r.peak_memory_mb,
            truncated=r.truncated,
            reason=r.reason,
            tests=[
                TestResultModel(
                    index=t.index,
                    passed=t.passed,
                    verdict=t.verdict,
                    detail=t.detail,
                    cpu_s=t.cpu_s,
                    wall_s=t.wall_s,
                )
                for t in r.tests
            ],
        )

    def to_result(self) -> ExecResult:
        return ExecResult(
            verdict=Verdict(self.verdict),
            exit_code=self.exit_code,
            signal=self.signal,
            stdout=self.stdout,
            stderr=self.stderr,
            cpu_s=self.cpu_s,
            wall_s=self.wall_s,
            peak_memory_mb=self.peak_memory_mb,
            truncated=self.truncated,
            reason=self.reason,
            tests=tuple(
                TestResult(
                    index=t.index,
                    passed=t.passed,
                    verdict=Verdict(t.verdict),
                    detail=t.detail,
                    cpu_s=t.cpu_s,
                    wall_s=t.wall_s,
                )
                for t in self.tests
            ),
        )


MAX_BATCH = 64
"""Runs in one ``/v1/batch`` request at most."""
IDEMPOTENCY_KEY_MAX = 200
"""Characters in an ``Idempotency-Key`` (or a batch run's ``key``) at most."""
CAPACITY_WORKERS = "X-Codegym-Workers"
"""Header of execution answers: runs the instance executes at once."""
CAPACITY_ADMITS = "X-Codegym-Admits"
"""Header of execution answers: runs it admits (running or queued) before answering 429."""


class BatchItem(_Model):
    """One run of a batch, with the ``Idempotency-Key`` it would carry alone."""

    key: str = Field(min_length=1, max_length=IDEMPOTENCY_KEY_MAX)
    """Unique per run: a retry of this run (in a batch or alone) gets the first answer."""
    run: RunRequest


class BatchRequest(_Model):
    """Many independent runs in one request; each is admitted, run and answered alone."""

    runs: list[BatchItem] = Field(min_length=1, max_length=MAX_BATCH)


class BatchLine(_Model):
    """One line of a ``/v1/batch`` answer (JSON lines): what ``POST /v1/run`` would have
    answered for ``runs[index]``, sent as soon as that run ends."""

    index: int
    status: int
    """The HTTP status ``/v1/run`` would have answered: 200, 400, 429, 503, ..."""
    result: ExecResultModel | None = None
    """For 200: the run's outcome."""
    detail: str | None = None
    """Otherwise: what was wrong."""
    retry_after: int | None = None
    """For 429 and 503: seconds to wait before retrying this run."""


class SessionCreate(_Model):
    """Open a session: a workspace whose files persist across commands."""

    disk_mb: int = Field(default=256, ge=1, le=65536)
    """Size of the workspace in MB."""


class SessionInfo(_Model):
    """An open session."""

    id: str
    """Use it in ``/v1/sessions/{id}/...``."""
    idle_ttl_s: float
    """The session is closed after this many seconds without a request."""


class WorkspaceCreate(_Model):
    """Open a kept workspace of an image: its files persist across commands."""

    image: str = Field(max_length=200)
    """An image reference: a digest (or a unique prefix) or a name."""
    disk_mb: int = Field(default=256, ge=1, le=65536)
    """What its writes may take, in MB (inodes capped alike)."""


class WorkspaceFork(WorkspaceCreate):
    """Open ``n`` kept workspaces of one image at once (a GRPO group's copies)."""

    n: int = Field(ge=1, le=256)


class WorkspaceInfo(_Model):
    """An open kept workspace."""

    id: str
    """Use it in ``/v1/workspaces/{id}/...``."""
    image: str
    """The digest of its image."""
    idle_ttl_s: float
    """The workspace is closed after this many seconds without a request."""


class WorkspaceForked(_Model):
    workspaces: list[WorkspaceInfo]


class Frozen(_Model):
    """A workspace's state made an image (``POST /v1/workspaces/{id}/freeze``)."""

    image: str
    """The new image's digest: open copies of it with ``/v1/workspaces/fork``."""
    parent: str
    layers: int


class FreezeRequest(_Model):
    name: str | None = Field(default=None, pattern=r"^[a-z0-9][a-z0-9._-]{0,63}$")
    """Also make this name mean the new image."""


class ImageInfo(_Model):
    """An image in the service's cache."""

    digest: str
    name: str
    python: str
    layers: int
    parent: str | None = None


class FileWritten(_Model):
    """A file was written into a session's workspace."""

    path: str
    size: int
    """Bytes written."""


class ErrorBody(_Model):
    """Any non-2xx answer."""

    detail: str
    """What was wrong, and how to fix it."""


class Health(_Model):
    """Liveness or readiness."""

    status: Literal["ok", "starting", "draining", "down"]
    workers: int = 0
    """Sandbox workers alive."""
    in_flight: int = 0
    """Requests admitted and not yet answered."""
    sessions: int = 0
    """Sessions open."""
    workspaces: int = 0
    """Kept workspaces open."""
