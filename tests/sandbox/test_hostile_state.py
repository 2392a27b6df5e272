"""Adversarial tests, part two: host secrets and files, poisoning the next run, forged
results, the pool under a hung program, and bad input. What every test checks, and the
shared pool: ``hostile_kit``."""

from __future__ import annotations

import asyncio
import hashlib
import os
import uuid
from pathlib import Path
from textwrap import dedent

import pytest
from hostile_kit import (
    ATTEMPT,
    LIMITS,
    MEMORY_MB,
    REPO,
    SECRET,
    SECRET_VAR,
    SHORT,
    _aftermath,
    _baseline,
    _outcomes,
    _private_sandbox,
    _probe_every_worker,
    _refused,
    _snapshot,
)

from codegym.sandbox import (
    AssertTest,
    IOTest,
    Limits,
    Sandbox,
    SandboxInputError,
    Verdict,
)
from codegym.sandbox.limits import MAX_CODE_BYTES, MAX_INPUT_BYTES
from codegym.testing import await_until

pytestmark = pytest.mark.asyncio(loop_scope="module")


# ---------------------------------------------------------------- host secrets and files


async def test_host_environment_secret(sb: Sandbox) -> None:
    snap = _snapshot(sb)
    assert os.environ[SECRET_VAR] == SECRET  # the host process does hold it
    code = dedent(r"""
        import glob, os
        print('env:', sorted(os.environ))
        for path in sorted(glob.glob('/proc/*/environ') + glob.glob('/proc/*/cmdline')):
            try:
                print(path, open(path, 'rb').read())
            except OSError as e:
                print(path, type(e).__name__)
    """)
    r = await sb.run_python(code, limits=LIMITS)
    assert r.verdict == Verdict.OK, (r.reason, r.stderr[-500:])
    assert "PATH" in _outcomes(r.stdout)["env"]  # it could read its own environment
    assert SECRET not in r.stdout + r.stderr and SECRET_VAR not in r.stdout + r.stderr
    await _aftermath(sb, snap)


async def test_read_root_home(sb: Sandbox) -> None:
    snap = _snapshot(sb)
    code = ATTEMPT + dedent(r"""
        attempt('/root', lambda: os.listdir('/root'))
        for path in ('/root/.bashrc', '/root/.ssh/id_rsa', '/root/.netrc'):
            attempt(path, lambda: open(path).read())
    """)
    _refused(await sb.run_python(code, limits=LIMITS), "ENOENT")
    await _aftermath(sb, snap)


async def test_read_etc_shadow(sb: Sandbox) -> None:
    snap = _snapshot(sb)
    code = ATTEMPT + dedent(r"""
        for path in ('/etc/shadow', '/etc/gshadow', '/etc/sudoers', '/etc/passwd'):
            attempt(path, lambda: open(path).read())
    """)
    _refused(await sb.run_python(code, limits=LIMITS), "ENOENT")
    await _aftermath(sb, snap)


async def test_read_project_files(sb: Sandbox, tmp_path: Path) -> None:
    snap = _snapshot(sb)
    secret_file = tmp_path / "host-secret.txt"
    secret_file.write_text(SECRET)
    targets = [
        REPO / "pyproject.toml",
        REPO / "src" / "codegym" / "sandbox" / "sandbox.py",
        REPO / ".venv" / "pyvenv.cfg",
        Path(__file__).resolve(),
        secret_file,
    ]
    assert all(t.exists() for t in targets)  # they are there, on the host
    code = ATTEMPT + dedent(r"""
        for path in sys.argv[1:]:
            attempt(path, lambda: open(path).read())
    """)
    r = await sb.run_python(code, limits=LIMITS, argv=[str(t) for t in targets])
    _refused(r, "ENOENT")
    assert SECRET not in r.stdout
    await _aftermath(sb, snap)


