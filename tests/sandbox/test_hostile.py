"""Adversarial tests: one hostile program per test, against the default (jail) tier.

Every test checks four things:

1. the hostile action is contained: the run gets the right verdict, or the action fails
   inside the sandbox and the program says so;
2. the host is untouched: files it aimed at do not exist, host listeners saw nothing, and no
   process of the sandbox uid outlives the run (``_stray_processes``);
3. the pool still serves: ``print(1)`` is ``ok`` on every worker, with no infra failure and no
   worker restart (``_aftermath``);
4. the next run is clean: a probe of the file system, environment and interpreter state on
   every worker matches what a fresh run saw before any test ran (``PROBE``).

One module-scoped ``Sandbox`` serves most tests, so the pool's survival across all of them is
tested too. Tests that poison a worker on purpose, where the sandbox is known not to contain
it, use a private pool so the damage cannot spill into other tests. Every run uses the same
``memory_mb``, so no test depends on a worker changing its memory limit (see
``test_a_larger_memory_limit_needs_no_worker_restart``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import subprocess
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from textwrap import dedent

import pytest
import pytest_asyncio

import codegym
from codegym.sandbox import (
    AssertTest,
    ExecResult,
    HostUnsupported,
    IOTest,
    Limits,
    Sandbox,
    SandboxInputError,
    Verdict,
)
from codegym.sandbox.limits import MAX_CODE_BYTES, MAX_INPUT_BYTES
from codegym.sandbox.tier import sandbox_uid

pytestmark = pytest.mark.asyncio(loop_scope="module")

MEMORY_MB = 128
LIMITS = Limits(cpu_s=1, wall_s=3, memory_mb=MEMORY_MB, output_bytes=1 << 16)
SHORT = Limits(cpu_s=1, wall_s=1.5, memory_mb=MEMORY_MB, output_bytes=1 << 16)
UID = sandbox_uid() if os.geteuid() == 0 else os.geteuid()
REPO = Path(codegym.__file__).resolve().parents[2]
SECRET_VAR = "CODEGYM_HOSTILE_SECRET"
SECRET = f"s3cret-{uuid.uuid4().hex}"

# What a run can observe of the state an earlier run might have left behind.
PROBE = r"""
import builtins, json, os, re, resource, signal, sys

def ls(path):
    try:
        return sorted(os.listdir(path))
    except OSError as e:
        return type(e).__name__

dirs = ("/", "/work", "/tmp", "/dev", "/dev/shm", "/etc", "/run", "/opt", "/opt/codegym")
limits = ("RLIMIT_CPU", "RLIMIT_AS", "RLIMIT_NOFILE", "RLIMIT_NPROC", "RLIMIT_FSIZE",
          "RLIMIT_STACK", "RLIMIT_CORE")
sigs = ("SIGTERM", "SIGINT", "SIGHUP", "SIGPIPE", "SIGXCPU", "SIGXFSZ", "SIGCHLD", "SIGALRM")
umask = os.umask(0o022)
os.umask(umask)
state = json.dumps({
    "dirs": {d: ls(d) for d in dirs},
    "procs": sorted(int(p) for p in os.listdir("/proc") if p.isdigit()),
    "env": dict(os.environ),
    "cwd": os.getcwd(),
    "umask": umask,
    "ids": [os.getuid(), os.geteuid(), os.getgid(), os.getgroups()],
    "modules": sorted(sys.modules),
    "path": sys.path,
    "recursion": sys.getrecursionlimit(),
    "builtins": {k: repr(v) for k, v in sorted(vars(builtins).items()) if k != "_"},
    "rlimits": {n: resource.getrlimit(getattr(resource, n)) for n in limits},
    "signals": {n: str(signal.getsignal(getattr(signal, n))) for n in sigs},
    "stdin": sys.stdin.read(),
}, sort_keys=True)
sys.stdout.write(re.sub(r" at 0x[0-9a-f]+", "", state))  # addresses differ between workers
"""

# Prepended to hostile programs: ``attempt`` prints ``name: ALLOWED`` or how it was refused.
ATTEMPT = r"""
import ctypes, errno, os, sys
libc = ctypes.CDLL(None, use_errno=True)

def attempt(name, call):
    try:
        ret = call()
    except OSError as e:
        how = errno.errorcode.get(e.errno or 0, type(e).__name__)
    except ValueError as e:  # setrlimit refusing to raise a hard limit
        how = "ValueError"
    else:
        how = errno.errorcode.get(ctypes.get_errno(), "-1") if ret == -1 else "ALLOWED"
    print(f"{name}: {how}", flush=True)
