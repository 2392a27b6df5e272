"""Hostile programs through the service: the same verdicts as in-process, and the service
keeps serving. A representative subset of tests/sandbox/test_hostile*.py, one hostile
property per test (resources, network, escapes, privileges, orphans, secrets)."""

from __future__ import annotations

import os
import socket
import subprocess
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from textwrap import dedent

import pytest
import pytest_asyncio
from service_support import TOKEN, make_serve

from codegym.sandbox import ExecResult, Limits, Verdict
from codegym.sandbox._uids import sandbox_uid
from codegym.service import RemoteSandbox
from codegym.testing import await_until

pytestmark = pytest.mark.asyncio(loop_scope="module")

LIMITS = Limits(cpu_s=1, wall_s=3, memory_mb=128, output_bytes=1 << 16)
SHORT = Limits(cpu_s=1, wall_s=1.5, memory_mb=128, output_bytes=1 << 16)
SECRET = f"s3cret-{uuid.uuid4().hex}"

# Prepended to probing programs: ``attempt`` prints ``name: ALLOWED`` or the errno name.
ATTEMPT = r"""
import ctypes, errno, os, sys
libc = ctypes.CDLL(None, use_errno=True)
def attempt(name, call):
    try:
        ret = call()
    except OSError as e:
        how = errno.errorcode.get(e.errno or 0, type(e).__name__)
    else:
        how = errno.errorcode.get(ctypes.get_errno(), "-1") if ret == -1 else "ALLOWED"
    print(f"{name}: {how}", flush=True)
"""


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def sb() -> AsyncIterator[RemoteSandbox]:
    os.environ["CODEGYM_REMOTE_HOSTILE_SECRET"] = SECRET  # the server process holds it
    try:
        async with make_serve()(workers=2) as svc, RemoteSandbox(svc.url, token=TOKEN) as remote:
            yield remote
            # after every hostile program: the service still serves, with no infra error
            r = await remote.run_python("print(1)", limits=LIMITS)
            assert (r.verdict, r.stdout) == (Verdict.OK, "1\n")
            assert remote.infra_count == 0 and svc.app.state.service.sandbox.infra_count == 0
    finally:
        del os.environ["CODEGYM_REMOTE_HOSTILE_SECRET"]


@pytest.fixture
def host_sleeper() -> Iterator[subprocess.Popen[bytes]]:
    """A host process of the sandbox's uid, outside any sandbox."""
    uid = sandbox_uid() if os.geteuid() == 0 else os.geteuid()
    as_uid = {"user": uid, "group": uid, "extra_groups": []} if os.geteuid() == 0 else {}
    proc = subprocess.Popen(["sleep", "60"], **as_uid)  # type: ignore[call-overload]
    yield proc
    proc.kill()
    proc.wait()


def _refused(r: ExecResult, *how: str) -> None:
    assert r.verdict == Verdict.OK, (r.verdict, r.reason, r.stderr[-500:])
    outcomes = dict(line.split(": ", 1) for line in r.stdout.splitlines() if ": " in line)
    assert outcomes and "ALLOWED" not in outcomes.values(), outcomes
    if how:
        assert set(outcomes.values()) <= set(how), outcomes


async def test_fork_bomb(sb: RemoteSandbox) -> None:
    code = (
        "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n"
    )
    r = await sb.run_python(code, limits=Limits(cpu_s=1, wall_s=2, memory_mb=128))
    assert r.verdict == Verdict.TIMEOUT, (r.verdict, r.reason)


async def test_memory_bomb(sb: RemoteSandbox) -> None:
    r = await sb.run_python(
        "x = []\nwhile True:\n    x.append(bytearray(16 << 20))\n", limits=LIMITS
    )
    assert r.verdict == Verdict.MEMORY, (r.verdict, r.reason)


async def test_unbounded_output(sb: RemoteSandbox) -> None:
    r = await sb.run_python("while True:\n    print('x' * 4096)\n", limits=LIMITS)
    assert r.verdict == Verdict.OUTPUT_LIMIT and r.truncated, (r.verdict, r.reason)
    assert len(r.stdout.encode()) <= LIMITS.output_bytes


async def test_sleep_forever(sb: RemoteSandbox) -> None:
    r = await sb.run_python("import time\ntime.sleep(10**6)\n", limits=SHORT)
    assert r.verdict == Verdict.TIMEOUT, (r.verdict, r.reason)