async def test_write_outside_the_work_dir(sb: Sandbox, tmp_path: Path) -> None:
    snap = _snapshot(sb)
    name = f"escape-{uuid.uuid4().hex}"
    harness = REPO / "src" / "codegym" / "sandbox" / "_harness.py"
    before = harness.read_bytes()
    on_host = (tmp_path / name, REPO / name, Path("/root") / name, Path("/usr") / name)
    targets = [*on_host, Path("/usr/lib") / name, Path("/opt/codegym/_harness.py")]
    code = ATTEMPT + dedent(r"""
        for path in sys.argv[1:]:
            attempt(path, lambda: open(path, 'a'))
    """)
    r = await sb.run_python(code, limits=LIMITS, argv=[str(t) for t in targets])
    _refused(r, "ENOENT", "EROFS", "EACCES")
    assert harness.read_bytes() == before  # the harness every later run executes
    await _aftermath(sb, snap, host_paths=on_host)


# ---------------------------------------------------------------- poisoning the next run


async def test_poison_the_per_run_dirs(sb: Sandbox) -> None:
    snap = _snapshot(sb)
    code = dedent(r"""
        import os
        for d in ('/work', '/tmp', '/dev/shm'):
            with open(os.path.join(d, 'poison.py'), 'w') as f:
                f.write('raise SystemExit(99)')
            os.makedirs(os.path.join(d, 'poison', 'deep'))
            os.symlink('/proc/self/environ', os.path.join(d, 'poison-link'))
            os.mkfifo(os.path.join(d, 'poison-fifo'))
        with open('/work/main.py', 'w') as f:
            f.write('print("poisoned")')
        print('planted: yes')
    """)
    r = await sb.run_python(code, limits=LIMITS)
    assert r.verdict == Verdict.OK and r.stdout == "planted: yes\n", (r.reason, r.stderr[-500:])
    await _aftermath(sb, snap)


async def test_poison_the_interpreter(sb: Sandbox) -> None:
    snap = _snapshot(sb)
    code = dedent(r"""
        import builtins, json, sys
        sys.stdout.write('planted: yes\n')
        sys.stdout.flush()
        builtins.print = lambda *a, **k: None
        builtins.open = None
        builtins.poison = True
        sys.modules['json'] = None
        sys.modules['poison'] = type(sys)('poison')
        sys.path.insert(0, '/tmp/poison')
        sys.setrecursionlimit(50)
        json.dumps = lambda *a, **k: '{}'
    """)
    r = await sb.run_python(code, limits=LIMITS)
    assert r.verdict == Verdict.OK and r.stdout == "planted: yes\n", (r.reason, r.stderr[-500:])
    await _aftermath(sb, snap)


async def test_poison_the_process_state(sb: Sandbox) -> None:
    snap = _snapshot(sb)
    code = dedent(r"""
        import os, resource, signal
        os.environ['POISON'] = '1'
        os.environ['PATH'] = '/tmp/poison'
        os.putenv('LD_PRELOAD', '/tmp/poison.so')
        os.umask(0)
        os.chdir('/tmp')
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGALRM, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_NOFILE, (20, 20))
        resource.setrlimit(resource.RLIMIT_STACK, (1 << 20, 1 << 20))
        print('planted: yes')
    """)
    r = await sb.run_python(code, limits=LIMITS)
    assert r.verdict == Verdict.OK and r.stdout == "planted: yes\n", (r.reason, r.stderr[-500:])
    await _aftermath(sb, snap)


async def test_poison_the_jail_root_fs(sb: Sandbox) -> None:
    async with _private_sandbox(sb) as box:
        code = ATTEMPT + dedent(r"""
            for d in ('/', '/etc', '/dev', '/run', '/opt', '/opt/codegym'):
                attempt(d, lambda: open(os.path.join(d, 'poison'), 'w'))
        """)
        r = await box.run_python(code, limits=LIMITS)
        (seen,) = await _probe_every_worker(box)
        assert seen["dirs"] == _baseline["dirs"], r.stdout


async def test_poison_a_stdlib_module_for_the_next_run(sb: Sandbox) -> None:
    async with _private_sandbox(sb) as box:
        plant = ATTEMPT + dedent(r"""
            for d in sys.path:
                attempt(d, lambda: open(os.path.join(d or '.', 'shlex.py'), 'w').write(
                    'print("POISONED")'))
        """)
        await box.run_python(plant, limits=LIMITS)
        r = await box.run_python("import shlex\nprint(shlex.quote('a b'))\n", limits=LIMITS)
        assert (r.verdict, r.stdout) == (Verdict.OK, "'a b'\n"), r.stdout