"""

_baseline: dict[str, object] = {}


# ---------------------------------------------------------------- host-side observation


@dataclass(frozen=True)
class _Proc:
    uid: int
    ppid: int
    state: str
    cmdline: bytes


def _scan() -> dict[int, _Proc]:
    procs = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            uid = os.stat(f"/proc/{name}").st_uid
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read()
            with open(f"/proc/{name}/cmdline", "rb") as f:
                cmdline = f.read().replace(b"\0", b" ")
        except OSError:
            continue  # exited while we looked
        fields = stat[stat.rindex(b")") + 2 :].split()
        procs[int(name)] = _Proc(uid, int(fields[1]), fields[0].decode(), cmdline)
    return procs


def _stray_processes() -> set[tuple[int, bytes]]:
    """Live host processes of the sandbox uid that no worker accounts for.

    A worker is three sandbox-uid processes under this test process (bwrap, bwrap's pid 1,
    the zygote), and between runs the zygote has exactly one child with none of its own: the
    next run's process, forked ahead and waiting for its request. Anything else that deep
    is a leftover, and so is a sandbox-uid process orphaned to one of our ancestors (init
    or a subreaper).
    Sandbox-uid processes under another process belong to someone else (a concurrent test
    run) and are ignored. So are zombies: they run nothing, and this host's init may never
    reap them.
    """
    procs = _scan()
    me = os.getpid()
    ancestors = {0}
    cur = me
    while cur in procs and cur not in ancestors:
        cur = procs[cur].ppid
        ancestors.add(cur)
    stray = set()
    prepared: dict[int, list[int]] = {}  # zygote pid -> its children
    parents = {p.ppid for p in procs.values()}
    for pid, p in procs.items():
        if p.uid != UID or p.state in "ZX" or pid == me:
            continue
        depth, node = 0, p
        while node.ppid != me and node.ppid in procs and procs[node.ppid].uid == UID:
            node, depth = procs[node.ppid], depth + 1
        if node.ppid == me and depth == 3 and pid not in parents:
            prepared.setdefault(p.ppid, []).append(pid)
        elif (node.ppid == me and depth > 2) or (node.ppid != me and node.ppid in ancestors):
            stray.add((pid, p.cmdline))
    for children in prepared.values():
        stray.update((pid, procs[pid].cmdline) for pid in children[1:])
    return stray


def _processes_with(marker: str) -> list[bytes]:
    return [p.cmdline for p in _scan().values() if marker.encode() in p.cmdline]


def _worker_host_pids(sb: Sandbox) -> list[int]:
    """Host pids of every worker's bwrap, bwrap's pid 1 and zygote."""
    procs = _scan()
    level = [w.proc.pid for w in sb._workers if w.proc is not None]
    out = list(level)
    for _ in range(2):
        level = [pid for pid, p in procs.items() if p.ppid in level]
        out += level
    return out


@dataclass
class _Snapshot:
    infra: int
    recycles: int
    stray: set[tuple[int, bytes]]


def _snapshot(sb: Sandbox) -> _Snapshot:
    return _Snapshot(sb.infra_count, sb.recycles, _stray_processes())


async def _probe_every_worker(sb: Sandbox) -> list[dict[str, object]]:
    # one concurrent call per worker: each takes a different idle worker from the queue
    runs = await asyncio.gather(*(sb.run_python(PROBE, limits=LIMITS) for _ in range(sb.size)))
    for r in runs:
        assert r.verdict == Verdict.OK, (r.reason, r.stderr[-500:])
    return [json.loads(r.stdout) for r in runs]


def _diff(seen: dict[str, object], want: dict[str, object]) -> dict[str, object]:
    return {k: (seen.get(k), want.get(k)) for k in want if seen.get(k) != want.get(k)}


async def _aftermath(
    sb: Sandbox, snap: _Snapshot, *, marker: str | None = None, host_paths: tuple[Path, ...] = ()
) -> None:
    """Host untouched, pool serving on every worker, and the next run clean."""
    stray: set[tuple[int, bytes]] = set()
    for _ in range(10):  # the run is over; give the kernel a moment to finish reaping
        stray = _stray_processes() - snap.stray
        if not stray:
            break
        await asyncio.sleep(0.05)
    assert not stray, f"sandbox-uid processes outlived the run: {stray}"
    if marker is not None:
        assert not _processes_with(marker), "a process the program started still runs"
    for path in host_paths:
        assert not path.exists(), f"the program created {path} on the host"
    ones = await asyncio.gather(*(sb.run_python("print(1)", limits=LIMITS) for _ in range(sb.size)))
    for r in ones:
        assert (r.verdict, r.stdout) == (Verdict.OK, "1\n"), (r.reason, r.stderr[-500:])
    for seen in await _probe_every_worker(sb):
        assert seen == _baseline, _diff(seen, _baseline)
    assert sb.infra_count == snap.infra, "an infra failure happened"
    assert sb.recycles == snap.recycles, "a worker had to be restarted"
    assert all(w.alive for w in sb._workers)


def _outcomes(stdout: str) -> dict[str, str]:
    """The ``name: outcome`` lines a hostile program printed."""
    return dict(line.split(": ", 1) for line in stdout.splitlines() if ": " in line)


def _refused(r: ExecResult, *how: str) -> dict[str, str]:
    """Assert the run ended ok and every attempt it made was refused (with one of ``how``)."""
    assert r.verdict == Verdict.OK, (r.verdict, r.reason, r.stderr[-500:])
    outcomes = _outcomes(r.stdout)
    assert outcomes, "the program reported nothing"
    assert "ALLOWED" not in outcomes.values(), outcomes
    if how:
        assert set(outcomes.values()) <= set(how), outcomes
    return outcomes


# ---------------------------------------------------------------- fixtures


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def sb() -> AsyncIterator[Sandbox]:
    # A secret in the host process's environment: no sandboxed program may see it.
    old = os.environ.get(SECRET_VAR)
    os.environ[SECRET_VAR] = SECRET
    try:
        box = Sandbox(tier="jail", workers=2)
        try:
            await box.start()
        except HostUnsupported as e:
            pytest.skip(str(e))
        try:
            first, *rest = await _probe_every_worker(box)
            assert all(p == first for p in rest)
            assert len(first["procs"]) <= 2  # itself, and perhaps its run's init process
            _baseline.clear()
            _baseline.update(first)
            yield box
        finally:
            await box.close()
    finally:
        if old is None:
            os.environ.pop(SECRET_VAR, None)
        else:
            os.environ[SECRET_VAR] = old


@contextlib.asynccontextmanager
async def _private_sandbox() -> AsyncIterator[Sandbox]:
    """A one-worker pool for a test that may leave its worker damaged."""
    async with Sandbox(tier="jail", workers=1) as box:
        (seen,) = await _probe_every_worker(box)
        assert seen == _baseline, _diff(seen, _baseline)
        yield box


@pytest.fixture
def host_sleeper() -> Iterator[subprocess.Popen[bytes]]:
    """A host process running as the sandbox's own uid, outside any sandbox."""
    as_uid = {"user": UID, "group": UID, "extra_groups": []} if os.geteuid() == 0 else {}
    proc = subprocess.Popen(["sleep", "60"], **as_uid)  # type: ignore[call-overload]
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait()


