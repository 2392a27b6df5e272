"""Per-worker cgroup slots (cgroup v1 and v2).

Each worker gets a cgroup ``W`` that holds its zygote, with backstop limits, and a child
slot ``W/run`` that each execution enters before the program starts. The host writes the
slot's limits before every run and reads its counters after; the jail can only move
processes into the slot (its ``cgroup.procs`` is delegated), never change limits.

On cgroup v2 moving a process also needs write access to the common ancestor, so ``W``'s
``cgroup.procs`` is delegated too: a program could step from the slot back into ``W``,
where ``W``'s backstop limits still hold it.
"""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path("/sys/fs/cgroup")
V1_CONTROLLERS = ("memory", "pids", "cpuacct")


def version() -> int | None:
    """2 for a unified hierarchy with memory+pids, 1 for v1 controllers, else None."""
    controllers = ROOT / "cgroup.controllers"
    if controllers.exists():
        have = controllers.read_text().split()
        return 2 if {"memory", "pids"} <= set(have) else None
    if all((ROOT / c / "cgroup.procs").exists() for c in V1_CONTROLLERS):
        return 1
    return None


def usable() -> str | None:
    """None when we can create cgroups here, else what is missing."""
    v = version()
    if v is None:
        return "no cgroup hierarchy with the memory and pids controllers at /sys/fs/cgroup"
    probe = _base(v)[0]
    try:
        probe.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        return f"cannot create cgroups under {probe} ({e.strerror}); run as root or delegate it"
    return None


def _base(v: int) -> list[Path]:
    if v == 1:
        return [ROOT / c / "codegym" for c in V1_CONTROLLERS]
    own = _own_v2_cgroup()
    return [own / "codegym" if own != ROOT else ROOT / "codegym"]


def _own_v2_cgroup() -> Path:
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        if line.startswith("0::"):
            return ROOT / line[3:].lstrip("/")
    return ROOT


def _write(path: Path, value: str) -> None:
    with open(path, "w") as f:
        f.write(value)


def _remove(path: Path) -> None:
    for _ in range(50):  # rmdir right after the last exit can fail with EBUSY: retry
        try:
            path.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.01)


def sweep_stale() -> int:
    """Remove worker cgroups whose owning process is gone.

    A worker cgroup is named ``<owner pid>-<tag>-w<i>``; ``WorkerCgroup.remove`` deletes it
    on close, but an owner killed with SIGKILL never closes, and the empty directories pile
    up. A directory is removed only when its owner pid no longer exists and it holds no
    process (the kernel refuses rmdir otherwise), so a live pool is never touched. Returns
    how many were removed.
    """
    v = version()
    if v is None:
        return 0
    removed = 0
    for base in _base(v):
        with contextlib.suppress(OSError):
            for d in base.iterdir():
                owner = d.name.split("-", 1)[0]
                if not (d.is_dir() and owner.isdigit()) or pid_alive(int(owner)):
                    continue
                with contextlib.suppress(OSError):
                    (d / "run").rmdir()
                with contextlib.suppress(OSError):
                    d.rmdir()
                    removed += 1
    return removed


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@dataclass
class Stats:
    cpu_s: float | None
    peak_bytes: int | None
    oom_kills: int


