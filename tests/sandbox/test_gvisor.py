"""The ``gvisor`` tier: the same API and verdicts, with gVisor's kernel under the program.

One pool serves the module (a worker starts in about a second); tests that break or
replace workers make their own.
"""

from __future__ import annotations

import glob
import subprocess
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from codegym.sandbox import AssertTest, IOTest, Limits, Sandbox, Session, Verdict
from codegym.sandbox.tiers.gvisor import GVisorTier
from codegym.testing import await_until

PROBLEMS = GVisorTier().problems()
pytestmark = [
    pytest.mark.gvisor,
    pytest.mark.skipif(bool(PROBLEMS), reason=f"gvisor tier unavailable: {PROBLEMS}"),
    pytest.mark.asyncio(loop_scope="module"),
]
SMALL = Limits(cpu_s=1, wall_s=3, memory_mb=128)
SLOW_FAULTS = Limits(cpu_s=5, wall_s=15, memory_mb=128)  # page faults are slow under ptrace


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def gv() -> AsyncIterator[Sandbox]:
    async with Sandbox(tier="gvisor", workers=2) as sb:
        yield sb


async def test_ok_run_reports_stdout_stderr_and_costs(gv: Sandbox) -> None:
    r = await gv.run_python("import sys\nprint('out')\nprint('err', file=sys.stderr)")
    assert r.verdict == Verdict.OK and r.exit_code == 0
    assert r.stdout == "out\n" and r.stderr == "err\n"
    assert 0 < r.wall_s < 5 and r.cpu_s >= 0
    assert r.peak_memory_mb is not None and r.peak_memory_mb > 0


async def test_stdin_files_and_argv_reach_the_program(gv: Sandbox) -> None:
    code = "import sys\nprint(input()[::-1], open('d/x.txt').read(), sys.argv[1:])"
    r = await gv.run_python(code, "abc\n", files={"d/x.txt": "hi"}, argv=["-v"])
    assert r.stdout == "cba hi ['-v']\n", r.stderr


@pytest.mark.parametrize(
    ("code", "limits", "verdict"),
    [
        ("raise ValueError('boom')", SMALL, Verdict.ERROR),
        ("while True: pass", Limits(cpu_s=0.5, wall_s=10), Verdict.TIMEOUT),
        ("import time; time.sleep(30)", Limits(cpu_s=1, wall_s=0.5), Verdict.TIMEOUT),
        ("x = bytearray(1 << 30)", SMALL, Verdict.MEMORY),
        ("x = [bytearray(1 << 20) for _ in range(2000)]", SLOW_FAULTS, Verdict.MEMORY),
        ("while True: print('y' * 1000)", Limits(output_bytes=10_000), Verdict.OUTPUT_LIMIT),
        ("import ctypes; ctypes.string_at(0)", SMALL, Verdict.KILLED),
    ],
    ids=["error", "cpu", "wall", "memory", "memory-gradual", "output", "segfault"],
)
async def test_verdicts(gv: Sandbox, code: str, limits: Limits, verdict: Verdict) -> None:
    r = await gv.run_python(code, limits=limits)
    assert r.verdict == verdict, (r.reason, r.stderr[-300:])


async def test_cpu_timeout_is_cut_by_the_cpu_limit_not_the_wall(gv: Sandbox) -> None:
    r = await gv.run_python("while True: pass", limits=Limits(cpu_s=0.5, wall_s=10))
    assert r.verdict == Verdict.TIMEOUT and r.signal == "SIGXCPU" and r.wall_s < 5


async def test_output_is_capped_and_marked(gv: Sandbox) -> None:
    r = await gv.run_python("print('x' * 100_000)", limits=Limits(output_bytes=1000))
    assert r.verdict == Verdict.OUTPUT_LIMIT and r.truncated and len(r.stdout) <= 1000


async def test_network_is_denied(gv: Sandbox) -> None:
    code = (
        "import os, socket\n"
        "print(sorted(os.listdir('/sys/class/net')) if os.path.isdir('/sys/class/net') else '-')\n"
        "socket.create_connection(('1.1.1.1', 53), timeout=2)\n"
    )
    r = await gv.run_python(code)
    assert r.verdict == Verdict.ERROR and "PermissionError" in r.stderr, r.stderr


async def test_program_runs_unprivileged_on_gvisors_kernel(gv: Sandbox) -> None:
    code = (
        "import os\n"
        "caps = open('/proc/self/status').read().split('CapEff:')[1].split()[0]\n"
        "print(os.getuid(), int(caps, 16), os.getpid(), os.uname().release)\n"
    )
    r = await gv.run_python(code)
    uid, caps, pid, release = r.stdout.split()
    host_release = subprocess.run(["uname", "-r"], capture_output=True, text=True).stdout
    assert uid != "0" and caps == "0" and pid == "1"
    assert release != host_release.strip()  # syscalls are served by gVisor, not the host


