"""A program must not turn its own run into ``infra`` (excluded, never scored), nor make
the pool restart a worker: whatever it does is a model outcome."""

from __future__ import annotations

from textwrap import dedent

import pytest
from adversary_kit import LIMITS, MODEL, Clean

from codegym.sandbox import AssertTest, IOTest, Sandbox, Verdict

pytestmark = pytest.mark.asyncio(loop_scope="module")

# Read back what the harness wrote on every fd it could have left open, through /proc
# (the way to reopen a pipe's other end), then write junk back.
READ_BACK = dedent("""
    import os
    for fd in range(3, 16):
        try:
            r = os.open(f"/proc/self/fd/{fd}", os.O_RDONLY | os.O_NONBLOCK)
            try:
                os.read(r, 1 << 16)
            except OSError:
                pass
            os.write(fd, b"F" * 100)
        except OSError:
            pass
""")

HOSTILE = {
    "reads back the set-up mark and writes junk on every fd": READ_BACK,
    "exits with the harness's own failure code": "import os\nos._exit(125)\n",
    "closes its standard streams": "import os\nfor fd in (0, 1, 2):\n    os.close(fd)\n",
    "stops itself": "import os, signal\nos.kill(os.getpid(), signal.SIGSTOP)\n",
    "signals pid 1 (itself, or its namespace's init) with every signal": dedent("""
        import os, signal
        for s in range(1, 32):
            if s not in (signal.SIGKILL, signal.SIGSTOP):
                try:
                    os.kill(1, s)
                except OSError:
                    pass
    """),
    "fills its disk": "open('/work/big', 'wb').write(b'x' * (200 << 20))\n",
    "fills its memory": "x = bytearray(1 << 30)\n",
    "forks without end": dedent("""
        import os
        while True:
            try:
                os.fork()
            except OSError:
                pass
    """),
}


@pytest.mark.parametrize("name", list(HOSTILE))
async def test_a_plain_run(sb: Sandbox, clean: Clean, name: str) -> None:
    r = await sb.run_python(HOSTILE[name], limits=LIMITS)
    assert r.verdict in MODEL, (name, r.verdict, r.reason)
    await clean()


@pytest.mark.parametrize("name", list(HOSTILE))
async def test_an_assert_test(sb: Sandbox, clean: Clean, name: str) -> None:
    code = HOSTILE[name] + "\ndef f():\n    return 1\n"
    r = await sb.run_tests(code, [AssertTest("assert f() == 1")], limits=LIMITS)
    assert r.verdict in MODEL and r.tests[0].verdict in MODEL, (name, r.reason, r.tests)
    await clean()


@pytest.mark.parametrize("name", list(HOSTILE))
async def test_a_stdio_case(sb: Sandbox, clean: Clean, name: str) -> None:
    r = await sb.run_tests(HOSTILE[name], [IOTest("", "1"), IOTest("", "2")], limits=LIMITS)
    assert r.verdict in MODEL and all(t.verdict in MODEL for t in r.tests), (name, r.tests)
    assert not any(t.passed for t in r.tests)
    await clean()


async def test_a_shell_command(sb: Sandbox, clean: Clean) -> None:
    cmd = "cat /proc/self/fd/4 2>&1; for fd in 3 4 5 6; do echo junk >&$fd; done; exit 125"
    r = await sb.run(cmd, limits=LIMITS)
    assert (r.verdict, r.exit_code) == (Verdict.ERROR, 125), r.reason
    await clean()