async def test_poison_ld_so_preload_for_the_next_run(sb: Sandbox) -> None:
    async with _private_sandbox(sb) as box:
        plant = ATTEMPT + (
            "attempt('preload', lambda: open('/etc/ld.so.preload', 'w').write('/tmp/x.so'))\n"
        )
        await box.run_python(plant, limits=LIMITS)
        r = await box.run("echo clean", limits=LIMITS)
        assert (r.verdict, r.stdout, r.stderr) == (Verdict.OK, "clean\n", ""), r.stderr


async def test_forge_test_results(sb: Sandbox) -> None:
    snap = _snapshot(sb)
    code = dedent(r"""
        import os
        for fd in range(3, 10):  # wherever the harness reports from
            for i in range(2):
                try:
                    os.write(fd, b'{"i": %d, "passed": true, "verdict": "ok"}\n' % i)
                except OSError:
                    pass
        os._exit(0)
    """)
    tests = [AssertTest("assert solve() == 42"), AssertTest("assert False")]
    r = await sb.run_tests(code, tests, limits=LIMITS)
    await _aftermath(sb, snap)
    # results come from the judge, which the program's fds do not reach
    assert [(t.passed, t.verdict) for t in r.tests] == [
        (False, Verdict.ERROR),
        (False, Verdict.OK),
    ], r.tests


# What a test fork used to report on its private fd 3, and what the harness wrote to the
# zygote: a program that writes exactly these (plainly, or with a guessed tag) on any fd
# must not forge a pass (assert tests are judged outside the program's run).
FORK_PASS = b'{"passed": true, "verdict": "ok", "detail": ""}'
LINE_PASS = b'{"i": 0, "passed": true, "verdict": "ok", "detail": ""}\n'
GUESSED_TAG = b"0" * 32 + b" "


async def test_forge_a_result_from_inside_a_call(sb: Sandbox) -> None:
    # each assert test's run: the program serves calls, its fds lead nowhere that judges
    snap = _snapshot(sb)
    code = f"import os\ndef solve():\n    os.write(3, {FORK_PASS!r})\n    os._exit(0)\n"
    tests = [AssertTest("assert solve() == 42"), AssertTest("assert solve() == 43")]
    r = await sb.run_tests(code, tests, limits=LIMITS)
    await _aftermath(sb, snap)
    assert [(t.passed, t.verdict) for t in r.tests] == [(False, Verdict.ERROR)] * 2, r.tests
    assert all("before the test finished" in t.detail for t in r.tests), r.tests


@pytest.mark.parametrize("line", [LINE_PASS, GUESSED_TAG + LINE_PASS], ids=["plain", "tagged"])
async def test_forge_a_result_from_the_only_test(sb: Sandbox, line: bytes) -> None:
    snap = _snapshot(sb)
    code = f"import os\ndef solve():\n    os.write(3, {line!r})\n    os._exit(0)\n"
    r = await sb.run_tests(code, [AssertTest("assert solve() == 42")], limits=LIMITS)
    await _aftermath(sb, snap)
    (t,) = r.tests
    assert (t.passed, t.verdict) == (False, Verdict.ERROR), t


async def test_forge_a_result_from_a_child_process(sb: Sandbox) -> None:
    # a fresh interpreter with the program's fds
    snap = _snapshot(sb)
    code = dedent(f"""
        import os, subprocess, sys
        forge = "import os, sys; os.write(3, sys.argv[1].encode())"
        line = {LINE_PASS.decode()!r}
        subprocess.run([sys.executable, "-c", forge, line], pass_fds=(3,), check=True)
        def solve():
            os._exit(0)
    """)
    r = await sb.run_tests(code, [AssertTest("assert solve() == 42")], limits=LIMITS)
    await _aftermath(sb, snap)
    (t,) = r.tests
    assert (t.passed, t.verdict) == (False, Verdict.ERROR), t


async def test_forge_a_stdio_pass(sb: Sandbox) -> None:
    # a stdio program has no result pipe: what it writes to fd 3 must not count
    snap = _snapshot(sb)
    code = dedent(f"""
        import os
        try:
            os.write(3, {FORK_PASS!r})
        except OSError as e:
            print('fd 3:', e.strerror)
        print('wrong')
    """)
    r = await sb.run_tests(code, [IOTest("", "42"), IOTest("", "43")], limits=LIMITS)
    await _aftermath(sb, snap)
    assert [(t.passed, t.verdict) for t in r.tests] == [(False, Verdict.OK)] * 2, r.tests
    assert all(t.detail.startswith("wrong answer: fd 3:") for t in r.tests), r.tests