# ---------------------------------------------------------------- resource exhaustion


async def test_fork_bomb(sb: Sandbox) -> None:
    snap = _snapshot(sb)
    code = dedent(r"""
        import os
        while True:
            try:
                os.fork()
            except OSError:
                pass
    """)
    r = await sb.run_python(code, limits=Limits(cpu_s=1, wall_s=2, memory_mb=MEMORY_MB))
    assert r.verdict == Verdict.TIMEOUT, (r.verdict, r.reason)
    await _aftermath(sb, snap)


async def test_process_count_is_capped(sb: Sandbox) -> None:
    snap = _snapshot(sb)
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
    limits = Limits(cpu_s=1, wall_s=3, memory_mb=MEMORY_MB, max_processes=16)
    r = await sb.run_python(code, limits=limits)
    assert r.verdict == Verdict.OK, (r.reason, r.stderr[-500:])
    assert int(_outcomes(r.stdout)["forked"]) < 16  # and the sleepers died with the run
    await _aftermath(sb, snap)


async def test_memory_bomb(sb: Sandbox) -> None:
    snap = _snapshot(sb)
    r = await sb.run_python(
        "x = []\nwhile True:\n    x.append(bytearray(16 << 20))\n", limits=LIMITS
    )
    assert r.verdict == Verdict.MEMORY, (r.verdict, r.reason)
    assert r.peak_memory_mb is None or r.peak_memory_mb <= MEMORY_MB * 1.05
    await _aftermath(sb, snap)


async def test_disk_fill(sb: Sandbox) -> None:
    snap = _snapshot(sb)
    name = f"fill-{uuid.uuid4().hex}"
    code = dedent(r"""
        import os, sys
        for d in ('/work', '/tmp', '/dev/shm'):
            n = 0
            try:
                while True:
                    with open(os.path.join(d, f'{sys.argv[1]}-{n}'), 'wb') as f:
                        f.write(b'x' * (1 << 20))
                    n += 1
            except OSError as e:
                print(f'{d}: {n} {e.strerror}')
    """)
    limits = Limits(cpu_s=1, wall_s=3, memory_mb=MEMORY_MB, disk_mb=16)
    r = await sb.run_python(code, limits=limits, argv=[name])
    assert r.verdict == Verdict.OK, (r.reason, r.stderr[-500:])
    written = _outcomes(r.stdout)
    assert set(written) == {"/work", "/tmp", "/dev/shm"}
    for outcome in written.values():
        assert int(outcome.split()[0]) <= 16 and "No space left" in outcome, written
    await _aftermath(sb, snap, host_paths=(REPO / f"{name}-0", Path("/tmp") / f"{name}-0"))


