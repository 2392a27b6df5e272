"""Grade a patch against a repository task: on a fresh copy of the task's state, with the
task's own test files restored, by structured test results.

The starting state is the clean image with the task's bug applied, frozen once per task
(``task_state``) and forked for every grading, so predictions for one instance never
rebuild anything. A grading opens a kept workspace of that state, applies the patch with
``git apply`` (from stdin: no file of ours in the tree), undoes what a fix has no business
changing (tests and their configuration, the environment, new files at the top level, new
links: ``_restore_tests``), runs the suite with JUnit XML, and decides: resolved when
every ``FAIL_TO_PASS`` and every ``PASS_TO_PASS`` test passed (a skip fails either).

Model outcomes: ``resolved``, ``unresolved``, ``patch_apply_failed``, ``empty_patch``,
``tests_timeout``. Infra (the workspace, the worker, the image) is ``infra``: never scored.
The tests run in the same interpreter as the patched package (as in every pytest-based
grader): undoing everything but the project's own code closes the routes that need no code
in that interpreter, and the outcomes are read from the grader's own signed account with
canaries (``channel``), so package code that rewrites the report is ``unresolved``; what
that still cannot stop is said there.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import stat
from collections.abc import Callable
from dataclasses import dataclass, field

from codegym.sandbox import ExecResult, Limits, Sandbox, SandboxError, SandboxInfraError, Verdict
from codegym.sandbox.images import Image, ImageBuildError, ImageStore
from codegym.sandbox.images.changes import Changes, LowerView
from codegym.sandbox.workspace import Workspace
from codegym.tasks.swe.channel import Channel
from codegym.tasks.swe.suite import matches, run_suite
from codegym.tasks.swe.task import SweTask

MODEL_OUTCOMES = ("resolved", "unresolved", "patch_apply_failed", "empty_patch", "tests_timeout")
STEP = Limits(cpu_s=30, wall_s=60, memory_mb=1024, disk_mb=256, output_bytes=1 << 20)
DEFAULT_GLOBS = [
    "**/test_*.py",
    "**/*_test.py",
    "**/tests/**",
    "**/test/**",
    "**/testing/**",
    "**/conftest.py",
    "**/test*.txt",
]
_NOT_SOURCE = (".pyc", ".pyo", ".so", ".pyd", ".egg-info", ".dist-info", "entry_points.txt")
"""Path parts no fix may add or change (bytecode, compiled modules, package metadata)."""
MAX_PATCH_BYTES = 32 << 20
"""A bigger patch is refused as the model's (the sandbox takes 64 MiB of input at most)."""
_MAX_UNDONE = 10_000
"""More paths to undo than this and the patch is refused (unresolved) outright."""


@dataclass(frozen=True)
class Graded:
    outcome: str
    """One of ``MODEL_OUTCOMES``, or ``infra``."""
    detail: str = ""
    tests: dict[str, str] = field(default_factory=dict)
    """Test id -> outcome, for the task's tests."""

    @property
    def resolved(self) -> bool:
        return self.outcome == "resolved"


async def task_state(sb: Sandbox, task: SweTask) -> Image:
    """The task's starting state as an image: the clean image with ``task.bug`` applied,
    made once (a kept workspace, frozen) and found again by its inputs."""
    store = _store(sb)
    key = "task-" + hashlib.sha256(f"{task.image}\n{task.bug}".encode()).hexdigest()
    marker = store.root / "builds" / key
    if marker.is_file():
        try:
            return store.get(marker.read_text().strip())
        except SandboxError:
            pass
    async with await sb.workspace(task.image) as ws:
        r = await ws.run(["git", "apply", "--whitespace=nowarn", "-"], stdin=task.bug, limits=STEP)
        if r.verdict is not Verdict.OK:
            raise SandboxInfraError(
                f"{task.instance_id}: its bug does not apply to {task.image}: {r.stderr[-500:]}"
            )
        state = await ws.freeze()
    try:
        store._atomic_write(marker, state.digest)
    except OSError as e:  # a full disk under the cache: ours, not the patch's
        raise ImageBuildError(f"cannot record the state of {task.instance_id}: {e}") from None
    return state


