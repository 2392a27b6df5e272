"""How run processes are forked: what that must not change.

The zygote keeps one idle child set up for the next run (see ``_zygote``). A run must
still get the tmpfs size it asked for, and a pool must keep serving when that idle child
dies before its request.

Single-threaded forks skip CPython's at-fork hooks (``_harness.fork``). Runs must still
each get their own ``random`` stream, as after ``os.fork``, and threads and imports must
work in the child, including in the per-test forks after a program started threads.
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

from codegym.sandbox import AssertTest, HostUnsupported, IOTest, Limits, Sandbox, Verdict
from jail import no_jail

pytestmark = pytest.mark.asyncio(loop_scope="module")

# Two 10 MB files: each is under the per-file limit (RLIMIT_FSIZE = disk_mb), together
# they overflow a 16 MB tmpfs but fit a 64 MB one.
FILL = """
import os
for name in ("a", "b"):
    try:
        with open(f"/tmp/{name}", "wb") as f:
            f.write(b"x" * (10 << 20))
        print(name, "ok")
    except OSError as e:
        print(name, os.strerror(e.errno))
"""


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def sb() -> AsyncIterator[Sandbox]:
    box = Sandbox(tier="jail", workers=1)
    try:
        await box.start()
    except HostUnsupported as e:
        no_jail(e)
    try:
        yield box
    finally:
        await box.close()


def _children(pid: int) -> list[int]:
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                out.append(int(entry.name))
    return out


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "gone"


def _idle_children(sb: Sandbox) -> list[int]:
    """Host pids of the zygote's prepared children: bwrap -> bwrap's pid 1 -> zygote ->
    child in a pid namespace of its own (the zygote's forker stays in the zygote's)."""
    (worker,) = sb._workers
    assert worker.proc is not None
    level = [worker.proc.pid]
    for _ in range(2):
        level = [c for p in level for c in _children(p)]
    (zygote,) = level
    own_ns = os.readlink(f"/proc/{zygote}/ns/pid")
    return [c for c in _children(zygote) if os.readlink(f"/proc/{c}/ns/pid") != own_ns]


async def test_each_run_gets_the_tmpfs_size_it_asks_for(sb: Sandbox) -> None:
    # the idle child was set up for the previous run's size: a new size needs a new child
    for disk_mb, second in (
        (16, "No space left on device"),
        (64, "ok"),
        (16, "No space left on device"),
    ):
        r = await sb.run_python(FILL, limits=Limits(disk_mb=disk_mb, memory_mb=512))
        assert r.verdict == Verdict.OK, (r.reason, r.stderr[-300:])
        assert r.stdout.splitlines() == ["a ok", f"b {second}"], (disk_mb, r.stdout)


async def test_an_idle_child_killed_from_outside_is_replaced(sb: Sandbox) -> None:
    r = await sb.run_python("print(1)")
    assert r.verdict == Verdict.OK
    # the zygote forks the next run's child after it has answered: wait for it to exist
    for _ in range(3000):
        idle = _idle_children(sb)
        if idle:
            break
        await asyncio.sleep(0.01)
    assert len(idle) == 1, idle  # the next run's child, waiting for its request
    os.kill(idle[0], signal.SIGKILL)
    # dead while idle (a kill racing the request would be an infra retry): on a busy host
    # the kill can take a while to land, so wait for the state, with a generous bound
    for _ in range(3000):
        if _state(idle[0]) in ("Z", "gone"):
            break
        await asyncio.sleep(0.01)
    assert _state(idle[0]) in ("Z", "gone")
    infra, recycles = sb.infra_count, sb.recycles
    r = await sb.run_python("print(2)")
    assert (r.verdict, r.stdout) == (Verdict.OK, "2\n"), (r.reason, r.stderr[-300:])
    assert (sb.infra_count, sb.recycles) == (infra, recycles)  # no retry, no restart


async def test_every_run_and_every_assert_test_gets_its_own_random_stream(sb: Sandbox) -> None:
    runs = [await sb.run_python("import random; print(random.random())") for _ in range(3)]
    assert all(r.verdict == Verdict.OK for r in runs)
    assert len({r.stdout for r in runs}) == 3, [r.stdout for r in runs]
    # several assert tests run the program afresh each: each run reseeds, as a fork does
    tests = [AssertTest("assert ok() == 1")] * 3
    code = "import random\nprint(random.random(), flush=True)\ndef ok(): return 1\n"
    r = await sb.run_tests(code, tests)
    assert r.verdict == Verdict.OK and all(t.passed for t in r.tests), r.tests
    draws = r.stdout.split()
    assert len(draws) == 3 and len(set(draws)) == 3, r.stdout


THREADS = """
import threading
seen = []
def work(i):
    import json, decimal  # imports from threads: the import lock must be free
    seen.append(json.dumps(str(decimal.Decimal(i) / 4)))
threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
for t in threads:
    t.start()
for t in threads:
    t.join()
print(sorted(seen), threading.active_count())
"""


async def test_threads_and_imports_work_in_a_run(sb: Sandbox) -> None:
    r = await sb.run_python(THREADS, limits=Limits(wall_s=10))
    assert (r.verdict, r.stdout) == (
        Verdict.OK,
        "['\"0\"', '\"0.25\"', '\"0.5\"', '\"0.75\"'] 1\n",
    ), (
        r.stdout,
        r.stderr[-300:],
    )


async def test_stdio_case_forks_after_the_harness_imported_from_a_thread(sb: Sandbox) -> None:
    # each stdio case is a fork of the run's supervisor; a program thread lives in a case
    code = (
        "import threading, time, fractions\n"
        "threading.Thread(target=time.sleep, args=(30,), daemon=True).start()\n"
        "print(threading.active_count())\n"
    )
    tests = [IOTest("", "2")] * 2
    r = await sb.run_tests(code, tests, limits=Limits(wall_s=10))
    assert [t.passed for t in r.tests] == [True, True], [(t.verdict, t.detail) for t in r.tests]


async def test_a_program_that_breaks_random_still_gets_its_forked_cases(sb: Sandbox) -> None:
    # the reseed after a fork must not fail the fork, as CPython's own hook does not
    code = "import random\nrandom.seed = None\nrandom.Random.seed = None\nprint(int(input()) + 1)\n"
    tests = [IOTest("1", "2"), IOTest("2", "3")]
    r = await sb.run_tests(code, tests)
    assert [t.passed for t in r.tests] == [True, True], [(t.verdict, t.detail) for t in r.tests]
