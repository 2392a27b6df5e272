"""The contract every sandbox tier implements.

A tier knows how to start one *worker*: a long-lived process that runs the zygote
(``_zygote.py``) with some isolation around it. Everything above that (framing, the pool,
deadlines, verdicts, recycling) is shared and lives in ``_worker.py`` and ``sandbox.py``.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import functools
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path

from codegym.sandbox import _bytecode as _bytecode_cache
from codegym.sandbox import _cgroups
from codegym.sandbox._cgroups import WorkerCgroup
from codegym.sandbox.errors import SandboxInputError

PACKAGE_DIR = Path(__file__).resolve().parent
ZYGOTE_DIR = "/opt/codegym"
"""Where the zygote's files are in a jail (tracebacks name them there)."""
ZYGOTE_FILES = ("_zygote.py", "_harness.py", "_stdio.py", "_plain.py", "_serve.py", "_judge.py")
DEFAULT_PRELOAD = (
    "abc",
    "array",
    "bisect",
    "collections",
    "copy",
    "dataclasses",
    "decimal",
    "fractions",
    "functools",
    "hashlib",
    "heapq",
    "io",
    "itertools",
    "json",
    "math",
    "operator",
    "random",
    "re",
    "statistics",
    "string",
    "sys",
    "time",
    "typing",
    "unittest",
    "numpy",
)
BASE_ENV = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "LANG": "C.UTF-8",
    "TZ": "UTC",
    "PYTHONHASHSEED": "0",
    "PYTHONDONTWRITEBYTECODE": "1",
}


@dataclass(frozen=True)
class WorkerSpec:
    """What the pool asks of a tier for one worker."""

    name: str
    """Unique name of the worker (used for cgroups and logs)."""
    session: bool = False
    """A session worker keeps one persistent workspace across runs."""
    session_disk_mb: int = 256
    layers: str | None = None
    """The image cache's layers folder, when the worker runs workspaces (see images)."""


@dataclass
class Launch:
    """How to start one worker process, and the zygote's configuration."""

    argv: list[str]
    env: dict[str, str]
    config: dict[str, object]
    uid: int | None = None
    """Host uid to run the worker as (when started as root)."""
    cgroup: WorkerCgroup | None = None
    cleanup: list[Path] = field(default_factory=list)
    """Paths to remove after the worker exits."""
    pass_fds: list[int] = field(default_factory=list)
    """Descriptors the worker process inherits; closed here once it has started."""
    uid_lock: int | None = None
    """The claim on ``uid`` (see ``claim_uid``), released when the worker stops."""
    kill_uid: bool = False
    """Kill every process of ``uid`` before its claim is released (``kill_uid``): for tiers
    whose programs can outlive their worker (no pid namespace to end them)."""


@functools.cache
def zygote_dir() -> Path:
    """A world-readable copy of the zygote files for this process.

    The sandbox uid must read them, and the source tree may sit under a directory it
    cannot enter (a clone in a 0700 temp dir, /root). Removed when the process exits.
    """
    d = Path(tempfile.mkdtemp(prefix=f"codegym_zygote_{os.getpid()}_"))
    (d / "__pycache__").mkdir(mode=0o700)
    for name, data in zygote_files().items():  # (d stays 0700 until all are written)
        (d / name).write_bytes(data)
        os.chmod(d / name, 0o644)
    os.chmod(d / "__pycache__", 0o755)
    os.chmod(d, 0o755)
    atexit.register(shutil.rmtree, d, True)
    return d


def zygote_memfds() -> dict[str, int]:
    """Each zygote file in a fresh memfd, for ``bwrap --file`` (by file name).

    Copied into the jail's own root this way, the files leave no mount whose source
    path (a host temp folder) ``/proc/self/mountinfo`` would show the program.
    """
    fds = {}
    for name, data in zygote_files().items():
        fd = os.memfd_create(os.path.basename(name))
        os.write(fd, data)
        os.lseek(fd, 0, 0)
        fds[name] = fd
    return fds