async def test_segfault(sb: RemoteSandbox) -> None:
    r = await sb.run_python("import ctypes\nctypes.string_at(0)\n", limits=LIMITS)
    assert (r.verdict, r.signal) == (Verdict.KILLED, "SIGSEGV"), (r.verdict, r.reason)


async def test_tcp_connect_to_a_host_listener(sb: RemoteSandbox) -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        listener.setblocking(False)
        code = ATTEMPT + dedent(r"""
            import socket
            where = ('127.0.0.1', int(sys.argv[1]))
            attempt('tcp', lambda: socket.create_connection(where, timeout=1))
        """)
        r = await sb.run_python(code, limits=LIMITS, argv=[str(listener.getsockname()[1])])
        with pytest.raises(BlockingIOError):
            listener.accept()
    _refused(r, "EACCES")


async def test_read_host_secrets(sb: RemoteSandbox) -> None:
    code = ATTEMPT + dedent(r"""
        for path in ('/etc/shadow', '/root/.bashrc', '/proc/1/environ'):
            attempt(path, lambda: open(path).read())
        print('env:', sorted(os.environ))
    """)
    r = await sb.run_python(code, limits=LIMITS)
    assert SECRET not in r.stdout + r.stderr and "REMOTE_HOSTILE" not in r.stdout
    assert "ALLOWED" not in r.stdout.replace("/proc/1/environ: ALLOWED", "")


async def test_write_outside_the_work_dir(sb: RemoteSandbox, tmp_path: object) -> None:
    name = f"escape-{uuid.uuid4().hex}"
    targets = [f"/tmp/../usr/{name}", f"/usr/lib/{name}", "/opt/codegym/_harness.py", f"/{name}"]
    code = ATTEMPT + "for p in sys.argv[1:]:\n    attempt(p, lambda: open(p, 'a'))\n"
    r = await sb.run_python(code, limits=LIMITS, argv=targets)
    _refused(r, "ENOENT", "EROFS", "EACCES")
    assert not os.path.exists(f"/usr/{name}") and not os.path.exists(f"/{name}")


async def test_become_root_mount_and_unshare(sb: RemoteSandbox) -> None:
    code = ATTEMPT + dedent(r"""
        attempt('setuid', lambda: os.setuid(0))
        attempt('mount', lambda: libc.mount(b'none', b'/work', b'tmpfs', 0, None))
        attempt('unshare-user', lambda: libc.unshare(0x10000000))
        attempt('chroot', lambda: os.chroot('/tmp'))
    """)
    _refused(await sb.run_python(code, limits=LIMITS), "EPERM", "EINVAL")


async def test_kill_minus_one_spares_host_processes(
    sb: RemoteSandbox, host_sleeper: subprocess.Popen[bytes]
) -> None:
    r = await sb.run("sleep 30 & kill -9 -1; echo survived", limits=LIMITS)
    assert (r.verdict, r.stdout) == (Verdict.OK, "survived\n"), (r.reason, r.stderr[-500:])
    assert host_sleeper.poll() is None


async def test_orphan_daemon_dies_with_the_run(sb: RemoteSandbox) -> None:
    marker = f"{time.time_ns() % 10**9}.25"  # sleep's argument doubles as a marker
    r = await sb.run(f"setsid nohup sleep {marker} >/dev/null 2>&1 & echo started", limits=LIMITS)
    assert (r.verdict, r.stdout) == (Verdict.OK, "started\n"), (r.reason, r.stderr[-500:])
    # no such process on the host (a kill may take a moment to land on a busy one)
    await await_until(
        lambda: subprocess.run(["pgrep", "-f", f"sleep {marker}"], check=False,
                               capture_output=True).returncode == 1,
        timeout=10, what=f"the daemon 'sleep {marker}' gone",
    )  # fmt: skip


async def test_process_count_is_capped(sb: RemoteSandbox) -> None:
    code = dedent(r"""
        import os, time
        n = 0
        while n < 1000:
            try:
                pid = os.fork()
            except OSError:
                break
            if pid == 0:
                time.sleep(60)
                os._exit(0)
            n += 1
        print('forked:', n)
    """)
    limits = Limits(cpu_s=1, wall_s=3, memory_mb=128, max_processes=16)
    r = await sb.run_python(code, limits=limits)
    assert r.verdict == Verdict.OK and int(r.stdout.split()[1]) < 16, (r.reason, r.stdout)