async def test_file_larger_than_the_disk_limit(sb: Sandbox) -> None:
    snap = _snapshot(sb)
    code = dedent(r"""
        import os
        with open('big', 'wb') as f:
            while True:
                f.write(b'x' * (1 << 20))
                f.flush()
                print('size:', os.fstat(f.fileno()).st_size, flush=True)
    """)
    limits = Limits(cpu_s=1, wall_s=3, memory_mb=MEMORY_MB, disk_mb=8)
    r = await sb.run_python(code, limits=limits)
    # the write past the limit fails (EFBIG, ENOSPC) or SIGXFSZ ends the program
    assert r.verdict == Verdict.ERROR or r.signal == "SIGXFSZ", (r.verdict, r.reason)
    sizes = [int(line.split()[1]) for line in r.stdout.splitlines()]
    assert sizes and max(sizes) <= 8 << 20, sizes
    await _aftermath(sb, snap)


async def test_unbounded_output(sb: Sandbox) -> None:
    snap = _snapshot(sb)
    code = dedent(r"""
        import sys
        while True:
            sys.stdout.write('o' * 4096)
            sys.stderr.write('e' * 4096)
    """)
    r = await sb.run_python(code, limits=LIMITS)
    assert r.verdict == Verdict.OUTPUT_LIMIT, (r.verdict, r.reason)
    assert r.truncated and len(r.stdout) + len(r.stderr) <= LIMITS.output_bytes
    await _aftermath(sb, snap)


async def test_unbounded_output_from_a_subprocess(sb: Sandbox) -> None:
    snap = _snapshot(sb)
    r = await sb.run("yes hostile | cat", limits=LIMITS)
    assert r.verdict == Verdict.OUTPUT_LIMIT, (r.verdict, r.reason)
    assert len(r.stdout) + len(r.stderr) <= LIMITS.output_bytes
    await _aftermath(sb, snap)


async def test_sleep_forever(sb: Sandbox) -> None:
    snap = _snapshot(sb)
    r = await sb.run_python("import time\ntime.sleep(10**6)\n", limits=SHORT)
    assert r.verdict == Verdict.TIMEOUT, (r.verdict, r.reason)
    await _aftermath(sb, snap)


async def test_spinning_threads(sb: Sandbox) -> None:
    snap = _snapshot(sb)
    code = dedent(r"""
        import threading
        def spin():
            while True:
                pass
        for _ in range(8):
            threading.Thread(target=spin).start()
    """)
    r = await sb.run_python(code, limits=LIMITS)
    assert r.verdict == Verdict.TIMEOUT, (r.verdict, r.reason)
    assert r.cpu_s >= 0.9  # the threads' CPU time is charged to the run
    await _aftermath(sb, snap)


async def test_infinite_recursion(sb: Sandbox) -> None:
    snap = _snapshot(sb)
    r = await sb.run_python("def f():\n    return f()\nf()\n", limits=LIMITS)
    assert r.verdict == Verdict.ERROR and "RecursionError" in r.stderr, (r.verdict, r.reason)
    await _aftermath(sb, snap)


async def test_unbounded_recursion_past_the_recursion_limit(sb: Sandbox) -> None:
    snap = _snapshot(sb)
    code = dedent(r"""
        import sys
        sys.setrecursionlimit(10**8)
        def f(n):
            return f(n + 1)
        f(0)
    """)
    r = await sb.run_python(code, limits=LIMITS)
    # frames that outgrow the memory limit, or a C stack overflow
    assert r.verdict in (Verdict.MEMORY, Verdict.KILLED), (r.verdict, r.reason)
    await _aftermath(sb, snap)


async def test_read_stdin_forever(sb: Sandbox) -> None:
    snap = _snapshot(sb)
    r = await sb.run_python("import sys\nwhile True:\n    sys.stdin.read()\n", "x", limits=LIMITS)
    assert r.verdict == Verdict.TIMEOUT, (r.verdict, r.reason)
    await _aftermath(sb, snap)


async def test_stdin_always_reaches_eof(sb: Sandbox) -> None:
    snap = _snapshot(sb)
    code = dedent(r"""
        import os, sys
        first = sys.stdin.buffer.read()
        again = sys.stdin.buffer.read()
        print('read:', len(first), len(again), len(os.read(0, 4096)))
    """)
    r = await sb.run_python(code, b"a" * (1 << 20), limits=LIMITS)
    assert r.verdict == Verdict.OK, (r.reason, r.stderr[-500:])
    assert _outcomes(r.stdout)["read"] == f"{1 << 20} 0 0"
    await _aftermath(sb, snap)


