"""Stdin/stdout tests: the expected output exists nowhere a program can reach.

The run's supervisor (the run's first process) holds the inputs only; outputs are compared
in the zygote, outside the run. Programs in Python, C, JavaScript and shell try to find the
expected bytes or to forge a verdict; all must fail as wrong answers.
"""

from __future__ import annotations

import shutil
from textwrap import dedent

import pytest
from adversary_kit import LIMITS, Clean

from codegym.sandbox import IOTest, Limits, Sandbox, Verdict

pytestmark = pytest.mark.asyncio(loop_scope="module")

SECRET = "expected-7c1f9a"
CASES = [IOTest("1\n", SECRET + "-1"), IOTest("2\n", SECRET + "-2")]


def _wrong(r, name: str = "") -> None:  # type: ignore[no-untyped-def]
    assert r.verdict is not Verdict.INFRA, (name, r.reason)
    assert [t.passed for t in r.tests] == [False, False], (name, r.tests)


async def test_walking_frames_and_the_heap_for_the_expected_output(
    sb: Sandbox, clean: Clean
) -> None:
    code = dedent(f"""
        import gc, sys
        needle = "{SECRET[:9]}" + "{SECRET[9:]}"  # built here: not in its own source
        found = set()

        def look(v, depth=0):
            if isinstance(v, (bytes, bytearray)):
                v = v.decode("latin-1")
            if isinstance(v, str):
                if needle in v and v is not needle:
                    found.add(v[:40])
            elif depth < 3 and isinstance(v, (list, tuple, set)):
                for x in v:
                    look(x, depth + 1)
            elif depth < 3 and isinstance(v, dict):
                for x in v.values():
                    look(x, depth + 1)

        f = sys._getframe()
        while f is not None:
            for v in list(f.f_locals.values()):
                look(v)
            f = f.f_back
        for o in gc.get_objects():
            text = o.decode("latin-1") if isinstance(o, (bytes, bytearray)) else o
            if isinstance(text, str) and needle in text and text is not needle:
                found.add(text[:40])
        print(sorted(found))
    """)
    r = await sb.run_tests(code, CASES, limits=LIMITS)
    _wrong(r)
    assert all("[]" in t.detail for t in r.tests), r.tests
    await clean()


async def test_reading_the_supervisor_s_memory_and_fds(sb: Sandbox, clean: Clean) -> None:
    code = dedent("""
        import os
        out = []
        # the supervisor (the case's parent), and the pid namespace's init (1) where the
        # worker's runs share one (elsewhere they are the same process)
        for pid in sorted({1, os.getppid()}):
            for what in ("mem", "environ", "maps"):
                try:
                    with open(f"/proc/{pid}/{what}", "rb") as f:
                        f.read(4096)
                    out.append(what + ": ALLOWED")
                except OSError as e:
                    out.append(f"{what}: {e.errno}")
            try:
                out.append("fds: " + ",".join(os.listdir(f"/proc/{pid}/fd")))
            except OSError as e:
                out.append(f"fds: {e.errno}")
            # SIGSTOP and SIGKILL end any process that is not an init (the batch with it)
            for sig in (15, 2, 1, 10, 12, 19, 9) if pid == 1 else (15, 2, 1, 10, 12):
                try:
                    os.kill(pid, sig)
                except OSError:
                    pass
        print("; ".join(out))
    """)
    r = await sb.run_tests(code, CASES, limits=LIMITS)
    _wrong(r)
    assert all("ALLOWED" not in t.detail and "fds: 13" in t.detail for t in r.tests), r.tests
    await clean()


@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")
async def test_a_c_program_forging_on_every_fd(sb: Sandbox, clean: Clean) -> None:
    src = dedent(r"""
        #include <string.h>
        #include <unistd.h>
        int main(void) {
            const char *lines[] = {
                "{\"i\": 0, \"passed\": true, \"verdict\": \"ok\"}\n",
                "00000000000000000000000000000000 {\"i\": 1, \"passed\": true}\n",
                "R", "S9\n"};
            for (int fd = 3; fd < 64; fd++)
                for (int k = 0; k < 4; k++)
                    write(fd, lines[k], strlen(lines[k]));
            return 0;
        }
    """)
    lim = Limits(cpu_s=5, wall_s=20, memory_mb=256)
    r = await sb.run_tests(
        None,
        CASES,
        files={"m.c": src},
        build=["gcc", "-o", "m", "m.c"],
        command=["./m"],
        limits=lim,
    )
    _wrong(r)
    assert all(t.verdict is Verdict.OK for t in r.tests), r.tests
    await clean()


@pytest.mark.skipif(shutil.which("node") is None, reason="needs node")
async def test_a_javascript_program_forging_on_every_fd(sb: Sandbox, clean: Clean) -> None:
    src = dedent("""
        const fs = require('fs');
        for (let fd = 3; fd < 32; fd++) {
            try { fs.writeSync(fd, '{"i": 0, "passed": true, "verdict": "ok"}\\n'); } catch (e) {}
        }
        console.log('nothing');
    """)
    lim = Limits(cpu_s=5, wall_s=20, memory_mb=512)
    r = await sb.run_tests(None, CASES, files={"m.js": src}, command=["node", "m.js"], limits=lim)
    _wrong(r)
    await clean()


async def test_a_shell_program_looking_everywhere(sb: Sandbox, clean: Clean) -> None:
    needle = SECRET[:9] + "''" + SECRET[9:]  # the shell joins it; its source does not hold it
    script = f"grep -rl {needle} /work /tmp /opt /etc /run /dev/shm 2>/dev/null; echo done"
    r = await sb.run_tests(None, CASES, command=["/bin/sh", "-c", script], limits=LIMITS)
    _wrong(r)
    assert all(t.detail == "wrong answer: done\n" for t in r.tests), r.tests
    await clean()
