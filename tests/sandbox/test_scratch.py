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
        seen[d + ' times'] = [st.st_atime, st.st_mtime]
        import fcntl
        flags = fcntl.ioctl(os.open(d, os.O_RDONLY), 0x80086601, bytes(8))
        seen[d].append(flags.hex())
    seen['self'] = os.readlink('/proc/self')
    seen['procs'] = sorted(p for p in os.listdir('/proc') if p.isdigit())
    seen['cmdline'] = open('/proc/cmdline').read()
    seen['new file'] = []
    for d in ('/work', '/tmp', '/dev/shm'):
        with open(os.path.join(d, 'x'), 'w') as f:  # what a fresh tmpfs numbers next
            seen['new file'].append(os.fstat(f.fileno()).st_ino)  # left: emptied after
    print(json.dumps(seen))
""")

CLEAN = {
    "/work": [["main.py"], "0o41777", [], "0000000000000000"],
    "/tmp": [[], "0o41777", [], "0000000000000000"],
    "/dev/shm": [[], "0o41777", [], "0000000000000000"],
    # the run's pid namespace is its worker's, whose init (1) swept the last run away:
    # the run is 2 again, and no process of an earlier run is left
    "self": "2",
    "procs": ["1", "2"],
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
    "more attribute names than listxattr returns": """
        for i in range(400):
            os.setxattr(d, ('user.%03d' % i + 'x' * 245).encode(), b'1')
    """,
    "the root's times": "os.utime(d, ns=(0x1122334455667788, 0x0102030405060708))",
    "the root's inode flags": """
        import fcntl, struct
        fcntl.ioctl(os.open(d, os.O_RDONLY), 0x40086602, struct.pack('q', 0xC0))
    """,
    "files made and removed again (the inode counter)": """
        for i in range(300):
            open(os.path.join(d, 'f'), 'w').close()
            os.unlink(os.path.join(d, 'f'))
    """,
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
    seen = json.loads(r.stdout)
    for d in DIRS:  # the root's times are those of a reset, never a program's (2009)
        assert min(seen.pop(f"{d} times")) > 1.7e9, (d, r.stdout)
    seen.pop("new file")
    return seen


async def _inodes(sb: Sandbox) -> list[int]:
    """The inode numbers a new file in each folder gets: they go on from run to run
    while a tmpfs is kept, and start low again in a new one."""
    r = await sb.run_python(LOOK, limits=LIMITS)
    assert r.verdict == Verdict.OK, (r.reason, r.stderr[-500:])
    return json.loads(r.stdout)["new file"]


async def test_a_fresh_worker_s_scratch_is_clean(sb: Sandbox) -> None:
    assert await _look(sb) == CLEAN


async def test_a_tidy_run_s_folders_are_emptied_not_replaced(sb: Sandbox) -> None:
    # the fast path: a run that leaves only files keeps the three tmpfs, emptied
    first = await _inodes(sb)
    files = {"data.txt": "x", "more.txt": "y"}
    r = await sb.run_python("open('/tmp/t', 'w').write('t'); print('ok')", files=files)
    assert r.verdict == Verdict.OK, (r.reason, r.stderr[-300:])
    kept = await _inodes(sb)
    assert all(k > f for k, f in zip(kept, first, strict=True)), (first, kept)
    r = await sb.run_python("import os; os.mkdir('/tmp/d'); print('ok')")
    assert r.verdict == Verdict.OK, (r.reason, r.stderr[-300:])
    after = await _inodes(sb)
    assert after[1] < kept[1] and after[0] > kept[0], (kept, after)  # /tmp only replaced


async def test_a_check_the_program_makes_fail_is_not_infra(sb: Sandbox) -> None:
    # names past listxattr's 64 KiB make the zygote's check fail: the tmpfs is replaced,
    # and every test is the program's own failure
    program = dedent("""
        import os
        for d in ('/work', '/tmp', '/dev/shm'):
            for i in range(400):
                os.setxattr(d, ('user.%03d' % i + 'x' * 245).encode(), b'1')
        def f(x):
            return 0
    """)
    tests = [AssertTest("assert f(1) == 2"), AssertTest("assert f(2) == 4")]
    r = await sb.run_tests(program, tests, limits=LIMITS)
    assert r.verdict != Verdict.INFRA, (r.reason, r.stderr[-300:])
    assert [(t.passed, t.detail[:14]) for t in r.tests] == [(False, "AssertionError")] * 2


@pytest.mark.parametrize("plant", list(PLANTS))
async def test_what_a_run_leaves_is_gone_from_the_next(sb: Sandbox, plant: str) -> None:
    code = f"import os\nfor d in {DIRS!r}:\n" + "".join(
        f"    {line}\n" for line in dedent(PLANTS[plant]).strip().splitlines()
    )
    code += "print('planted')\n"
    before = await _inodes(sb)
    r = await sb.run_python(code, limits=LIMITS)
    assert r.verdict == Verdict.OK and r.stdout == "planted\n", (r.reason, r.stderr[-500:])
    # nothing of how many files the run made shows in the next one's inode numbers (a
    # run that left none of its own would advance them by a handful)
    after = await _inodes(sb)
    assert all(a - b < 32 for a, b in zip(after, before, strict=True)), (before, after)
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


async def test_renames_and_links_replace_the_folder(sb: Sandbox) -> None:
    # names made and removed again make no inode, but take directory positions that the
    # next run would read (getdents): the folder is replaced, so its numbers start over
    for _ in range(3):  # inode numbers well above a fresh tmpfs's first ones
        r = await sb.run_python("open('/tmp/a', 'w'); open('/tmp/b', 'w'); print('ok')")
        assert r.verdict == Verdict.OK, (r.reason, r.stderr[-300:])
    before = await _inodes(sb)
    code = dedent("""
        import os
        open('/tmp/a', 'w').close()
        for _ in range(200):
            os.rename('/tmp/a', '/tmp/b')
            os.rename('/tmp/b', '/tmp/a')
        os.link('/tmp/a', '/tmp/c')
        os.unlink('/tmp/c')
        print('ok')
    """)
    r = await sb.run_python(code, limits=LIMITS)
    assert r.verdict == Verdict.OK, (r.reason, r.stderr[-300:])
    after = await _inodes(sb)
    assert after[1] < before[1], (before, after)


# What a run learns of pid numbers: its own, and its first child's.
PIDS = dedent("""
    import os
    kid = os.fork()
    if kid == 0:
        os._exit(0)
    os.waitpid(kid, 0)
    print(os.getpid(), kid)
