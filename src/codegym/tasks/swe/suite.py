"""Run a package's own test suite in a workspace and read its results as JUnit XML."""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass
from typing import Any

from codegym.sandbox import ExecResult, Limits, Verdict
from codegym.tasks.swe import junit
from codegym.tasks.swe.channel import Channel, verify

JUNIT_PATH = "/tmp/.codegym-junit.xml"
# The suite's own output goes nowhere; the report is the run's stdout. No plugin loads by
# itself (a package's metadata could name one): a suite that needs one says `-p NAME`.
SCRIPT = (
    f'PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 "$@" {" ".join(junit.PYTEST_JUNIT)} '
    f"--junitxml={JUNIT_PATH} >/dev/null 2>&1; cat {JUNIT_PATH}"
)


@dataclass(frozen=True)
class SuiteRun:
    """One run of a suite: ``outcome`` is ``ok`` (a report came back), ``timeout``,
    ``broken`` (no report: the suite could not even run), ``forged`` (the grader's account
    shows the report was tampered with; ``detail`` says how) or ``infra`` (ours)."""

    outcome: str
    statuses: dict[str, str]
    xml: str
    result: ExecResult
    detail: str = ""


def limits(timeout_s: float) -> Limits:
    return Limits(
        cpu_s=timeout_s,
        wall_s=timeout_s * 2,
        memory_mb=2048,
        disk_mb=256,
        output_bytes=32 << 20,
        max_processes=256,
    )


async def run_suite(
    where: Any,
    test_cmd: list[str],
    *,
    timeout_s: float,
    files: dict[str, str | bytes] | None = None,
    workspace: Any = None,
    account: tuple[Channel, set[str]] | None = None,
) -> SuiteRun:
    """Run ``test_cmd`` (pytest) in ``where``: a kept ``Workspace``, or a ``Sandbox`` with
    ``workspace=`` an image (a fresh copy), with ``files`` written first. With ``account``
    (a grading's channel and the task's test ids), outcomes come from the grader's signed
    stream, checked against the JUnit file (``channel``)."""
    script, stdin = SCRIPT, b""
    if account is not None:
        channel, names = account
        script, stdin = channel.script(JUNIT_PATH), channel.stdin
        files = {**(files or {}), **channel.files}
    argv = ["sh", "-c", script, "sh", *test_cmd]
    kw: dict[str, Any] = {"files": files, "limits": limits(timeout_s)}
    if workspace is not None:
        kw["workspace"] = workspace
    r = await where.run(argv, stdin, **kw)
    if r.verdict is Verdict.INFRA:
        return SuiteRun("infra", {}, "", r)
    if r.verdict is Verdict.TIMEOUT:
        return SuiteRun("timeout", {}, "", r)
    if account is not None:
        got = verify(channel, r.stdout, names)
        if got.tampered:
            return SuiteRun("forged", {}, got.xml, r, got.tampered)
        if got.statuses is None:
            return SuiteRun("broken", {}, got.xml, r)
        return SuiteRun("ok", got.statuses, got.xml, r)
    statuses = junit.parse(r.stdout) if r.stdout.strip() else None
    if statuses is None:
        return SuiteRun("broken", {}, r.stdout, r)
    return SuiteRun("ok", statuses, r.stdout, r)


def matches(path: str, globs: list[str]) -> bool:
    """Whether ``path`` (relative, ``/``-separated) matches one of ``globs`` (``**/`` also
    matches nothing, so ``**/conftest.py`` matches a top-level ``conftest.py``)."""
    for g in globs:
        if fnmatch.fnmatchcase(path, g):
            return True
        if g.startswith("**/") and fnmatch.fnmatchcase(path, g[3:]):
            return True
    return False
