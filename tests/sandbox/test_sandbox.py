"""The sandbox API on the default tier: results, verdicts, batches, sessions, bad input."""

from __future__ import annotations

import asyncio
import shutil

import pytest

import codegym.sandbox as sandbox_pkg
from codegym.sandbox import (
    AssertTest,
    IOTest,
    Limits,
    Sandbox,
    SandboxClosed,
    SandboxInputError,
    Session,
    Verdict,
)

SMALL = Limits(cpu_s=1, wall_s=3, memory_mb=128)


def test_public_surface_is_pinned() -> None:
    assert sorted(sandbox_pkg.__all__) == [
        "AssertTest", "Compare", "ExecResult", "FileTooLarge", "HostUnsupported", "IOTest",
        "Limits",
        "Sandbox", "SandboxAPI", "SandboxClosed", "SandboxError", "SandboxInfraError",
        "SandboxInputError",
        "Session", "TestCase", "TestResult", "Verdict", "WorkspaceError",
    ]  # fmt: skip


async def test_ok_run_reports_output_and_costs(sandbox: Sandbox) -> None:
    r = await sandbox.run_python("import sys\nprint('out')\nprint('err', file=sys.stderr)")
    assert r.verdict == "ok" and r.exit_code == 0 and r.signal is None
    assert r.stdout == "out\n" and r.stderr == "err\n"
    assert 0 < r.wall_s < 5 and r.cpu_s >= 0
    assert r.peak_memory_mb is not None and r.peak_memory_mb > 0


async def test_stdin_files_and_argv_reach_the_program(sandbox: Sandbox) -> None:
    code = "import sys\nprint(input()[::-1], open('data/x.txt').read(), sys.argv[1:])"
    r = await sandbox.run_python(code, "abc\n", files={"data/x.txt": "hello"}, argv=["-v"])
    assert r.stdout == "cba hello ['-v']\n"


async def test_program_runs_unprivileged_with_fixed_hash_seed_and_utc(sandbox: Sandbox) -> None:
    code = (
        "import os, time\n"
        "caps = open('/proc/self/status').read().split('CapEff:')[1].split()[0]\n"
        "print(os.getuid(), caps, os.environ['PYTHONHASHSEED'], time.tzname[0], hash('a'))"
    )
    a = await sandbox.run_python(code)
    b = await sandbox.run_python(code)
    uid, caps, seed, tz, _hash = a.stdout.split()
    assert uid != "0" and int(caps, 16) == 0 and seed == "0" and tz == "UTC"
    assert a.stdout == b.stdout  # same hash seed in every run


@pytest.mark.parametrize(
    ("code", "limits", "verdict"),
    [
        ("raise SystemExit(3)", SMALL, Verdict.ERROR),
        ("1/0", SMALL, Verdict.ERROR),
        ("while True: pass", Limits(cpu_s=0.3, wall_s=5), Verdict.TIMEOUT),
        ("import time; time.sleep(30)", Limits(cpu_s=1, wall_s=0.5), Verdict.TIMEOUT),
        ("x = bytearray(600 << 20); x[::4096] = b'1' * len(x[::4096])", SMALL, Verdict.MEMORY),
        ("while True: print('y' * 1000)", Limits(output_bytes=10_000), Verdict.OUTPUT_LIMIT),
        ("import ctypes; ctypes.string_at(0)", SMALL, Verdict.KILLED),
        ("import os, signal; os.kill(os.getpid(), signal.SIGTERM)", SMALL, Verdict.KILLED),
    ],
)
async def test_verdicts(sandbox: Sandbox, code: str, limits: Limits, verdict: Verdict) -> None:
    r = await sandbox.run_python(code, limits=limits)
    assert r.verdict == verdict, (r.reason, r.stderr[-300:])
    assert r.verdict != Verdict.INFRA


async def test_output_is_capped_and_marked(sandbox: Sandbox) -> None:
    r = await sandbox.run_python("print('x' * 100_000)", limits=Limits(output_bytes=1000))
    assert r.verdict == Verdict.OUTPUT_LIMIT and r.truncated and len(r.stdout) <= 1000


async def test_wall_deadline_kill_is_prompt(sandbox: Sandbox) -> None:
    r = await sandbox.run_python("import time; time.sleep(60)", limits=Limits(wall_s=0.3))
    assert r.verdict == Verdict.TIMEOUT
    assert 0.3 <= r.wall_s < 1.0