async def test_forge_its_own_death_signal(sb: Sandbox) -> None:
    snap = _snapshot(sb)
    code = dedent(r"""
        import os
        for fd in range(3, 10):
            for mark in (b'S24', b'0' * 32 + b' S24\n'):
                try:
                    os.write(fd, mark)
                except OSError:
                    pass
        print('answer')
    """)
    r = await sb.run_python(code, limits=LIMITS)
    await _aftermath(sb, snap)
    assert (r.verdict, r.signal, r.stdout) == (Verdict.OK, None, "answer\n"), r.reason


async def test_a_self_sent_sigxcpu_is_not_a_timeout(sb: Sandbox) -> None:
    # the signal is real (the death mark is genuine) but no CPU limit was reached
    snap = _snapshot(sb)
    code = "import os, signal\nos.kill(os.getpid(), signal.SIGXCPU)\n"
    r = await sb.run_python(code, limits=LIMITS)
    assert (r.verdict, r.signal) == (Verdict.KILLED, "SIGXCPU"), (r.verdict, r.reason)
    program = "import os, signal\ndef f():\n    os.kill(os.getpid(), signal.SIGXCPU)\n"
    tests = [AssertTest("f()"), AssertTest("assert True")]
    r = await sb.run_tests(program, tests, limits=LIMITS)
    assert r.tests[0].verdict == Verdict.KILLED, r.tests
    assert (r.tests[1].passed, r.tests[1].verdict) == (True, Verdict.OK), r.tests
    await _aftermath(sb, snap)


async def test_the_harness_is_not_on_the_programs_path(sb: Sandbox) -> None:
    snap = _snapshot(sb)
    code = dedent(r"""
        import sys
        print('path:', [p for p in sys.path if 'codegym' in p])
        sys.modules.pop('_harness', None)
        try:
            import _harness
            print('import: ALLOWED')
        except ImportError:
            print('import: refused')
    """)
    r = await sb.run_python(code, limits=LIMITS)
    await _aftermath(sb, snap)
    assert _outcomes(r.stdout) == {"path": "[]", "import": "refused"}, (r.stdout, r.stderr)


async def test_buffered_output_into_a_closed_stdout(sb: Sandbox) -> None:
    # CPython exits 120 when the final flush of stdout fails; so must the harness
    snap = _snapshot(sb)
    r = await sb.run_python("import os\nprint('lost')\nos.close(1)\n", limits=LIMITS)
    await _aftermath(sb, snap)
    assert (r.verdict, r.exit_code, r.stdout) == (Verdict.ERROR, 120, ""), (r.verdict, r.stderr)
    assert "Exception ignored in" in r.stderr and "Bad file descriptor" in r.stderr, r.stderr


# ---------------------------------------------------------------- the pool


async def test_hung_program_does_not_block_the_pool(sb: Sandbox) -> None:
    snap = _snapshot(sb)
    hung = asyncio.create_task(sb.run_python("import time\ntime.sleep(10**6)\n", limits=SHORT))
    await await_until(lambda: sb.pool_usage()[0] == 1, timeout=30, what="the hung run on a worker")
    r = await sb.run_python("print(1)", limits=LIMITS)
    assert (r.verdict, r.stdout) == (Verdict.OK, "1\n")
    assert not hung.done(), "the other worker served only after the hung run ended"
    assert (await hung).verdict == Verdict.TIMEOUT
    await _aftermath(sb, snap)


async def test_a_larger_memory_limit_needs_no_worker_restart(sb: Sandbox) -> None:
    async with _private_sandbox(sb) as box:
        for memory_mb in (MEMORY_MB, 4 * MEMORY_MB):
            r = await box.run_python("print(1)", limits=Limits(memory_mb=memory_mb))
            assert r.verdict == Verdict.OK
        assert (box.recycles, box.infra_count) == (0, 0)