async def test_closed_stdout(sb: Sandbox) -> None:
    snap = _snapshot(sb)
    code = dedent(r"""
        import os
        os.close(1)
        os.close(2)
        print('into the void')
        print('and more')
    """)
    r = await sb.run_python(code, limits=LIMITS)
    assert r.verdict in (Verdict.OK, Verdict.ERROR), (r.verdict, r.reason)
    assert r.stdout == ""
    await _aftermath(sb, snap)


# ---------------------------------------------------------------- signals, crashes, rlimits


async def test_segfault_via_ctypes(sb: Sandbox) -> None:
    snap = _snapshot(sb)
    r = await sb.run_python("import ctypes\nctypes.string_at(0)\n", limits=LIMITS)
    assert (r.verdict, r.signal) == (Verdict.KILLED, "SIGSEGV"), (r.verdict, r.reason)
    await _aftermath(sb, snap)


async def test_ignore_sigterm(sb: Sandbox) -> None:
    snap = _snapshot(sb)
    code = dedent(r"""
        import signal, time
        for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(s, signal.SIG_IGN)
        time.sleep(10**6)
    """)
    r = await sb.run_python(code, limits=SHORT)
    assert r.verdict == Verdict.TIMEOUT, (r.verdict, r.reason)
    await _aftermath(sb, snap)


async def test_stopped_process(sb: Sandbox) -> None:
    snap = _snapshot(sb)
    code = dedent(r"""
        import os, signal
        child = os.fork()
        if child == 0:
            os.kill(os.getpid(), signal.SIGSTOP)
            os._exit(0)
        os.waitpid(child, 0)  # a stopped child never exits
    """)
    r = await sb.run_python(code, limits=SHORT)
    assert r.verdict == Verdict.TIMEOUT, (r.verdict, r.reason)
    await _aftermath(sb, snap)


async def test_ignore_sigxcpu_and_raise_the_soft_cpu_limit(sb: Sandbox) -> None:
    snap = _snapshot(sb)
    code = dedent(r"""
        import resource, signal
        signal.signal(signal.SIGXCPU, signal.SIG_IGN)
        soft, hard = resource.getrlimit(resource.RLIMIT_CPU)
        resource.setrlimit(resource.RLIMIT_CPU, (hard, hard))
        while True:
            pass
    """)
    r = await sb.run_python(code, limits=LIMITS)
    assert r.verdict == Verdict.TIMEOUT, (r.verdict, r.reason)
    await _aftermath(sb, snap)


async def test_raise_hard_rlimits(sb: Sandbox) -> None:
    snap = _snapshot(sb)
    code = ATTEMPT + dedent(r"""
        import resource
        inf = (resource.RLIM_INFINITY, resource.RLIM_INFINITY)
        for name in ('RLIMIT_CPU', 'RLIMIT_NOFILE', 'RLIMIT_FSIZE', 'RLIMIT_CORE'):
            attempt(name, lambda: resource.setrlimit(getattr(resource, name), inf))
        while True:
            pass
    """)
    r = await sb.run_python(code, limits=LIMITS)
    assert r.verdict == Verdict.TIMEOUT, (r.verdict, r.reason)  # the CPU limit still holds
    assert set(_outcomes(r.stdout).values()) == {"ValueError"}, r.stdout
    await _aftermath(sb, snap)


# ---------------------------------------------------------------- other processes


async def test_kill_minus_one(sb: Sandbox, host_sleeper: subprocess.Popen[bytes]) -> None:
    snap = _snapshot(sb)
    r = await sb.run("sleep 30 & kill -9 -1; echo survived", limits=LIMITS)
    assert (r.verdict, r.stdout) == (Verdict.OK, "survived\n"), (r.reason, r.stderr[-500:])
    assert host_sleeper.poll() is None, "kill -9 -1 reached a host process of the same uid"
    await _aftermath(sb, snap)


async def test_kill_the_zygote(sb: Sandbox, host_sleeper: subprocess.Popen[bytes]) -> None:
    snap = _snapshot(sb)
    # Every pid it can see or guess: its /proc, the cgroup's member lists, the workers' and
    # the host sleeper's host pids, and every small pid number.
    code = dedent(r"""
        import glob, os, signal, sys
        visible = {int(p) for p in os.listdir('/proc') if p.isdigit()}
        targets = visible | {int(a) for a in sys.argv[1:]} | set(range(1, 4096))
        for path in glob.glob('/run/cg/*'):
            try:
                targets |= {int(x) for x in open(path).read().split()}
            except (OSError, ValueError):
                pass
        reached = set()
        for pid in sorted(targets - {os.getpid()}):
            try:
                os.kill(pid, signal.SIGKILL)
                reached.add(pid)
            except OSError:
                pass
        print('outside:', sorted(reached - visible))
    """)
    host_pids = [*_worker_host_pids(sb), host_sleeper.pid, os.getpid()]
    r = await sb.run_python(code, limits=LIMITS, argv=[str(p) for p in host_pids])
    assert r.verdict == Verdict.OK, (r.verdict, r.reason, r.stderr[-500:])
    assert _outcomes(r.stdout)["outside"] == "[]"  # it could signal nothing it cannot see
    assert host_sleeper.poll() is None
    await _aftermath(sb, snap)  # no worker died or had to be restarted