async def test_assert_batch_gives_one_verdict_per_test(sandbox: Sandbox) -> None:
    code = "def inc(x):\n    return x + 1\n"
    tests = [
        AssertTest("assert inc(1) == 2"),
        AssertTest("assert inc(1) == 3, 'off by one'"),
        AssertTest("inc(None)"),
        AssertTest("while True: pass"),
        AssertTest("assert inc(-1) == 0"),
    ]
    r = await sandbox.run_tests(code, tests, limits=Limits(cpu_s=0.3, wall_s=2))
    assert [t.passed for t in r.tests] == [True, False, False, False, True]
    assert [t.verdict for t in r.tests] == ["ok", "ok", "error", "timeout", "ok"]
    assert "off by one" in r.tests[1].detail and "TypeError" in r.tests[2].detail


async def test_assert_tests_are_isolated_from_each_other(sandbox: Sandbox) -> None:
    code = "state = []\n"
    tests = [AssertTest("state.append(1); assert state == [1]")] * 3
    r = await sandbox.run_tests(code, tests)
    assert all(t.passed for t in r.tests)


async def test_single_test_that_exits_early_does_not_pass(sandbox: Sandbox) -> None:
    code = "import os\ndef f():\n    return 1\nos._exit(0)\n"
    r = await sandbox.run_tests(code, [AssertTest("assert f() == 2")])
    assert not r.tests[0].passed and not r.passed


async def test_an_assert_test_s_program_killed_by_its_own_sigkill_is_not_memory(
    sandbox: Sandbox,
) -> None:
    """Only the memory limit makes ``memory``; a SIGKILL the program sends itself is
    ``killed`` (every SIGKILL of an assert test's program used to read as memory)."""
    code = (
        "import os, signal\n"
        "def f():\n    os.kill(os.getpid(), signal.SIGKILL)\n"
        "def g():\n    x = bytearray(600 << 20); x[::4096] = b'1' * len(x[::4096])\n"
    )
    tests = [AssertTest("assert f() is None"), AssertTest("assert g() is None")]
    r = await sandbox.run_tests(code, tests, limits=SMALL)
    # "killed", or "error" (ended before the test finished) when the zygote's own kill of
    # a program whose test is over raced the program's: a failure either way, not memory
    assert r.tests[0].verdict in ("killed", "error") and not r.tests[0].passed, r.tests
    assert "9" in r.tests[0].detail or "SIGKILL" in r.tests[0].detail, r.tests
    assert r.tests[1].verdict == "memory", r.tests


async def test_io_batch_compares_exact_tokens_and_floats(sandbox: Sandbox) -> None:
    code = "a, b = map(float, input().split())\nprint(a / b)\n"
    tests = [
        IOTest("1 4\n", "0.25\n"),
        IOTest("1 3\n", "0.333333", compare="float", tolerance=1e-5),
        IOTest("1 3\n", "0.333333", compare="exact"),
        IOTest("2 1\n", "  2.0  ", compare="tokens"),
        IOTest("1 0\n", "inf"),
    ]
    r = await sandbox.run_tests(code, tests)
    assert [t.passed for t in r.tests] == [True, True, False, True, False]
    assert r.tests[2].detail.startswith("wrong answer")
    assert r.tests[4].verdict == Verdict.ERROR


@pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc not installed")
async def test_c_program_is_compiled_once_and_run_per_case(sandbox: Sandbox) -> None:
    src = '#include <stdio.h>\nint main(){int a,b;scanf("%d %d",&a,&b);printf("%d\\n",a+b);}\n'
    r = await sandbox.run_tests(
        None,
        [IOTest("1 2", "3"), IOTest("5 5", "10"), IOTest("1 1", "3")],
        command=["./main"],
        build=["gcc", "-O1", "-o", "main", "main.c"],
        files={"main.c": src},
        limits=Limits(cpu_s=5, wall_s=20),
    )
    assert [t.passed for t in r.tests] == [True, True, False], r.stderr


@pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc not installed")
async def test_c_compile_error_fails_every_test(sandbox: Sandbox) -> None:
    r = await sandbox.run_tests(
        None,
        [IOTest("", ""), IOTest("", "")],
        command=["./main"],
        build=["gcc", "-o", "main", "main.c"],
        files={"main.c": "int main( {"},
        limits=Limits(cpu_s=5, wall_s=20),
    )
    assert [t.passed for t in r.tests] == [False, False]
    assert all("build failed" in t.detail for t in r.tests)


async def test_fresh_process_path_runs_shell_and_node(sandbox: Sandbox) -> None:
    r = await sandbox.run("echo $((6 * 7)); cat", stdin="piped")
    assert r.verdict == Verdict.OK and r.stdout == "42\npiped"
    if shutil.which("node"):
        r = await sandbox.run(["node", "-e", "console.log(1 + 1)"], limits=Limits(cpu_s=5))
        assert r.stdout == "2\n", r.stderr


async def test_missing_command_is_an_error_not_infra(sandbox: Sandbox) -> None:
    r = await sandbox.run(["no-such-binary-xyz"])
    assert r.verdict == Verdict.ERROR


