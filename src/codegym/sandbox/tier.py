"""The contract every sandbox tier implements.

A tier knows how to start one *worker*: a long-lived process that runs the zygote
(``_zygote.py``) with some isolation around it. Everything above that (framing, the pool,
deadlines, verdicts, recycling) is shared and lives in ``_worker.py`` and ``sandbox.py``.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import os
import re
import shutil
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
    sweep: bool = False
    """Kill every process of ``uid`` (``_uids.sweep_uid``) before the worker starts and
    before its claim is released: for tiers whose programs can outlive their worker (no
    pid namespace to end them)."""


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