async def test_ptrace(sb: Sandbox) -> None:
    snap = _snapshot(sb)
    code = ATTEMPT + dedent(r"""
        import time
        child = os.fork()
        if child == 0:
            time.sleep(30)
            os._exit(0)
        for pid in [1, child, *map(int, sys.argv[1:])]:
            attempt(f'attach-{pid}', lambda: libc.ptrace(16, pid, None, None))
            attempt(f'seize-{pid}', lambda: libc.ptrace(0x4206, pid, None, None))
        attempt('traceme', lambda: libc.ptrace(0, 0, None, None))
        os.kill(child, 9)
    """)
    r = await sb.run_python(code, limits=LIMITS, argv=[str(p) for p in _worker_host_pids(sb)])
    _refused(r, "EPERM")
    await _aftermath(sb, snap)


async def test_read_another_process_memory(sb: Sandbox) -> None:
    snap = _snapshot(sb)
    code = ATTEMPT + dedent(r"""
        def peek(pid):
            with open(f'/proc/{pid}/mem', 'rb') as f:
                f.seek(0x400000)
                return f.read(16)
        buf = ctypes.create_string_buffer(16)
        iov = (ctypes.c_void_p * 2)(ctypes.addressof(buf), 16)
        pids = {int(p) for p in os.listdir('/proc') if p.isdigit()} - {os.getpid()}
        for pid in sorted(pids | set(map(int, sys.argv[1:]))):
            attempt(f'mem-{pid}', lambda: peek(pid))
            attempt(f'vm-readv-{pid}', lambda: libc.process_vm_readv(pid, iov, 1, iov, 1, 0))
    """)
    host_pids = [*_worker_host_pids(sb), os.getpid()]
    r = await sb.run_python(code, limits=LIMITS, argv=[str(p) for p in host_pids])
    _refused(r)
    await _aftermath(sb, snap)


async def test_orphan_daemon_outliving_the_run(sb: Sandbox) -> None:
    snap = _snapshot(sb)
    marker = f"hostile-daemon-{uuid.uuid4().hex}"
    # Double fork + setsid, then exec a long sleeper (holding stdout open) that reports
    # back once it runs, so it is certainly alive when the program exits.
    code = dedent(r"""
        import os, sys
        r, w = os.pipe()
        os.set_inheritable(w, True)
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                prog = f'import os, time; os.write({w}, b"1"); time.sleep(600)'
                os.execv('/usr/bin/python3', ['python3', '-c', prog, sys.argv[1]])
            os._exit(0)
        os.close(w)
        print('daemon:', os.read(r, 1) == b'1')
    """)
    r = await sb.run_python(code, limits=LIMITS, argv=[marker])
    assert r.verdict == Verdict.OK, (r.reason, r.stderr[-500:])
    assert _outcomes(r.stdout)["daemon"] == "True"
    await _aftermath(sb, snap, marker=marker)


async def test_orphan_shell_background_job(sb: Sandbox) -> None:
    snap = _snapshot(sb)
    marker = f"{time.time_ns() % 10**9}.5"  # sleep's argument doubles as a marker
    cmd = f"setsid nohup sleep {marker} >/dev/null 2>&1 & sleep 0.2; echo started"
    r = await sb.run(cmd, limits=LIMITS)
    assert (r.verdict, r.stdout) == (Verdict.OK, "started\n"), (r.reason, r.stderr[-500:])
    await _aftermath(sb, snap, marker=f"sleep {marker}")


# ---------------------------------------------------------------- privileges


async def test_become_root(sb: Sandbox) -> None:
    snap = _snapshot(sb)
    code = ATTEMPT + dedent(r"""
        attempt('setuid', lambda: os.setuid(0))
        attempt('setgid', lambda: os.setgid(0))
        attempt('setgroups', lambda: os.setgroups([0]))
        attempt('setresuid', lambda: os.setresuid(0, 0, 0))
    """)
    _refused(await sb.run_python(code, limits=LIMITS), "EPERM", "EINVAL")
    await _aftermath(sb, snap)


async def test_mount(sb: Sandbox) -> None:
    snap = _snapshot(sb)
    code = ATTEMPT + dedent(r"""
        attempt('tmpfs', lambda: libc.mount(b'none', b'/work', b'tmpfs', 0, None))
        attempt('remount-usr-rw', lambda: libc.mount(None, b'/usr', None, 0x1020, None))
        attempt('umount-work', lambda: libc.umount2(b'/work', 2))
    """)
    _refused(await sb.run_python(code, limits=LIMITS), "EPERM")
    await _aftermath(sb, snap)