async def test_concurrent_callers_are_all_served(sandbox: Sandbox) -> None:
    results = await asyncio.gather(*(sandbox.run_python(f"print({i})") for i in range(60)))
    assert [r.stdout for r in results] == [f"{i}\n" for i in range(60)]


async def test_recycled_workers_keep_serving() -> None:
    async with Sandbox(workers=1, recycle_after=3) as sb:
        outs = [(await sb.run_python("print(7)")).stdout for _ in range(8)]
        assert outs == ["7\n"] * 8 and sb.recycles >= 2


async def test_session_keeps_files_but_not_processes() -> None:
    async with Session(disk_mb=32) as s:
        await s.write_file("notes/a.txt", "first")
        r = await s.run("cat notes/a.txt; echo more >> notes/a.txt; (sleep 100 &) ; echo ok")
        assert r.stdout == "firstok\n"
        assert await s.read_file("notes/a.txt") == b"firstmore\n"
        r = await s.run_python("import os; print(sorted(os.listdir('.')), os.listdir('/tmp'))")
        assert r.stdout == "['main.py', 'notes'] []\n"
        r = await s.run("ps -e -o comm= 2>/dev/null | grep -c sleep || true")
        assert r.stdout.strip() in ("0", "")
        with pytest.raises(FileNotFoundError):
            await s.read_file("nope.txt")


@pytest.mark.parametrize(
    "kwargs",
    [{"cpu_s": -1}, {"memory_mb": 1}, {"wall_s": 0}, {"output_bytes": "big"}, {"cpu_s": True}],
)
def test_invalid_limits_name_the_field(kwargs: dict[str, object]) -> None:
    with pytest.raises(SandboxInputError, match=next(iter(kwargs))):
        Limits(**kwargs)  # type: ignore[arg-type]


async def test_bad_input_is_refused_and_pool_keeps_serving(sandbox: Sandbox) -> None:
    with pytest.raises(SandboxInputError, match="UTF-8"):
        await sandbox.run_python(b"print('\xff')")
    with pytest.raises(SandboxInputError, match="limit"):
        await sandbox.run_python("x" * (9 << 20))
    with pytest.raises(SandboxInputError, match="relative"):
        await sandbox.run_python("pass", files={"../escape": "x"})
    with pytest.raises(SandboxInputError):
        await sandbox.run_tests("pass", [])
    assert (await sandbox.run_python("print(1)")).stdout == "1\n"


async def test_unknown_tier_and_closed_pool() -> None:
    with pytest.raises(SandboxInputError, match="unknown sandbox tier"):
        Sandbox(tier="docker")
    sb = Sandbox(workers=1)
    with pytest.raises(SandboxClosed):
        await sb.run_python("pass")
    async with sb:
        pass
    with pytest.raises(SandboxClosed):
        await sb.run_python("pass")


@pytest.mark.parametrize("how", ["argument", "environment"])
async def test_a_named_interpreter_that_is_missing_is_refused(how, monkeypatch) -> None:
    """Never the system Python in place of the one asked for: the start fails, naming it."""
    missing = "/nonexistent/bin/python3.11"
    kw = {"python": missing} if how == "argument" else {}
    if how == "environment":
        monkeypatch.setenv("CODEGYM_SANDBOX_PYTHON", missing)
    sb = sandbox_pkg.Sandbox(tier="process", **kw)
    with pytest.raises(sandbox_pkg.HostUnsupported, match=r"nonexistent/bin/python3\.11"):
        await sb.start()
    await sb.close()


async def test_a_batch_s_outputs_may_add_up_past_what_one_result_holds(sandbox: Sandbox) -> None:
    # Six cases of ~900 KB each, and one of 700 KB of non-ASCII bytes: every case is
    # under its own output cap, so a correct program passes them all (the zygote once kept
    # 4 MB of a batch's results, cut the last line, and read the batch as forged).
    big = "import sys\nn = int(sys.stdin.read())\nsys.stdout.write('1234567 ' * (n // 8))\n"
    n = 900_000
    lim = Limits(cpu_s=5, memory_mb=512, output_bytes=1 << 20)
    r = await sandbox.run_tests(big, [IOTest(str(n), "1234567 " * (n // 8))] * 6, limits=lim)
    assert [t.passed for t in r.tests] == [True] * 6, [t.detail[:80] for t in r.tests]
    high = "import sys\nsys.stdout.buffer.write(bytes([255]) * 700_000)\n"
    r = await sandbox.run_tests(high, [IOTest("", b"\xff" * 700_000)] * 2, limits=lim)
    assert [t.passed for t in r.tests] == [True, True], [t.detail[:80] for t in r.tests]