""")
# A run that takes many pid numbers and leaves processes running, stopped and as zombies.
PID_HOG = dedent("""
    import os, signal, time
    for _ in range(100):  # numbers used up
        kid = os.fork()
        if kid == 0:
            os._exit(0)
        os.waitpid(kid, 0)
    for _ in range(2):  # zombies
        if os.fork() == 0:
            os._exit(0)
    for _ in range(3):
        if os.fork() == 0:
            os.setsid()
            time.sleep(60)
    if os.fork() == 0:
        os.kill(os.getpid(), signal.SIGSTOP)
    print('hogged')
""")


async def test_a_run_learns_nothing_from_the_last_one_s_pid_numbers(sb: Sandbox) -> None:
    # the worker's runs share one pid namespace: its init kills and reaps what a run
    # left and sets the numbering back, so pids are the same whatever the last run did
    quiet = await sb.run_python(PIDS, limits=LIMITS)
    hog = await sb.run_python(PID_HOG, limits=LIMITS)
    after = await sb.run_python(PIDS, limits=LIMITS)
    assert hog.verdict == Verdict.OK and hog.stdout == "hogged\n", (hog.reason, hog.stderr)
    assert quiet.stdout == after.stdout == "2 3\n", (quiet.stdout, after.stdout)
    assert await _look(sb) == CLEAN