@functools.cache
def zygote_files() -> dict[str, bytes]:
    """Each zygote file by its path in the zygote's folder: the sources, and each one's
    bytecode in ``__pycache__`` (a checked-hash ``.pyc``, PEP 552), made once a process.

    The worker's interpreter imports the bytecode instead of compiling the sources (its
    flags forbid writing a cache), and compiling left about 5 MB of freed but retained
    heap in every zygote: memory each run's fork copies the page tables of and each
    run's exit unmaps. A worker whose interpreter has another cache tag or magic number
    ignores the files and compiles as before.
    """
    files = {}
    for name in ZYGOTE_FILES:
        source = (PACKAGE_DIR / name).read_bytes()
        files[name] = source
        pyc = f"__pycache__/{name[:-3]}.{sys.implementation.cache_tag}.pyc"
        files[pyc] = _bytecode(name, source)
    return files


def _bytecode(name: str, source: bytes) -> bytes:
    """``name``'s checked-hash .pyc (50–80 ms for all the zygote's files to compile),
    cached when codegym runs as root where only root can write (see ``_bytecode``)."""
    return _bytecode_cache.compiled(name, source, f"{ZYGOTE_DIR}/{name}")


def zygote_argv(python: str, folder: str) -> list[str]:
    """The worker's command: the zygote imported from ``folder`` (so from its bytecode; a
    script is always compiled from source) with the ``sys.path`` a script there has."""
    boot = f"import sys; sys.path[0] = {folder!r}; import _zygote; _zygote.main()"
    return [python, "-s", "-B", "-c", boot]


UID_SPAN = 256
"""Workers take their uids from ``sandbox_uid()`` up to this many above it."""


# Temp folders a pool makes carry the owner's pid; see sweep_stale.
_OWNED = re.compile(r"codegym(?:_zygote_|-gvisor-|-)(\d+)[-_]")


def sweep_stale() -> int:
    """Remove what pools of dead processes (``kill -9``) left: their cgroups and their temp
    folders (zygote copies, process-tier work dirs, gVisor bundles and state). Their
    processes are gone already: every worker dies with its owner (``--die-with-parent``,
    ``PR_SET_PDEATHSIG``), and every run and judge with its worker. Called when a pool
    starts; nothing of a live owner is touched. Returns how many items were removed."""
    removed = _cgroups.sweep_stale()
    with contextlib.suppress(OSError):
        for entry in Path(tempfile.gettempdir()).iterdir():
            m = _OWNED.match(entry.name)
            if m and entry.is_dir() and not _cgroups.pid_alive(int(m.group(1))):
                shutil.rmtree(entry, ignore_errors=True)
                removed += 1
    return removed


def sandbox_uid() -> int:
    """The first of the unprivileged host uids sandboxed programs run as (as root).

    Raises:
        SandboxInputError: ``CODEGYM_SANDBOX_UID`` is not a uid, or its span (and the
            layer owner's uid after it) reaches a system uid (below 1000: root's would let
            a program plant code every later run executes) or past the last uid.
    """
    raw = os.environ.get("CODEGYM_SANDBOX_UID") or "64055"  # set but empty: the default
    try:
        uid = int(raw)
    except ValueError:
        uid = -1
    if not 1000 <= uid <= (1 << 32) - 3 - UID_SPAN:
        raise SandboxInputError(
            f"CODEGYM_SANDBOX_UID={raw!r}: sandboxed programs need {UID_SPAN + 1} unused "
            f"unprivileged uids from it, none a system uid (below 1000); unset it for "
            "the default 64055"
        )
    return uid


def uid_problem() -> str | None:
    """Why the sandbox uids cannot be used (as root), or None."""
    if os.geteuid() != 0:
        return None
    try:
        sandbox_uid()
    except SandboxInputError as e:
        return str(e)
    return None


def sandbox_uids() -> range:
    """Every host uid a worker may run as when codegym runs as root."""
    return range(sandbox_uid(), sandbox_uid() + UID_SPAN)


UID_LOCKS = Path("/run/codegym-uids")
"""Where workers' uid claims are kept (``claim_uid``): root's ``/run``, not ``$TMPDIR``, so
no program can make the folder first in a shared ``/tmp`` and pools with different
``TMPDIR``s do not hand out the same uids (both found by review); ``$TMPDIR`` on hosts
without ``/run``."""