# ---------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    "code",
    [b"print(1)\n\xff\xfe", b"# \xc3\x28\nprint(1)\n", "print('\udcff')"],
    ids=["invalid-byte", "bad-continuation", "lone-surrogate"],
)
async def test_non_utf8_code(sb: Sandbox, code: str | bytes) -> None:
    snap = _snapshot(sb)
    with pytest.raises(SandboxInputError, match="UTF-8"):
        await sb.run_python(code, limits=LIMITS)
    await _aftermath(sb, snap)


async def test_oversized_code(sb: Sandbox) -> None:
    snap = _snapshot(sb)
    with pytest.raises(SandboxInputError, match=f"code is {MAX_CODE_BYTES + 1} bytes"):
        await sb.run_python("#" * (MAX_CODE_BYTES + 1), limits=LIMITS)
    await _aftermath(sb, snap)


async def test_oversized_stdin(sb: Sandbox) -> None:
    snap = _snapshot(sb)
    with pytest.raises(SandboxInputError, match="stdin"):
        await sb.run_python("print(1)", b"x" * (MAX_INPUT_BYTES + 1), limits=LIMITS)
    await _aftermath(sb, snap)


async def test_nul_byte_in_code(sb: Sandbox) -> None:
    snap = _snapshot(sb)
    r = await sb.run_python("print(1)\0print(2)\n", limits=LIMITS)
    assert r.verdict == Verdict.ERROR, (r.verdict, r.reason)  # the program's fault, not ours
    await _aftermath(sb, snap)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"cpu_s": -1},
        {"cpu_s": 0},
        {"cpu_s": float("nan")},
        {"cpu_s": float("inf")},
        {"cpu_s": "1"},
        {"wall_s": -1},
        {"wall_s": float("nan")},
        {"memory_mb": 0},
        {"memory_mb": True},
        {"output_bytes": -1},
        {"max_processes": 0},
        {"disk_mb": -5},
        {"open_files": 3},
        {"wall_s": "3"},
        {"memory_mb": 128.5},
        {"disk_mb": 16.5},
        {"open_files": 100.5},
        {"max_processes": 10.5},
        {"output_bytes": 100.5},
    ],
    ids=lambda kwargs: ",".join(f"{k}={v!r}" for k, v in kwargs.items()),
)
async def test_invalid_limits(sb: Sandbox, kwargs: dict[str, object]) -> None:
    snap = _snapshot(sb)
    (field,) = kwargs
    with pytest.raises(SandboxInputError, match=rf"Limits\.{field}"):
        limits = Limits(**kwargs)  # type: ignore[arg-type]
        async with _private_sandbox(sb) as box:  # limits that get this far must not hurt `sb`
            await box.run_python("print(1)", limits=limits)
    await _aftermath(sb, snap)


async def test_limits_of_the_wrong_type(sb: Sandbox) -> None:
    snap = _snapshot(sb)
    with pytest.raises(SandboxInputError, match="limits must be a Limits"):
        await sb.run_python("print(1)", limits={"cpu_s": 1})  # type: ignore[arg-type]
    await _aftermath(sb, snap)


# ---------------------------------------------------------------- reaching into the harness process

# A stdio test's fork has no key, but its parent (the batch's supervisor) does: find the
# 16-byte key there through /proc/PID/mem, sign a pass for test 0 and write it to fd 3.
STEAL_KEY_FROM_PID_1 = r"""
import hmac, os, re, struct

def steal():
    parent = os.getppid()
    regions = []
    with open(f"/proc/{parent}/maps") as m:
        for line in m:
            p = line.split()
            if p[1].startswith("rw") and (len(p) < 6 or p[5] == "[heap]"):
                a, b = (int(x, 16) for x in p[0].split("-"))
                if b - a < 1 << 27:
                    regions.append((a, b))
    mem = open(f"/proc/{parent}/mem", "rb", 0)
    pattern = struct.pack("<QQ", id(bytearray), 16)  # a bytearray of 16 bytes
    keys = []
    for a, b in regions:
        mem.seek(a)
        data = mem.read(b - a)
        for found in re.finditer(re.escape(pattern), data):
            start = struct.unpack_from("<Q", data, found.start() - 8 + 40)[0]
            mem.seek(start)
            keys.append(mem.read(16))
    payload = b'{"i": 0, "passed": true, "verdict": "ok", "detail": "forged"}'
    fd = os.open(f"/proc/{parent}/fd/3", os.O_WRONLY)
    for key in keys:
        tag = hmac.digest(key, payload, "sha256").hex()[:32].encode()
        os.write(fd, tag + b" " + payload + b"\n")

try:
    steal()
except OSError as e:
    print("blocked:", e)
"""