class WorkerCgroup:
    """The cgroup of one worker and its run slot."""

    def __init__(self, name: str, uid: int, backstop_memory_mb: int, backstop_pids: int) -> None:
        v = version()
        if v is None:
            raise OSError("no usable cgroup hierarchy")
        self.v = v
        self.uid = uid
        self.dirs = [b / name for b in _base(v)]
        self._limits: tuple[int, int] | None = None
        self._last: Stats | None = None
        self._fds: dict[tuple[Path, int], int] = {}  # counter files kept open: pread is 15x cheaper
        self._paths: dict[tuple[str, str], Path] = {}  # built once: a Path costs ~5 us per run
        for d in self.dirs:
            (d / "run").mkdir(parents=True, exist_ok=True)
        if v == 2:
            parent = self.dirs[0].parent
            with contextlib.suppress(OSError):
                _write(parent / "cgroup.subtree_control", "+memory +pids +cpu")
            with contextlib.suppress(OSError):
                _write(self.dirs[0] / "cgroup.subtree_control", "+memory +pids +cpu")
        self._set(self.dirs, backstop_memory_mb << 20, backstop_pids)
        for path in self.delegated():
            os.chown(path, uid, -1)

    # -- paths -----------------------------------------------------------

    def _ctl(self, controller: str, slot: bool = True) -> Path:
        d = self.dirs[V1_CONTROLLERS.index(controller)] if self.v == 1 else self.dirs[0]
        return d / "run" if slot else d

    def _slot_file(self, controller: str, name: str) -> Path:
        path = self._paths.get((controller, name))
        if path is None:
            path = self._paths[controller, name] = self._ctl(controller) / name
        return path

    def procs(self) -> list[Path]:
        """cgroup.procs of the worker cgroup(s): where the zygote is placed."""
        return [d / "cgroup.procs" for d in self.dirs]

    def slot_procs(self) -> list[Path]:
        """cgroup.procs of the run slot(s): each execution writes itself there."""
        return [d / "run" / "cgroup.procs" for d in self.dirs]

    def counters(self) -> dict[str, Path]:
        """The slot's CPU and OOM-kill counters, by the name the zygote reads them under
        (``cpu_ns``: v1 ``cpuacct.usage``; ``cpu_stat``: v2 ``cpu.stat``; ``oom``)."""
        if self.v == 1:
            return {
                "cpu_ns": self._ctl("cpuacct") / "cpuacct.usage",
                "oom": self._ctl("memory") / "memory.oom_control",
            }
        return {
            "cpu_stat": self._ctl("cpu") / "cpu.stat",
            "oom": self._ctl("memory") / "memory.events",
        }

    def delegated(self) -> list[Path]:
        files = self.slot_procs()
        return files + (self.procs() if self.v == 2 else [])

    # -- limits and counters --------------------------------------------

    def _set(self, dirs: list[Path], memory: int, pids: int) -> None:
        if self.v == 1:
            mem, pid = dirs[0], dirs[1]
            memsw = mem / "memory.memsw.limit_in_bytes"
            # memsw must stay >= the memory limit: raise it first, lower it last
            with contextlib.suppress(OSError):  # no swap accounting on some kernels
                _write(memsw, str(max(memory, int(memsw.read_text()))))
            _write(mem / "memory.limit_in_bytes", str(memory))
            with contextlib.suppress(OSError):
                _write(memsw, str(memory))
            _write(pid / "pids.max", str(pids))
        else:
            _write(dirs[0] / "memory.max", str(memory))
            with contextlib.suppress(OSError):
                _write(dirs[0] / "memory.swap.max", "0")
            _write(dirs[0] / "pids.max", str(pids))

    def prepare(self, memory_mb: int, max_processes: int) -> None:
        """Set the slot's limits for the next run and reset its peak counter."""
        want = (memory_mb << 20, max_processes)
        if want != self._limits:
            self._set([d / "run" for d in self.dirs], *want)
            self._limits = want
        peak = "memory.max_usage_in_bytes" if self.v == 1 else "memory.peak"
        with contextlib.suppress(OSError):  # v2: resettable since Linux 6.12
            os.pwrite(self._fd(self._slot_file("memory", peak), os.O_WRONLY), b"0", 0)

    def _fd(self, path: Path, flags: int = os.O_RDONLY) -> int:
        fd = self._fds.get((path, flags))
        if fd is None:
            fd = self._fds[path, flags] = os.open(path, flags | os.O_CLOEXEC)
        return fd

    def _read(self, path: Path) -> bytes:
        return os.pread(self._fd(path), 4096, 0)

    def stats(self) -> Stats:
        def read(controller: str, name: str) -> bytes:
            return self._read(self._slot_file(controller, name))

        if self.v == 1:
            cpu_ns = int(read("cpuacct", "cpuacct.usage"))
            peak1 = int(read("memory", "memory.max_usage_in_bytes"))
            oom1 = _keyed(read("memory", "memory.oom_control")).get("oom_kill", 0)
            return Stats(cpu_ns / 1e9, peak1, oom1)
        cpu_us: int | None = _keyed(read("cpu", "cpu.stat")).get("usage_usec")
        try:
            peak: int | None = int(read("memory", "memory.peak"))
        except FileNotFoundError:  # before Linux 5.19
            peak = None
        oom = _keyed(read("memory", "memory.events")).get("oom_kill", 0)
        return Stats(cpu_us / 1e6 if cpu_us is not None else None, peak, oom)

    def charged_bytes(self) -> int:
        """Memory charged to the slot while nothing runs in it: the tmpfs pages of kept
        workspaces its runs wrote (and reclaimable cache)."""
        name = "memory.usage_in_bytes" if self.v == 1 else "memory.current"
        return int(self._read(self._slot_file("memory", name)))

    def run_stats(self) -> Stats:
        """The counters of the run that just ended (deltas since the previous call).

        Nothing runs in the slot between two runs, so the previous reading is the
        baseline of this one: one read per counter per run.
        """
        now = self.stats()
        before = self._last or Stats(0.0, 0, 0)
        self._last = now
        cpu = None
        if now.cpu_s is not None and before.cpu_s is not None:
            cpu = now.cpu_s - before.cpu_s
        return Stats(cpu, now.peak_bytes, now.oom_kills - before.oom_kills)

    def remove(self) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()
        for d in self.dirs:
            _remove(d / "run")
            _remove(d)


def _keyed(text: bytes) -> dict[str, int]:
    """``key value`` lines (memory.events, cpu.stat, memory.oom_control) as a dict."""
    out: dict[str, int] = {}
    for line in text.decode().splitlines():
        k, _, v = line.partition(" ")
        with contextlib.suppress(ValueError):
            out[k] = int(v)
    return out
