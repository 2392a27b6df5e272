"""What the adversarial sandbox tests share: the host-side checks, the probe of what a
run can see, and the module-scoped pool.

Used by ``test_hostile.py`` (resources, signals, other processes, privileges, network)
and ``test_hostile_state.py`` (host secrets and files, poisoning the next run, forged
results, the pool, bad input). Each test there checks four things:

1. the hostile action is contained: the run gets the right verdict, or the action fails
   inside the sandbox and the program says so;
2. the host is untouched: files it aimed at do not exist, host listeners saw nothing, and no
   process of the sandbox uid outlives the run (``_stray_processes``);
3. the pool still serves: ``print(1)`` is ``ok`` on every worker, with no infra failure and no
   worker restart (``_aftermath``);
4. the next run is clean: a probe of the file system, environment and interpreter state on
   every worker matches what a fresh run saw before any test ran (``PROBE``).

One module-scoped ``Sandbox`` (the ``sb`` fixture) serves most tests of a module, so the
pool's survival across all of them is tested too. Tests that poison a worker on purpose,
where the sandbox is known not to contain it, use a private pool so the damage cannot spill
into other tests. Every run uses the same ``memory_mb``, so no test depends on a worker
changing its memory limit (see ``test_a_larger_memory_limit_needs_no_worker_restart``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import codegym
from codegym.sandbox import (
    ExecResult,
    Limits,
    Sandbox,
    Verdict,
)
from codegym.sandbox._uids import sandbox_uid, sandbox_uids
from codegym.sandbox.images.layers import layer_owner
from codegym.testing import await_until
from workspace_kit import WorkspaceSandbox

MEMORY_MB = 128
LIMITS = Limits(cpu_s=1, wall_s=3, memory_mb=MEMORY_MB, output_bytes=1 << 16)
SHORT = Limits(cpu_s=1, wall_s=1.5, memory_mb=MEMORY_MB, output_bytes=1 << 16)
UID = sandbox_uid() if os.geteuid() == 0 else os.geteuid()  # the first pool's first worker
# every uid a worker may run as: a claimed one, or the layer owner for workspaces
UIDS = {*sandbox_uids(), layer_owner()} if os.geteuid() == 0 else {os.geteuid()}
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
    the zygote), and between runs the zygote has up to three children with none of their
    own: its forker and its judge (once an assert test ran), in the zygote's pid
    namespace, and the next run's process, forked ahead in a pid namespace of its own and
    waiting for its request. Anything else that deep is a leftover, and so is a sandbox-uid
    process orphaned to one of our ancestors (init or a subreaper).
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
    prepared: dict[tuple[int, bool], list[int]] = {}  # (zygote, same pid ns) -> children
    parents = {p.ppid for p in procs.values()}
    for pid, p in procs.items():
        if p.uid not in UIDS or p.state in "ZX" or pid == me:
            continue
        depth, node = 0, p
        while node.ppid != me and node.ppid in procs and procs[node.ppid].uid in UIDS:
            node, depth = procs[node.ppid], depth + 1
        if node.ppid == me and depth == 3 and pid not in parents:
            forker = _pid_ns(pid) == _pid_ns(p.ppid)
            prepared.setdefault((p.ppid, forker), []).append(pid)
        elif (node.ppid == me and depth > 2) or (node.ppid != me and node.ppid in ancestors):
            stray.add((pid, p.cmdline))
    for (_, same_ns), children in prepared.items():
        keep = 2 if same_ns else 1  # forker and judge; the next run's process
        stray.update((pid, procs[pid].cmdline) for pid in children[keep:])
    return stray


def _pid_ns(pid: int) -> str:
    try:
        return os.readlink(f"/proc/{pid}/ns/pid")
    except OSError:
        return f"gone-{pid}"


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

    def reaped() -> bool:  # the run is over; a busy kernel may take a moment to reap
        nonlocal stray
        stray = _stray_processes() - snap.stray
        return not stray

    try:
        await await_until(reaped, timeout=15, what="the run's processes to be reaped")
    except TimeoutError:
        pass
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


# ---------------------------------------------------------------- pools (the fixtures: conftest.py)


@contextlib.asynccontextmanager
async def _private_sandbox(like: Sandbox) -> AsyncIterator[Sandbox]:
    """A one-worker pool for a test that may leave its worker damaged, of the same kind
    as ``like`` (plain, or running in workspaces: see ``workspace_kit``)."""
    image = getattr(like, "image", None)
    box = (
        WorkspaceSandbox(image, like.images, tier="jail", workers=1)
        if isinstance(like, WorkspaceSandbox)
        else Sandbox(tier="jail", workers=1)
    )
    async with box:
        (seen,) = await _probe_every_worker(box)
        assert seen == _baseline, _diff(seen, _baseline)
        yield box