async def grade(sb: Sandbox, task: SweTask, patch: str) -> Graded:
    """Grade ``patch`` (a unified/git diff against the task's state)."""
    if not patch.strip():
        return Graded("empty_patch")
    try:
        raw = patch.encode()
    except UnicodeEncodeError as e:  # a lone surrogate: no file can hold it
        return Graded("patch_apply_failed", f"the patch is not valid text: {e}")
    if len(raw) > MAX_PATCH_BYTES:
        return Graded("patch_apply_failed", f"the patch is {len(raw)} bytes; at most "
                      f"{MAX_PATCH_BYTES} are applied")  # fmt: skip
    try:
        state = await task_state(sb, task)
        async with await sb.workspace(state) as ws:
            r = await ws.run(["git", "apply", "--whitespace=nowarn", "-"], stdin=raw, limits=STEP)
            if r.verdict is Verdict.INFRA:
                return Graded("infra", r.reason)
            if r.verdict is not Verdict.OK:
                return Graded("patch_apply_failed", (r.stderr or r.reason)[-1000:])
            lower = LowerView(list(reversed(_store(sb).layer_paths(state))))
            try:
                await _restore_tests(ws, task, lower)
            except SandboxInfraError:
                raise
            except SandboxError as e:  # the patched tree cannot be put back: the patch's doing
                return Graded("unresolved", f"the patched tree cannot be checked: {e}")
            names = {*task.FAIL_TO_PASS, *task.PASS_TO_PASS}
            account = (_channel(task, lower), names)
            run = await run_suite(ws, task.test_cmd, timeout_s=task.timeout_s, account=account)
    except (SandboxInfraError, ImageBuildError) as e:  # a worker, a workspace, a full disk
        return Graded("infra", str(e))
    if run.outcome == "infra":
        return Graded("infra", run.result.reason)
    if run.outcome == "timeout":
        return Graded("tests_timeout", run.result.reason)
    mine = {t: run.statuses.get(t, "missing") for t in (*task.FAIL_TO_PASS, *task.PASS_TO_PASS)}
    if run.outcome == "broken":
        return Graded("unresolved", "the suite did not run (no report)", mine)
    if run.outcome == "forged":
        return Graded("unresolved", f"the test report was tampered with: {run.detail}", mine)
    # every task test must pass: a PASS_TO_PASS test passed in every clean run, so a skip
    # now is the library's doing (code that raises SkipTest hides what it broke)
    failing = [t for t, o in mine.items() if o != "passed"]
    return Graded("unresolved" if failing else "resolved", ", ".join(failing[:5]), mine)


def _channel(task: SweTask, lower: LowerView) -> Channel:
    """The grading's report channel, its canaries in ``channel_file`` (a forgery aimed at
    the failing tests meets them there)."""
    path = channel_file(task, lower)
    if path is not None:
        return Channel.new(path, lower.read(path).decode("utf-8", "replace"))
    return Channel.new(f"test_{secrets.token_hex(4)}.py", "")  # only doctests: a module of its own


def channel_file(task: SweTask, lower: LowerView) -> str | None:
    """The module a grading of ``task`` appends its canaries to: that of the task's first
    test that is a Python file (None: only doctests, so a module of its own)."""
    ids = (*task.FAIL_TO_PASS, *task.PASS_TO_PASS)
    files = [t.split("::", 1)[0] for t in ids] + list(task.test_files)
    return next((p for p in files if p.endswith(".py") and lower.lookup(p) is not None), None)


async def _restore_tests(ws: Workspace, task: SweTask, lower: LowerView) -> None:
    """Keep only what a fix may change; put everything else back as the image has it.

    A patch may change the project's existing files (not its tests) and add Python modules
    to the project's existing packages (folders with an ``__init__.py``). Everything else
    is undone before the tests run: test files, test data and test configuration (restored
    to the image's version, or removed when new), the environment (``.venv``, ``.debian``),
    anything new outside a package (a ``sitecustomize.py`` or ``pytest.py`` on a
    ``sys.path`` root runs before any test; a ``test_x.txt`` is a doctest), bytecode and
    compiled modules, package metadata, new folders, and links the image did not have.
    """
    allowed = may_change(task, lower)
    remove, restore = _plan(await ws.changes(), allowed, lower)
    if len(remove) > _MAX_UNDONE:
        raise SandboxError(f"the patch adds {len(remove)} paths where a fix may not")
    # the paths go by stdin (NUL-separated): as arguments, enough of them fail the exec
    if remove:
        r = await ws.run(["xargs", "-0", "rm", "-rf", "--"], "\0".join(remove), limits=STEP)
        _check(r, "undoing what the patch may not change")
    if restore:
        _check(await ws.run(["true"], files=restore, limits=STEP), "restoring the tests")
    left, _ = _plan(await ws.changes(), allowed, lower)
    if left:  # belt and braces: nothing the patch may not add is still there
        raise SandboxError(f"{len(left)} paths could not be undone, e.g. {left[0]!r}")