async def test_host_files_and_processes_are_out_of_sight(gv: Sandbox) -> None:
    code = (
        "import os\n"
        "pids = [p for p in os.listdir('/proc') if p.isdigit()]\n"
        "print(os.path.exists('/etc/shadow'), os.path.exists('/root'), pids)\n"
        "open('/usr/evil', 'w')\n"
    )
    r = await gv.run_python(code)
    assert r.stdout == "False False ['1']\n" and r.verdict == Verdict.ERROR
    assert "Read-only file system" in r.stderr or "Permission denied" in r.stderr, r.stderr


async def test_fork_bomb_is_stopped_by_the_process_limit(gv: Sandbox) -> None:
    code = (
        "import os, time\n"
        "n = 0\n"
        "try:\n"
        "    while True:\n"
        "        if os.fork() == 0:\n"
        "            time.sleep(30); os._exit(0)\n"
        "        n += 1\n"
        "except OSError as e:\n"
        "    print(n < 32, e.errno)\n"
    )
    r = await gv.run_python(code, limits=Limits(max_processes=16, wall_s=10))
    assert r.verdict == Verdict.OK and r.stdout == "True 11\n", (r.reason, r.stderr)
    assert (await gv.run_python("print(1)")).stdout == "1\n"


async def test_assert_and_io_batches_give_one_verdict_per_test(gv: Sandbox) -> None:
    code = "def inc(x):\n    return x + 1\n"
    tests = [AssertTest("assert inc(1) == 2"), AssertTest("assert inc(1) == 3"),
             AssertTest("inc(None)"), AssertTest("assert inc(-1) == 0")]  # fmt: skip
    r = await gv.run_tests(code, tests)
    assert [t.passed for t in r.tests] == [True, False, False, True]
    assert [t.verdict for t in r.tests] == ["ok", "ok", "error", "ok"]
    r = await gv.run_tests("print(int(input()) * 2)", [IOTest("2", "4"), IOTest("3", "7")])
    assert [t.passed for t in r.tests] == [True, False]


async def test_shell_commands_run(gv: Sandbox) -> None:
    r = await gv.run("echo $((6 * 7)); cat; cp /usr/bin/true t && ./t && echo copied", stdin="in")
    assert r.verdict == Verdict.OK and r.stdout == "42\nincopied\n", r.stderr


async def test_pool_survives_a_crashed_worker() -> None:
    async with Sandbox(tier="gvisor", workers=1) as sb:
        worker = sb._workers[0]
        names = [worker.spec.name]
        assert worker.proc is not None
        worker.proc.kill()  # the whole runsc sandbox dies with it
        # the pool sees a dead worker (not one it could race a request into)
        await await_until(lambda: not worker.alive, timeout=30, what="the killed worker dead")
        r = await sb.run_python("print('back')")
        assert r.verdict == Verdict.OK and r.stdout == "back\n" and sb.recycles == 1
        r = await sb.run_python("import os, signal\nos.kill(-1, signal.SIGKILL)\nprint('x')")
        assert r.verdict != Verdict.INFRA
        assert (await sb.run_python("print(2)")).stdout == "2\n"

    def gone() -> bool:  # the worker's runsc processes exit after the pool closes
        ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
        return not [ln for ln in ps.splitlines() if "runsc" in ln and names[0] in ln]

    await await_until(gone, timeout=30, what="the runsc processes to exit")
    assert not glob.glob(f"/tmp/codegym-gvisor-{names[0]}-*")
    assert not glob.glob(f"/sys/fs/cgroup/*/codegym/{names[0]}")


async def test_session_keeps_files_between_commands() -> None:
    async with Session(tier="gvisor", disk_mb=32) as s:
        await s.write_file("notes/a.txt", "first")
        r = await s.run("cat notes/a.txt; echo more >> notes/a.txt")
        assert r.stdout == "first"
        assert await s.read_file("notes/a.txt") == b"firstmore\n"


async def test_problems_name_what_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    tier = GVisorTier()
    tier.runsc = None
    assert any("runsc" in p for p in tier.problems())
    monkeypatch.setenv("CODEGYM_RUNSC_PLATFORM", "no-such-platform")
    problems = GVisorTier().problems()
    assert len(problems) == 1 and "no-such-platform" in problems[0]
