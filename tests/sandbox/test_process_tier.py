"""The ``process`` tier: no namespaces, but the same contract where it can keep it.

It must say loudly that it isolates almost nothing, and still give each run a fresh
scratch directory, the right verdicts, per-test forks with their own ``random`` stream,
and a killed process group at the end of a run.
"""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

from codegym.sandbox import AssertTest, Limits, Sandbox, Verdict

pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def sb() -> AsyncIterator[Sandbox]:
    with pytest.warns(UserWarning, match="NO real isolation"):
        box = Sandbox(tier="process", workers=1)
        await box.start()
    try:
        yield box
    finally:
        await box.close()


async def test_runs_print_and_judge_cpu_time(sb: Sandbox) -> None:
    r = await sb.run_python("print(6 * 7)")
    assert (r.verdict, r.stdout) == (Verdict.OK, "42\n"), r.reason
    r = await sb.run_python("while True: pass", limits=Limits(cpu_s=0.3, wall_s=3))
    assert r.verdict == Verdict.TIMEOUT, (r.verdict, r.reason)


async def test_each_run_gets_a_fresh_scratch_dir_that_is_removed(sb: Sandbox) -> None:
    name = f"left-{uuid.uuid4().hex}"
    r = await sb.run_python(f"import os\nopen({name!r}, 'w').write('x')\nprint(os.getcwd())")
    assert r.verdict == Verdict.OK, r.reason
    scratch = Path(r.stdout.strip())
    assert not scratch.exists()  # removed with the run
    r = await sb.run_python(f"import os\nprint(os.path.exists({name!r}))")
    assert r.stdout == "False\n"


async def test_runs_as_the_sandbox_uid_when_root(sb: Sandbox) -> None:
    r = await sb.run_python("import os\nprint(os.getuid(), os.geteuid())")
    uid, euid = map(int, r.stdout.split())
    if os.geteuid() == 0:
        assert uid != 0 and euid != 0
    else:
        assert uid == os.getuid()


async def test_assert_tests_each_get_their_own_random_stream(sb: Sandbox) -> None:
    tests = [AssertTest("assert ok() == 1")] * 3
    code = "import random\nprint(random.random(), flush=True)\ndef ok(): return 1\n"
    r = await sb.run_tests(code, tests)
    assert all(t.passed for t in r.tests), r.tests
    assert len(set(r.stdout.split())) == 3, r.stdout


async def test_the_run_s_process_group_is_killed_at_its_end(sb: Sandbox) -> None:
    marker = f"{uuid.uuid4().int % 10**6 + 10**6}"  # sleep's argument is the marker
    r = await sb.run(f"sleep {marker} & echo started", limits=Limits(cpu_s=1, wall_s=3))
    assert (r.verdict, r.stdout) == (Verdict.OK, "started\n"), r.reason

    def alive() -> list[str]:
        found = []
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            except OSError:
                continue
            if marker.encode() in cmdline and b"sleep" in cmdline:
                found.append(pid)
        return found

    # killed at the run's end; on a busy host the kill may take a moment to land
    deadline = time.monotonic() + 15
    while alive() and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
    assert alive() == []