def may_change(
    task: SweTask, lower: LowerView
) -> Callable[[str, str, os.stat_result | None], bool]:
    """Whether a fix may leave the change ``(path, kind, the image's entry or None)``."""
    # a collected file that is not Python (a doctest file) is a test file too
    listed = set(task.test_files) | {
        t.split("::", 1)[0]
        for t in (*task.FAIL_TO_PASS, *task.PASS_TO_PASS)
        if not t.split("::", 1)[0].endswith(".py")
    }

    def allowed(rel: str, kind: str, before: os.stat_result | None) -> bool:
        parts = rel.split("/")
        if rel in listed or matches(rel, DEFAULT_GLOBS) or parts[0] in (".venv", ".debian"):
            return False
        if any(p == "__pycache__" or p.endswith(_NOT_SOURCE) for p in parts):
            return False  # bytecode (pytest trusts a rewritten test's pyc by its header),
            # package metadata (entry points load pytest plugins)
        if kind == "l" and (before is None or not stat.S_ISLNK(before.st_mode)):
            return False  # a new link could point anywhere
        if before is None:  # new: only a module in one of the project's packages
            folder = rel.rpartition("/")[0]
            return (
                kind == "f"
                and rel.endswith(".py")
                and bool(folder)
                and lower.lookup(f"{folder}/__init__.py") is not None
            )
        return True

    return allowed


def _check(r: ExecResult, what: str) -> None:
    if r.verdict is Verdict.INFRA:
        raise SandboxInfraError(r.reason)
    if r.verdict is not Verdict.OK:
        raise SandboxError(f"{what} failed: {r.reason} {r.stderr[-300:]}")


def _plan(
    changes: Changes,
    allowed: Callable[[str, str, os.stat_result | None], bool],
    lower: LowerView,
) -> tuple[list[str], dict[str, str | bytes]]:
    """What to remove and what to write back so that only allowed changes remain."""
    restore: dict[str, str | bytes] = {}
    remove: list[str] = []
    for rel, kind, _mode, extra in changes.entries:
        before = lower.lookup(rel)
        was_dir = before is not None and stat.S_ISDIR(before.st_mode)
        opaque = kind == "d" and bool(extra)
        if kind == "f" and before is not None and stat.S_ISREG(before.st_mode):
            if changes.blobs[extra] == lower.read(rel):
                continue  # as the image has it (restored, or touched and put back)
        if kind == "d":
            if opaque and was_dir:  # a folder of the image emptied: what must stay returns
                for sub in lower.files_under(rel):
                    if not allowed(sub, "f", lower.lookup(sub)):
                        restore[sub] = lower.read(sub)
            elif before is None and not allowed(rel, "d", None):
                remove.append(rel)
            continue
        if was_dir:  # a folder of the image removed or replaced by a file or link
            for sub in lower.files_under(rel):
                if not allowed(sub, "f", lower.lookup(sub)):
                    restore[sub] = lower.read(sub)
            if kind in ("f", "l") and not allowed(rel, kind, None):
                remove.append(rel)
            continue
        if allowed(rel, kind, before):
            continue
        if kind != "w":
            remove.append(rel)
        if before is not None and stat.S_ISREG(before.st_mode):
            restore[rel] = lower.read(rel)
    return remove, restore


def _store(sb: Sandbox) -> ImageStore:
    if sb.images is None:
        raise SandboxError("grading repository tasks needs Sandbox(images=ImageStore())")
    return sb.images