def claim_uid() -> tuple[int, int]:
    """A host uid no other live worker on this host runs as, and the lock that holds it.

    Per-user kernel limits (inotify instances, pending signals, message queues, the
    process count) are shared by every process of a uid, so one uid per worker keeps one
    run from starving a concurrent one. The claim is an ``flock`` on a file per uid: it
    ends when the holder closes it, or dies (``kill -9`` included).

    Raises:
        OSError: every uid of the span is taken (more than ``UID_SPAN`` live workers), or
            the lock folder is not ours alone (another uid made it first: in a shared /tmp
            it could hold every lock or point them anywhere).
    """
    locks = UID_LOCKS if UID_LOCKS.parent.is_dir() else Path(tempfile.gettempdir()) / "codegym-uids"
    try:
        locks.mkdir(mode=0o700, exist_ok=True)
        folder = os.open(locks, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as e:  # a link, a file or a FIFO of that name
        raise PermissionError(
            f"{locks} is not a folder of this user's alone ({e.strerror}); remove it and "
            "start again"
        ) from None
    try:
        st = os.fstat(folder)
        if st.st_uid != os.geteuid() or stat.S_IMODE(st.st_mode) & 0o077:
            raise PermissionError(
                f"{locks} is not a folder of this user's alone (uid {st.st_uid}, mode "
                f"{stat.S_IMODE(st.st_mode):o}); remove it and start again"
            )
        for uid in sandbox_uids():
            flags = os.O_CREAT | os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC
            fd = os.open(str(uid), flags, 0o600, dir_fd=folder)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            return uid, fd
    finally:
        os.close(folder)
    raise OSError(f"all {UID_SPAN} sandbox uids from {sandbox_uid()} are in use")


def kill_uid(uid: int) -> None:
    """Kill every process of the sandbox uid ``uid`` (as root; never the caller's own).

    A process-tier program that double-forks and calls ``setsid`` leaves its run's process
    group; it would live on as ``uid`` and could meddle with the runs of whichever worker
    claims ``uid`` next (found by review). ``kill(-1, SIGKILL)`` sent as ``uid`` reaches
    exactly the processes that uid may signal (every process whose real or saved uid it
    is, setuid programs it started included) but the sender, and a fork racing it fails
    once its parent has the signal pending. Repeated while it finds any, at most 50 times
    (zombies an unreaping parent keeps count as found).

    Raises:
        ValueError: ``uid`` is not one of the sandbox's uids.
    """
    if uid not in sandbox_uids() or uid == os.getuid():
        raise ValueError(f"uid {uid} is not a sandbox uid; refusing to kill its processes")
    sweep = "i=0; while [ $i -lt 50 ] && kill -s KILL -- -1 2>/dev/null; do i=$((i+1)); done"
    subprocess.run(
        ["/bin/sh", "-c", sweep],
        user=uid,
        group=uid,
        extra_groups=[],
        env={"PATH": BASE_ENV["PATH"]},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        timeout=30,
        check=False,
    )


def find_python(explicit: str | None = None) -> str | None:
    """The interpreter that runs inside the sandbox: the system Python by default.

    Not the virtual environment's: the jail exposes only /usr, never the project tree.
    An interpreter named explicitly (``python=`` or ``$CODEGYM_SANDBOX_PYTHON``) must exist:
    running the system's instead would be silently not what was asked.

    Raises:
        SandboxInputError: the named interpreter is not there.
    """
    for what, cand in (("python=", explicit), ("$CODEGYM_SANDBOX_PYTHON", os.environ.get(
            "CODEGYM_SANDBOX_PYTHON"))):  # fmt: skip
        if cand:
            if not Path(cand).is_file():
                raise SandboxInputError(
                    f"{what} {cand!r}: no such interpreter; give the path of an existing "
                    "python3 (or leave it unset for /usr/bin/python3)"
                )
            return cand
    if Path("/usr/bin/python3").exists():
        return "/usr/bin/python3"
    return shutil.which("python3")


class Tier(ABC):
    """One isolation strategy."""

    name: str

    @abstractmethod
    def problems(self) -> list[str]:
        """What this host lacks for this tier; empty when the tier can run."""

    @abstractmethod
    def launch(self, spec: WorkerSpec) -> Launch:
        """How to start the worker described by ``spec``."""

    @property
    def warning(self) -> str | None:
        """A warning to show loudly when this tier is used."""
        return None