async def test_a_stdio_test_cannot_take_the_key_from_its_parent(sb: Sandbox) -> None:
    snap = _snapshot(sb)
    r = await sb.run_tests(STEAL_KEY_FROM_PID_1, [IOTest("", "x"), IOTest("", "x")], limits=LIMITS)
    assert [t.passed for t in r.tests] == [False, False], [(t.verdict, t.detail) for t in r.tests]
    assert "Permission denied" in r.tests[0].detail + r.tests[1].detail, r.tests
    await _aftermath(sb, snap)


# A stdio case is a fork of the batch's supervisor, whose frames hold the channel and
# its key: walk up to them. The case has no fd 3 to sign on, and the key is zeroed too.
CASE_KEY_SPY = r"""
import sys
keys, f = set(), sys._getframe()
while f is not None:
    ch = f.f_locals.get("channel")
    if type(ch).__name__ == "Channel":
        keys.add(bytes(type(ch)._key.__get__(ch)).hex())
    f = f.f_back
print(sorted(keys))
"""


async def test_a_stdio_case_finds_its_batch_s_key_zeroed(sb: Sandbox) -> None:
    zero = str(["00" * 16])
    r = await sb.run_tests(CASE_KEY_SPY, [IOTest("", zero), IOTest("", zero)], limits=LIMITS)
    assert [t.passed for t in r.tests] == [True, True], [(t.verdict, t.detail) for t in r.tests]


# One case leaves what the supervisor's tidying must still get rid of: a tree deeper than
# Python's recursion limit with files on every level (removed by full paths, its cost grew
# with the square of the depth and spent the batch's CPU), in /tmp and in the work dir, a
# folder of 3,000 subfolders, a path past PATH_MAX in /dev/shm, and a work dir locked
# (mode 0) with a file in it. The next cases must find their places as the batch began,
# within the batch's CPU limit.
LOCK_AND_BURY = r"""
import os, sys
if sys.stdin.readline().strip() == "bury":
    for top in ("/tmp", os.getcwd()):
        os.chdir(top)
        for _ in range(1900):
            os.mkdir("d")
            os.chdir("d")
            for j in range(5):
                open(str(j), "w").close()
    os.mkdir("/tmp/w")  # a wide folder (listed again after each subfolder: width squared)
    for i in range(3000):
        os.mkdir(f"/tmp/w/{i}")
    os.chdir("/dev/shm")  # and a path longer than PATH_MAX, its bottom folder locked
    for _ in range(40):
        os.mkdir("x" * 250)
        os.chdir("x" * 250)
    os.chmod(".", 0)
    os.chdir("/work")
    open("left.txt", "w").write("x")
    os.chmod(".", 0)
    print("buried")
else:
    left = sorted({"d", "left.txt"} & set(os.listdir(".")))
    print(os.listdir("/tmp") + os.listdir("/dev/shm"), left)
"""


async def test_a_case_cannot_bury_or_lock_out_the_next(sb: Sandbox) -> None:
    clean = "[] []"
    tests = [IOTest("bury\n", "buried"), IOTest("look\n", clean), IOTest("look\n", clean)]
    r = await sb.run_tests(LOCK_AND_BURY, tests, limits=Limits(cpu_s=2, wall_s=30))
    assert [t.passed for t in r.tests] == [True, True, True], [
        (t.verdict, t.detail) for t in r.tests
    ]


# Walk up the interpreter stack (inherited from the zygote) looking for the previous
# run's request or answer. The marker is spelled in hex here, so this program's own
# request (which the harness's frames hold) does not contain it.
STACK_SPY = r"""
import sys
def scan():
    needle = bytes.fromhex("{hex}").decode()
    hits = []
    f = sys._getframe().f_back.f_back  # past scan() and this module
    while f:
        for value in list(f.f_locals.values()):
            if needle in repr(value):
                hits.append(f.f_code.co_name)
        f = f.f_back
    return hits
print(scan())
"""