async def test_unshare_new_namespaces(sb: Sandbox) -> None:
    snap = _snapshot(sb)
    code = ATTEMPT + dedent(r"""
        def clone(flag):
            pid = libc.syscall(56, flag | 17, 0, 0, 0, 0)  # clone(flag | SIGCHLD)
            if pid == 0:
                os._exit(0)
            return pid
        for name, flag in (('user', 0x10000000), ('mount', 0x20000), ('net', 0x40000000),
                           ('pid', 0x20000000), ('cgroup', 0x02000000)):
            attempt(f'unshare-{name}', lambda: libc.unshare(flag))
            attempt(f'clone-{name}', lambda: clone(flag))
    """)
    _refused(await sb.run_python(code, limits=LIMITS), "EPERM")
    await _aftermath(sb, snap)


async def test_chroot(sb: Sandbox) -> None:
    snap = _snapshot(sb)
    code = ATTEMPT + dedent(r"""
        os.makedirs('jail')
        attempt('chroot', lambda: os.chroot('jail'))
    """)
    _refused(await sb.run_python(code, limits=LIMITS), "EPERM")
    await _aftermath(sb, snap)


# ---------------------------------------------------------------- network


async def test_tcp_connect_to_a_host_listener(sb: Sandbox) -> None:
    snap = _snapshot(sb)
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        listener.setblocking(False)
        port = listener.getsockname()[1]
        code = ATTEMPT + dedent(r"""
            import socket
            where = ('127.0.0.1', int(sys.argv[1]))
            attempt('tcp', lambda: socket.create_connection(where, timeout=1))
        """)
        r = await sb.run_python(code, limits=LIMITS, argv=[str(port)])
        with pytest.raises(BlockingIOError):
            listener.accept()  # nobody connected
    _refused(r, "EACCES")  # no AF_INET socket at all
    await _aftermath(sb, snap)


async def test_udp_sendto_a_host_socket(sb: Sandbox) -> None:
    snap = _snapshot(sb)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as receiver:
        receiver.bind(("127.0.0.1", 0))
        receiver.setblocking(False)
        port = receiver.getsockname()[1]
        code = ATTEMPT + dedent(r"""
            import socket
            def send():
                s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
                s.sendto(b'exfiltrated', ('127.0.0.1', int(sys.argv[1])))
            attempt('udp', send)
        """)
        r = await sb.run_python(code, limits=LIMITS, argv=[str(port)])
        with pytest.raises(BlockingIOError):
            receiver.recvfrom(100)  # nothing arrived
    _refused(r, "EACCES")
    await _aftermath(sb, snap)


async def test_dns_lookup(sb: Sandbox) -> None:
    snap = _snapshot(sb)
    code = ATTEMPT + dedent(r"""
        import socket
        attempt('dns', lambda: socket.getaddrinfo('example.com', 80))
    """)
    _refused(await sb.run_python(code, limits=LIMITS))
    await _aftermath(sb, snap)


async def test_unix_sockets_to_host_services(sb: Sandbox, tmp_path: Path) -> None:
    snap = _snapshot(sb)
    host_sock = tmp_path / "service.sock"
    targets = [
        str(host_sock),
        "/run/dbus/system_bus_socket",
        "/var/run/dbus/system_bus_socket",
        "/run/systemd/private",
        "/run/postgresql/.s.PGSQL.5432",
        "/tmp/.X11-unix/X0",
    ]
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
        listener.bind(str(host_sock))
        listener.listen()
        listener.setblocking(False)
        code = ATTEMPT + dedent(r"""
            import glob, socket
            paths = set(sys.argv[1:])
            for pattern in ('/run/**', '/var/run/**', '/tmp/**'):
                paths.update(glob.glob(pattern, recursive=True))
            for path in sorted(paths):
                s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                attempt(path, lambda: s.connect(path))
        """)
        r = await sb.run_python(code, limits=LIMITS, argv=targets)
        with pytest.raises(BlockingIOError):
            listener.accept()
    outcomes = _refused(r)
    assert set(targets) <= set(outcomes), outcomes
    await _aftermath(sb, snap)


