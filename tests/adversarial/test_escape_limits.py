"""Limits hold over everything a program (or one test of it) starts.

A test's CPU time is counted over every process and thread it started, reaped or not;
what a test leaves behind is killed before the next one starts; memory and disk are
bounded for the whole tree.
"""

from __future__ import annotations

from textwrap import dedent

import pytest
from adversary_kit import Clean

from codegym.sandbox import AssertTest, IOTest, Limits, Sandbox, Verdict

pytestmark = pytest.mark.asyncio(loop_scope="module")

BURN = dedent("""
    import os, time, threading
    def burn(s):  # s seconds of this thread's own CPU time
        t = time.thread_time()
        while time.thread_time() - t < s:
            pass
""")
HELPERS = {
    # each helper stays under the per-process CPU rlimit; together they are well over.
    # The run waits until they have burnt their CPU (a pipe, not a clock: a busy host
    # slows them down), then ends without reaping them.
    "zombie children never reaped": BURN
    + dedent("""
        r, w = os.pipe()
        for _ in range(3):
            if os.fork() == 0:
                burn(0.6)
                os.write(w, b"x")
                os._exit(0)
        os.close(w)
        while os.read(r, 3):
            pass
    """),
    "double-forked orphans": BURN
    + dedent("""
        r, w = os.pipe()
        for _ in range(3):
            if os.fork() == 0:
                if os.fork() == 0:
                    burn(0.6)
                    os.write(w, b"x")
                os._exit(0)
        os.close(w)
        while os.read(r, 3):
            pass
    """),
    "threads": BURN
    + dedent("""
        ts = [threading.Thread(target=burn, args=(0.6,)) for _ in range(3)]
        [t.start() for t in ts]
        [t.join() for t in ts]
    """),
    "a shell pipeline": dedent("""
        import subprocess, sys
        spin = "import time\\nt = time.process_time()\\nwhile time.process_time() - t < 0.6: pass"
        subprocess.run(f"for i in 1 2 3; do {sys.executable} -c '{spin}' & done; wait", shell=True)
    """),
}
CPU = Limits(cpu_s=1, wall_s=20, memory_mb=256)


@pytest.mark.parametrize("name", list(HELPERS))
async def test_cpu_through_helpers_in_an_assert_test(sb: Sandbox, clean: Clean, name: str) -> None:
    code = HELPERS[name] + "\ndef f():\n    return 1\n"
    r = await sb.run_tests(code, [AssertTest("assert f() == 1")], limits=CPU)
    (t,) = r.tests
    assert (t.passed, t.verdict) == (False, Verdict.TIMEOUT), (name, t)
    # the helpers' CPU is counted (the main thread burns none); RLIMIT_CPU's kill, which
    # counts in ticks, can land just before the slot's counter passes the limit (0.996 s
    # seen in CI beside two busy loops)
    assert t.cpu_s is not None and t.cpu_s >= 0.9 * CPU.cpu_s, t
    await clean()


@pytest.mark.parametrize("name", list(HELPERS))
async def test_cpu_through_helpers_in_a_stdio_case(sb: Sandbox, clean: Clean, name: str) -> None:
    r = await sb.run_tests(HELPERS[name] + "\nprint(1)\n", [IOTest("", "1")], limits=CPU)
    (t,) = r.tests
    assert (t.passed, t.verdict) == (False, Verdict.TIMEOUT), (name, t)
    await clean()


@pytest.mark.parametrize("name", list(HELPERS))
async def test_cpu_through_helpers_in_a_plain_run(sb: Sandbox, clean: Clean, name: str) -> None:
    r = await sb.run_python(HELPERS[name], limits=CPU)
    assert r.verdict is Verdict.TIMEOUT, (name, r.verdict, r.cpu_s)
    await clean()


async def test_a_test_s_leftovers_do_not_run_into_the_next_test(sb: Sandbox, clean: Clean) -> None:
    # case 1 leaves a spinning daemon; case 2 must neither see it nor pay for its CPU
    code = dedent("""
        import os, sys, time
        n = int(sys.stdin.read())
        if n == 1 and os.fork() == 0:
            os.setsid()
            while True:
                pass
        time.sleep(0.3)
        procs = {int(p) for p in os.listdir('/proc') if p.isdigit()}
        if os.getppid() != 1:
            procs.discard(1)  # the init of a pid namespace the worker's runs share
        print(len(procs))
    """)
    lim = Limits(cpu_s=1, wall_s=4)
    r = await sb.run_tests(code, [IOTest("1", "x"), IOTest("2", "2")], limits=lim)
    first, second = r.tests  # each counts the processes it sees: the supervisor and itself
    assert first.verdict is Verdict.OK and "wrong answer: 3" in first.detail, first
    assert (second.passed, second.verdict) == (True, Verdict.OK), second
    assert second.cpu_s is not None and second.cpu_s < 0.5, second
    await clean()


async def test_output_written_after_the_program_ends(sb: Sandbox, clean: Clean) -> None:
    code = dedent("""
        import os, sys, time
        if os.fork() == 0:
            time.sleep(0.5)
            os.write(1, b"late " * 100000)
            os._exit(0)
        print("1")
    """)
    r = await sb.run_tests(code, [IOTest("", "1")], limits=Limits(cpu_s=1, wall_s=4))
    assert r.tests[0].passed, r.tests  # the late writer was killed with its case
    await clean()


async def test_memory_through_tmpfs_and_children(sb: Sandbox, clean: Clean) -> None:
    code = dedent("""
        import os
        for _ in range(4):
            if os.fork() == 0:
                x = bytearray(100 << 20)
                for i in range(0, len(x), 4096):
                    x[i] = 1
                os._exit(0)
        for d in ('/dev/shm', '/tmp', '/work'):
            try:
                open(d + '/f', 'wb').write(b'x' * (60 << 20))
            except OSError:
                pass
        for _ in range(4):
            os.wait()
        def f():
            return 1
    """)
    lim = Limits(cpu_s=2, wall_s=8, memory_mb=128, disk_mb=64)
    r = await sb.run_tests(code, [AssertTest("assert f() == 1")], limits=lim)
    (t,) = r.tests
    # the tree as a whole is bounded: the run either fits or fails as memory, never infra
    assert t.verdict in (Verdict.OK, Verdict.MEMORY), t
    assert r.peak_memory_mb is None or r.peak_memory_mb <= 128 * 1.1, r.peak_memory_mb
    await clean()