async def test_the_previous_run_is_not_on_the_next_run_s_stack(sb: Sandbox) -> None:
    snap = _snapshot(sb)
    marker = f"victim-{uuid.uuid4().hex}"
    for _ in range(2):  # both workers serve a victim
        r = await sb.run_python(f"print({marker!r})", stdin=marker, limits=LIMITS)
        assert r.stdout == marker + "\n"
    for _ in range(2):
        r = await sb.run_python(STACK_SPY.replace("{hex}", marker.encode().hex()), limits=LIMITS)
        assert (r.verdict, r.stdout) == (Verdict.OK, "[]\n"), (r.stdout, r.stderr[-300:])
    await _aftermath(sb, snap)


# Read this process's whole memory (it is a fork of the sandbox's warm interpreter) for
# "victim-" + 32 hex digits whose sha256 is the victim's. The prefix is split in the
# source, so this program's own text never matches.
HEAP_SPY = r"""
import ctypes, hashlib, re
want = "{digest}"
pattern = re.escape(("vic" + "tim-").encode()) + rb"[0-9a-f]{32}"
hits = 0
with open("/proc/self/maps") as maps:
    regions = [line.split() for line in maps]
for p in regions:
    if "r" not in p[1] or (len(p) > 5 and p[5].startswith("[v")):
        continue
    a, b = (int(x, 16) for x in p[0].split("-"))
    if b - a > 1 << 28:
        continue
    for found in re.finditer(pattern, ctypes.string_at(a, b - a)):
        hits += hashlib.sha256(found.group()).hexdigest() == want
print(hits)
"""


async def test_the_next_run_finds_nothing_of_an_earlier_one_in_its_memory(sb: Sandbox) -> None:
    # freed memory keeps its bytes: the next run's process must come from an image
    # that never held another run's code, stdin or output
    snap = _snapshot(sb)
    marker = f"victim-{uuid.uuid4().hex}"
    for _ in range(2):  # both workers serve the victim: its code, stdin and output
        r = await sb.run_python(f"print({marker!r}, input())", stdin=marker, limits=LIMITS)
        assert r.stdout == f"{marker} {marker}\n"
    digest = hashlib.sha256(marker.encode()).hexdigest()
    for _ in range(2):
        r = await sb.run_python(HEAP_SPY.replace("{digest}", digest), limits=LIMITS)
        assert (r.verdict, r.stdout) == (Verdict.OK, "0\n"), (r.stdout, r.stderr[-300:])
    await _aftermath(sb, snap)


# The run slot's cgroup files: its CPU and OOM-kill totals count every run the slot ever
# had, so a run that reads them learns what the runs before it did (burn CPU here, read
# the total there). No run may open them or hold an fd to them, whatever the mode.
SLOT_SPY = r"""
import os
def spy():
    found = []
    if os.path.isdir("/run/cg"):
        found += ["/run/cg/" + n for n in os.listdir("/run/cg")]
    for name in ("cpu_ns", "oom", "cpu_stat", "0", "1", "2"):
        try:
            open("/run/cg/" + name).close()
            found.append("opened /run/cg/" + name)
        except OSError:
            pass
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink("/proc/self/fd/" + fd)
        except OSError:
            continue
        if any(s in target for s in ("/run/cg", "cgroup", "cpuacct", "memory.")):
            found.append(fd + " -> " + target)
    return found
"""


async def test_no_run_reaches_the_slot_s_counters(sb: Sandbox) -> None:
    snap = _snapshot(sb)
    r = await sb.run_python(SLOT_SPY + "print(spy())", limits=LIMITS)
    assert (r.verdict, r.stdout) == (Verdict.OK, "[]\n"), (r.stdout, r.stderr[-300:])
    r = await sb.run(["/usr/bin/python3", "-S", "-c", SLOT_SPY + "print(spy())"], limits=LIMITS)
    assert (r.verdict, r.stdout) == (Verdict.OK, "[]\n"), (r.stdout, r.stderr[-300:])
    r = await sb.run_tests(
        SLOT_SPY + "print('clean' if not spy() else spy())", [IOTest("", "clean")], limits=LIMITS
    )
    assert r.tests[0].passed, r.tests[0].detail
    r = await sb.run_tests(SLOT_SPY, [AssertTest("assert spy() == []", program=("spy",))])
    assert r.tests[0].passed, r.tests[0].detail
    await _aftermath(sb, snap)
