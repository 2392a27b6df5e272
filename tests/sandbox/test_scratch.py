"""Plain runs share their worker's mount namespace and scratch folders (``_zygote.Scratch``):
whatever one run leaves there, the next finds empty, with the modes and attributes of a
fresh tmpfs, and the judge of an assert test never sees it."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from textwrap import dedent

import pytest
import pytest_asyncio

from codegym.sandbox import AssertTest, HostUnsupported, Limits, Sandbox, Verdict
from jail import no_jail

DIRS = ("/work", "/tmp", "/dev/shm")
LIMITS = Limits(wall_s=10, cpu_s=5, memory_mb=256)

# What the next run sees of each folder (its own main.py is in /work).
LOOK = dedent(r"""
    import json, os, stat
    seen = {}
    for d in ('/work', '/tmp', '/dev/shm'):
        st = os.stat(d)
        seen[d] = [sorted(os.listdir(d)), oct(st.st_mode), os.listxattr(d)]
    seen['self'] = os.readlink('/proc/self')
    seen['procs'] = sorted(p for p in os.listdir('/proc') if p.isdigit())
    seen['cmdline'] = open('/proc/cmdline').read()
    print(json.dumps(seen))
""")
CLEAN = {
    "/work": [["main.py"], "0o41777", []],
    "/tmp": [[], "0o41777", []],
    "/dev/shm": [[], "0o41777", []],
    "self": "1",
    "procs": ["1"],
    "cmdline": "",
}

pytestmark = pytest.mark.asyncio(loop_scope="module")

PLANTS = {
    "a few files": """
        for name in ('poison.py', 'sitecustomize.py', '.hidden'):
            open(os.path.join(d, name), 'w').write('raise SystemExit(99)')
        os.symlink('/proc/self/environ', os.path.join(d, 'link'))
        os.mkfifo(os.path.join(d, 'fifo'))
        os.link(os.path.join(d, 'poison.py'), os.path.join(d, 'hard'))
        os.chmod(os.path.join(d, 'poison.py'), 0)
    """,
    "more files than are unlinked one by one": """
        for i in range(500):
            open(os.path.join(d, f'f{i}'), 'w').close()
    """,
    "a folder": """
        os.makedirs(os.path.join(d, 'a', 'b', 'c'))
        open(os.path.join(d, 'a', 'b', 'c', 'x'), 'w').write('x')
        os.chmod(os.path.join(d, 'a'), 0)
    """,
    "the root's mode": "os.chmod(d, 0o700)",
    "the root closed to everyone": "os.chmod(d, 0)",
    "an attribute on the root": "os.setxattr(d, 'user.poison', b'1')",
    "a file held open by a left process": """
        f = open(os.path.join(d, 'held'), 'w')
        if os.fork() == 0:
            import time
            time.sleep(60)
    """,
}


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def sb() -> AsyncIterator[Sandbox]:
    box = Sandbox(tier="jail", workers=1)  # one worker: the next run is on the same one
    try:
        await box.start()
    except HostUnsupported as e:
        no_jail(e)
    try:
        yield box
    finally:
        await box.close()


async def _look(sb: Sandbox) -> dict[str, object]:
    r = await sb.run_python(LOOK, limits=LIMITS)
    assert r.verdict == Verdict.OK, (r.reason, r.stderr[-500:])
    return json.loads(r.stdout)


async def test_a_fresh_worker_s_scratch_is_clean(sb: Sandbox) -> None:
    assert await _look(sb) == CLEAN


@pytest.mark.parametrize("plant", list(PLANTS))
async def test_what_a_run_leaves_is_gone_from_the_next(sb: Sandbox, plant: str) -> None:
    code = f"import os\nfor d in {DIRS!r}:\n" + "".join(
        f"    {line}\n" for line in dedent(PLANTS[plant]).strip().splitlines()
    )
    code += "print('planted')\n"
    r = await sb.run_python(code, limits=LIMITS)
    assert r.verdict == Verdict.OK and r.stdout == "planted\n", (r.reason, r.stderr[-500:])
    assert await _look(sb) == CLEAN
    # and again: the replacement is as clean as an emptied one
    assert await _look(sb) == CLEAN


async def test_a_new_disk_size_replaces_the_scratch(sb: Sandbox) -> None:
    fill = "open('/tmp/big', 'wb').write(b'x' * (24 << 20)); print('ok')"
    small = await sb.run_python(fill, limits=Limits(wall_s=10, cpu_s=5, memory_mb=256, disk_mb=16))
    big = await sb.run_python(fill, limits=Limits(wall_s=10, cpu_s=5, memory_mb=256, disk_mb=64))
    assert small.verdict != Verdict.OK or small.stdout != "ok\n", small
    assert big.verdict == Verdict.OK and big.stdout == "ok\n", (big.reason, big.stderr[-300:])
    assert await _look(sb) == CLEAN


async def test_the_judge_sees_none_of_the_program_s_files(sb: Sandbox) -> None:
    program = dedent("""
        import os
        def plant():
            for d in ('/tmp', '/dev/shm'):
                open(os.path.join(d, 'planted.py'), 'w').write('raise SystemExit(99)')
            return sorted(os.listdir('/tmp'))
    """)
    test = AssertTest(
        "import os\n"
        "assert plant() == ['planted.py']\n"
        "assert os.listdir('/tmp') == [] and os.listdir('/dev/shm') == [], "
        "(os.listdir('/tmp'), os.listdir('/dev/shm'))"
    )
    r = await sb.run_tests(program, [test, test], limits=LIMITS)
    assert [t.passed for t in r.tests] == [True, True], [(t.verdict, t.detail) for t in r.tests]
    assert await _look(sb) == CLEAN