async def test_abstract_unix_socket_to_the_host(sb: Sandbox) -> None:
    snap = _snapshot(sb)
    name = f"codegym-hostile-{uuid.uuid4().hex}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
        listener.bind("\0" + name)  # abstract names are scoped by network namespace
        listener.listen()
        listener.setblocking(False)
        code = ATTEMPT + dedent(r"""
            import socket
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            attempt('abstract', lambda: s.connect('\0' + sys.argv[1]))
        """)
        r = await sb.run_python(code, limits=LIMITS, argv=[name])
        with pytest.raises(BlockingIOError):
            listener.accept()
    _refused(r, "ECONNREFUSED")
    await _aftermath(sb, snap)


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
    async with _private_sandbox() as box:
        code = ATTEMPT + dedent(r"""
            for d in ('/', '/etc', '/dev', '/run', '/opt', '/opt/codegym'):
                attempt(d, lambda: open(os.path.join(d, 'poison'), 'w'))
        """)
        r = await box.run_python(code, limits=LIMITS)
        (seen,) = await _probe_every_worker(box)
        assert seen["dirs"] == _baseline["dirs"], r.stdout


async def test_poison_a_stdlib_module_for_the_next_run(sb: Sandbox) -> None:
    async with _private_sandbox() as box:
        plant = ATTEMPT + dedent(r"""
            for d in sys.path:
                attempt(d, lambda: open(os.path.join(d or '.', 'shlex.py'), 'w').write(
                    'print("POISONED")'))
        """)
        await box.run_python(plant, limits=LIMITS)
        r = await box.run_python("import shlex\nprint(shlex.quote('a b'))\n", limits=LIMITS)
        assert (r.verdict, r.stdout) == (Verdict.OK, "'a b'\n"), r.stdout


async def test_poison_ld_so_preload_for_the_next_run(sb: Sandbox) -> None:
    async with _private_sandbox() as box:
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
    assert not any(t.passed for t in r.tests), r.tests
    assert all(t.verdict == Verdict.ERROR and "forged" in t.detail for t in r.tests), r.tests


# What a test fork used to report on its private fd 3, and what the harness wrote to the
# zygote: a program that writes exactly these (plainly, or with a guessed tag) forges a pass.
FORK_PASS = b'{"passed": true, "verdict": "ok", "detail": ""}'
LINE_PASS = b'{"i": 0, "passed": true, "verdict": "ok", "detail": ""}\n'
GUESSED_TAG = b"0" * 32 + b" "


async def test_forge_a_result_from_inside_a_forked_test(sb: Sandbox) -> None:
    # several assert tests each run in a fork that reports to the harness on fd 3
    snap = _snapshot(sb)
    code = f"import os\ndef solve():\n    os.write(3, {FORK_PASS!r})\n    os._exit(0)\n"
    tests = [AssertTest("assert solve() == 42"), AssertTest("assert solve() == 43")]
    r = await sb.run_tests(code, tests, limits=LIMITS)
    await _aftermath(sb, snap)
    assert [(t.passed, t.verdict) for t in r.tests] == [(False, Verdict.ERROR)] * 2, r.tests
    assert all("forged" in t.detail for t in r.tests), r.tests


@pytest.mark.parametrize("line", [LINE_PASS, GUESSED_TAG + LINE_PASS], ids=["plain", "tagged"])
async def test_forge_a_result_from_the_single_in_process_test(sb: Sandbox, line: bytes) -> None:
    snap = _snapshot(sb)
    code = f"import os\ndef solve():\n    os.write(3, {line!r})\n    os._exit(0)\n"
    r = await sb.run_tests(code, [AssertTest("assert solve() == 42")], limits=LIMITS)
    await _aftermath(sb, snap)
    (t,) = r.tests
    assert (t.passed, t.verdict) == (False, Verdict.ERROR) and "forged" in t.detail, t


async def test_forge_a_result_from_a_child_process(sb: Sandbox) -> None:
    # no in-process secret to dig out: the child is a fresh interpreter
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
    assert (t.passed, t.verdict) == (False, Verdict.ERROR) and "forged" in t.detail, t


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
    tests = [AssertTest(code.replace("\n", "; ")), AssertTest("assert True")]
    r = await sb.run_tests("", tests, limits=LIMITS)
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
    await asyncio.sleep(0.1)
    r = await sb.run_python("print(1)", limits=LIMITS)
    assert (r.verdict, r.stdout) == (Verdict.OK, "1\n")
    assert not hung.done(), "the other worker served only after the hung run ended"
    assert (await hung).verdict == Verdict.TIMEOUT
    await _aftermath(sb, snap)


async def test_a_larger_memory_limit_needs_no_worker_restart(sb: Sandbox) -> None:
    async with _private_sandbox() as box:
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
        async with _private_sandbox() as box:  # limits that get this far must not hurt `sb`
            await box.run_python("print(1)", limits=limits)
    await _aftermath(sb, snap)


async def test_limits_of_the_wrong_type(sb: Sandbox) -> None:
    snap = _snapshot(sb)
    with pytest.raises(SandboxInputError, match="limits must be a Limits"):
        await sb.run_python("print(1)", limits={"cpu_s": 1})  # type: ignore[arg-type]
    await _aftermath(sb, snap)
