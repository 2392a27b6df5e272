"""The host uids sandboxed programs run as when codegym runs as root, and their claims.

From ``sandbox_uid()`` (``$CODEGYM_SANDBOX_UID``) on, ``2 * UID_SPAN + 2`` uids:

- ``sandbox_uids()``: the ``jail`` workers', one per live worker (``claim_uid``; gVisor's
  run as its own kernel's users);
- the image layers' owner (``images.layers.layer_owner``), which workspace workers run as;
- ``sweeper_uid()``: no program ever runs as it (see ``sweep_uid``);
- ``process_uids()``: the ``process`` tier's workers'. That tier has no pid namespace, so a
  program's daemon can outlive its worker; its uids are never a jail's, so such a daemon
  never shares a uid with a jail's ``bwrap`` (whose memory it could then write through
  ``/proc``, found by review), and each is swept (``sweep_uid``) when a worker claims it
  and when it lets it go.

None of them may belong to a local user or group, or lie in a range systemd hands out
(``RESERVED``): a program would run as that account, and a sweep would kill its processes.
The default, 2,000,000,000, is in the range systemd leaves unused (1879048192-2147352575);
until 2026-12-06 it was 64055, ``libvirt-qemu`` on some Debian and Ubuntu hosts and inside
systemd's ``DynamicUser=`` range (image layers of that owner are adopted on first use:
``images.adopt``).
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import logging
import os
import select
import signal
import stat
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from codegym.errors import CodegymError
from codegym.sandbox.errors import SandboxInputError

log = logging.getLogger("codegym.sandbox")

UID_SPAN = 256
"""Workers of the jail tier take their uids from ``sandbox_uid()`` up to this
many above it; the process tier's take as many after the layer owner and the sweeper."""
UIDS_NEEDED = 2 * UID_SPAN + 2
DEFAULT_UID = 2_000_000_000
RESERVED = (
    (60001, 60577, "systemd-homed's users and the users systemd-nspawn binds in"),
    (61184, 65519, "systemd's DynamicUser= range"),
    (65534, 65535, "nobody and the 16-bit -1"),
    (524288, 1879048191, "systemd's range for containers' uids"),
    (2147352576, 2147418111, "systemd's foreign-uid range"),
    (2147483648, (1 << 32) - 1, "uids from 2^31, which tools that read uids as signed get wrong"),
)
"""Ranges a span may not touch: ids in them belong to accounts in no file (systemd makes
them as services and containers start), or are special. Their bounds are inclusive."""


def sandbox_uid() -> int:
    """The first of the unprivileged host uids sandboxed programs run as (as root).

    Raises:
        SandboxInputError: ``CODEGYM_SANDBOX_UID`` is not a uid, or its span reaches a
            system uid (below 1000: root's would let a program plant code every later run
            executes) or past the last uid.
    """
    raw = os.environ.get("CODEGYM_SANDBOX_UID") or str(DEFAULT_UID)  # set but empty: default
    try:
        uid = int(raw)
    except ValueError:
        uid = -1
    if not 1000 <= uid <= (1 << 32) - 2 - UIDS_NEEDED:
        raise SandboxInputError(
            f"CODEGYM_SANDBOX_UID={raw!r}: sandboxed programs need {UIDS_NEEDED} unused "
            f"unprivileged uids from it, none a system uid (below 1000); unset it for "
            f"the default {DEFAULT_UID}"
        )
    return uid


def sandbox_uids() -> range:
    """Every host uid a jail worker may run as when codegym runs as root."""
    return range(sandbox_uid(), sandbox_uid() + UID_SPAN)


def sweeper_uid() -> int:
    """The real and saved uid of a sweep (``sweep_uid``), which no program runs as."""
    return sandbox_uid() + UID_SPAN + 1


def process_uids() -> range:
    """Every host uid a process-tier worker may run as when codegym runs as root."""
    first = sandbox_uid() + UID_SPAN + 2
    return range(first, first + UID_SPAN)


def uid_problem() -> str | None:
    """Why the sandbox uids cannot be used (as root), or None."""
    if os.geteuid() != 0:
        return None
    try:
        first = sandbox_uid()
    except SandboxInputError as e:
        return str(e)
    last = first + UIDS_NEEDED - 1
    for lo, hi, what in RESERVED:
        if lo <= last and first <= hi:
            return (
                f"CODEGYM_SANDBOX_UID={first}: its {UIDS_NEEDED} uids reach {what} "
                f"({lo}-{hi}), where accounts come and go in no file; set "
                f"CODEGYM_SANDBOX_UID to the first of {UIDS_NEEDED} unused uids outside it, "
                f"e.g. the default {DEFAULT_UID}"
            )
    taken = _local_account(first, first + UIDS_NEEDED)
    if taken is not None:
        uid, name, where = taken
        return (
            f"uid {uid} is {name!r} in {where}, but sandboxed programs would run as it "
            f"(the {UIDS_NEEDED} uids from CODEGYM_SANDBOX_UID={first}); set "
            "CODEGYM_SANDBOX_UID to the first of as many unused uids, e.g. 1900000000"
        )
    return None


ACCOUNT_FILES = ("/etc/passwd", "/etc/group", "/etc/subuid", "/etc/subgid")


@functools.cache
def _local_account(lo: int, hi: int) -> tuple[int, str, str] | None:
    """The first uid (or gid: a worker's group is its uid) in ``[lo, hi)`` that a local
    account or group has, or a subordinate range (rootless containers' host uids) covers,
    as (id, name, file). Only the local files: asking NSS for 514 ids could wait on a
    directory server each time. (systemd's ``DynamicUser=`` uids, in no file: ``RESERVED``.)"""
    for where in ACCOUNT_FILES:
        try:
            lines = Path(where).read_text(errors="replace").splitlines()
        except OSError:
            continue
        for line in lines:
            fields = line.split(":")
            if Path(where).name.startswith("sub"):  # name:first:count
                if len(fields) == 3 and fields[1].isdigit() and fields[2].isdigit():
                    first, count = int(fields[1]), int(fields[2])
                    if first < hi and lo < first + count:
                        return max(first, lo), f"{fields[0]}'s subordinate ids", where
            elif len(fields) > 2 and fields[2].isdigit() and lo <= int(fields[2]) < hi:
                return int(fields[2]), fields[0], where
    return None


UID_LOCKS = Path("/run/codegym-uids")
"""Where workers' uid claims are kept (``claim_uid``): root's ``/run``, not ``$TMPDIR``, so
no program can make the folder first in a shared ``/tmp`` and pools with different
``TMPDIR``s do not hand out the same uids (both found by review); ``$TMPDIR`` on hosts
without ``/run``."""


def _lock_folder() -> int:
    """The lock folder, opened; made if missing.

    Raises:
        PermissionError: it is not ours alone (another uid made it first: in a shared /tmp
            it could hold every lock or point them anywhere), or not a folder.
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
    st = os.fstat(folder)
    if st.st_uid != os.geteuid() or stat.S_IMODE(st.st_mode) & 0o077:
        os.close(folder)
        raise PermissionError(
            f"{locks} is not a folder of this user's alone (uid {st.st_uid}, mode "
            f"{stat.S_IMODE(st.st_mode):o}); remove it and start again"
        )
    return folder


def _lock(
    folder: int, name: str, wait: bool, shared: bool = False, create: bool = True
) -> int | None:
    """An ``flock`` on the file ``name`` in the lock folder: its fd, or None if held."""
    flags = (os.O_CREAT if create else 0) | os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(name, flags, 0o600, dir_fd=folder)
    how = fcntl.LOCK_SH if shared else fcntl.LOCK_EX
    try:
        fcntl.flock(fd, how | (0 if wait else fcntl.LOCK_NB))
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


_registered: dict[tuple[str, int], int] = {}  # (lock folder, base) -> its lock, held until exit


@contextlib.contextmanager
def spans_held() -> Iterator[int]:
    """Hold off every span registration on the host (``register_span``); yields the lock
    folder's descriptor, for ``live_span_of``."""
    folder = _lock_folder()
    turn = _lock(folder, "spans", wait=True)
    try:
        yield folder
    finally:
        if turn is not None:
            os.close(turn)
        os.close(folder)


def register_span() -> None:
    """Mark this process's span (from ``sandbox_uid()``) as in use, until it exits; refuse
    a span that overlaps a live process's other span.

    Two pools whose ``CODEGYM_SANDBOX_UID`` differ by less than ``UIDS_NEEDED`` share uids
    in different roles: one's workers, or its workspace workers (the layer owner, never
    claimed), could be the other's sweeper, and signal or stop its sweeps (found by
    review). Each base is a file in the lock folder, locked shared by every process using
    it. Registrations are one at a time on the host (the ``spans`` lock), so two processes
    cannot both find the other's span free; a span file no live process holds is left
    from a dead one and removed then (no one can be opening it meanwhile).

    Raises:
        PermissionError: another live process uses an overlapping span (says whose and
            the fix), or the lock folder is not ours alone.
    """
    base = sandbox_uid()
    if (str(UID_LOCKS), base) in _registered:
        return
    with spans_held() as folder:
        for name in os.listdir(folder):
            other = int(name[5:]) if name.startswith("span-") and name[5:].isdigit() else None
            if other is None:
                continue
            fd = _lock(folder, name, wait=False)
            if fd is not None:  # no live process holds it
                os.unlink(name, dir_fd=folder)
                os.close(fd)
            elif other != base and abs(other - base) < UIDS_NEEDED:
                raise PermissionError(
                    f"CODEGYM_SANDBOX_UID={base}: a live process runs sandboxes on the "
                    f"{UIDS_NEEDED} uids from {other}, which overlap these; give each "
                    f"CODEGYM_SANDBOX_UID at least {UIDS_NEEDED} from any other"
                )
        mine = _lock(folder, f"span-{base}", wait=True, shared=True)
        assert mine is not None
        _registered[str(UID_LOCKS), base] = mine


def live_span_of(uid: int, held: int | None = None) -> int | None:
    """The base of a live process's registered span (``register_span``) that holds
    ``uid``, or None. ``held``: the folder ``spans_held`` yielded, if the caller holds it
    (else it is taken here: a probe beside a registration could fail it)."""
    if held is None:
        with spans_held() as folder:
            return live_span_of(uid, folder)
    for name in os.listdir(held):
        base = int(name[5:]) if name.startswith("span-") and name[5:].isdigit() else None
        if base is None or not base <= uid < base + UIDS_NEEDED:
            continue
        if (str(UID_LOCKS), base) in _registered:
            return base
        fd = _lock(held, name, wait=False, create=False)
        if fd is None:
            return base
        os.close(fd)
    return None


def running_as(
    lo: int, hi: int, ignore: Callable[[int], bool] = lambda uid: False
) -> tuple[int, str, int] | None:
    """(pid, name, uid) of a live process whose real, effective, saved or file-system uid
    is in ``[lo, hi)`` and not ``ignore``d, or None (codegym versions before span
    registration did not register)."""
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/status") as f:
                fields = dict(line.split(":", 1) for line in f if ":" in line)
        except (OSError, ValueError):
            continue  # gone meanwhile
        for uid in {int(u) for u in fields.get("Uid", "").split()}:
            if lo <= uid < hi and not ignore(uid):
                return int(pid), fields.get("Name", "").strip(), uid
    return None


def claim_uid(uids: range | None = None) -> tuple[int, int]:
    """A host uid of ``uids`` (default ``sandbox_uids()``) no other live worker on this
    host runs as, and the lock that holds it.

    Per-user kernel limits (inotify instances, pending signals, message queues, the
    process count) are shared by every process of a uid, so one uid per worker keeps one
    run from starving a concurrent one. The claim is an ``flock`` on a file per uid: it
    ends when the holder closes it, or dies (``kill -9`` included).

    Raises:
        OSError: every uid of the span is taken (more than ``UID_SPAN`` live workers), or
            the lock folder is not ours alone (``PermissionError``).
    """
    span = sandbox_uids() if uids is None else uids
    register_span()
    folder = _lock_folder()
    try:
        for uid in span:
            fd = _lock(folder, str(uid), wait=False)
            if fd is not None:
                return uid, fd
    finally:
        os.close(folder)
    raise OSError(f"all {len(span)} sandbox uids from {span.start} are in use")


class SweepFailed(CodegymError, OSError):
    """A sweep (``sweep_uid``) did not end, or left a live process of the uid."""


# Run by a fresh interpreter started as root, which takes the sweeper's uid as its real and
# saved uid and the swept uid as its effective one, and never execs after (an exec would
# make the saved uid the effective one, and the swept uid's processes could signal it).
_SWEEP = """
import os, sys, time
sweeper, uid = int(sys.argv[1]), int(sys.argv[2])
os.setgroups([])
os.setresgid(sweeper, sweeper, sweeper)
os.setresuid(sweeper, uid, sweeper)

def alive():
    for pid in filter(str.isdigit, os.listdir("/proc")):
        if int(pid) == os.getpid():
            continue
        try:
            with open(f"/proc/{pid}/status") as f:
                status = dict(line.split(":", 1) for line in f if ":" in line)
        except (OSError, ValueError):
            continue  # gone meanwhile
        state = status.get("State", "").strip()
        pending = int(status.get("SigPnd", "0"), 16) | int(status.get("ShdPnd", "0"), 16)
        if pending & (1 << 8) or state.startswith(("Z", "X")):
            continue  # dead, or dies when its system call returns (a sync, a slow disk)
        if str(uid) in status.get("Uid", "").split()[:3]:
            yield pid

end = time.monotonic() + 10
while True:
    os.kill(-1, 9)  # as the effective uid: every process it may signal, but this one
    left = next(alive(), None)
    if left is None:
        sys.exit(0)
    if time.monotonic() > end:
        sys.exit(f"process {left} of uid {uid} is still alive after 10 s of SIGKILLs")
    time.sleep(0.005)  # a killed process is alive until it is next scheduled
"""


def sweep_uid(uid: int) -> None:
    """Kill every process of the process-tier uid ``uid`` (as root; blocks up to 30 s).

    A program that double-forks and calls ``setsid`` leaves its run's process group and
    would live on as ``uid``, into the runs of whichever worker claims ``uid`` next (found
    by review). ``kill(-1, SIGKILL)`` with ``uid`` as the effective uid reaches every
    process whose real or saved uid it is (setuid programs they started included), and a
    fork racing it fails once its parent has the signal pending; it is repeated until
    ``/proc`` shows no live process of ``uid`` (at most 10 s). The sender's real and saved
    uid is ``sweeper_uid()``, so no process of ``uid`` can signal, stop or read it (a
    review's daemon stopped and killed a sweeper that ran as ``uid``). It starts as a
    real-time process (``SCHED_FIFO``, where the host allows it): a second review's daemon
    starved a sweeper of CPU for 30 s through a scheduler fault of this VM's kernel. Its
    ``kill(-1)`` also reaches the sweeper uid's processes, so sweeps are one at a time on
    the host, and the sweeper uid's lock is held meanwhile: a pool whose span overlaps
    this one's cannot have a worker of that uid (a review's overlapping pools killed each
    other's workers).

    Raises:
        ValueError: ``uid`` is not a process-tier uid.
        SweepFailed: the sweep could not run, did not end in time, or left a live process;
            or the sweeper's uid is a live worker's (spans of two pools overlap).
    """
    if uid not in process_uids():
        raise ValueError(f"uid {uid} is not a process-tier uid; refusing to kill its processes")
    sweeper = sweeper_uid()
    folder = _lock_folder()
    try:
        turn = _lock(folder, "sweep", wait=True)
        assert turn is not None
        # a worker being started forks with every fd until its exec, an earlier sweep's
        # lock of this uid among them: held for milliseconds, not for a worker's life
        deadline = time.monotonic() + 2
        while (mine := _lock(folder, str(sweeper), wait=False)) is None:
            if time.monotonic() > deadline:
                break
            time.sleep(0.01)
    finally:
        os.close(folder)
    try:
        if mine is None:
            raise SweepFailed(
                f"sweeping uid {uid}: the sweeper's uid {sweeper} is a live worker's (another "
                "pool's CODEGYM_SANDBOX_UID span overlaps this one's); give pools spans "
                f"{UIDS_NEEDED} apart"
            )
        code, said = _run_sweeper(sweeper, uid)
        if code != 0:
            raise SweepFailed(f"sweeping uid {uid}: exit {code}: {said}")
    finally:
        for fd in (mine, turn):  # the next sweep's turn only once this one's uid is free
            if fd is not None:
                os.close(fd)


def _run_sweeper(sweeper: int, uid: int) -> tuple[int, str]:
    """Run ``_SWEEP``; its exit status (negative: the signal) and the end of its stderr."""
    r, w = os.pipe()
    argv = [sys.executable, "-I", "-S", "-c", _SWEEP, str(sweeper), str(uid)]
    actions = [
        (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
        (os.POSIX_SPAWN_OPEN, 1, os.devnull, os.O_WRONLY, 0),
        (os.POSIX_SPAWN_DUP2, w, 2),
    ]
    try:
        try:
            fifo = (os.SCHED_FIFO, os.sched_param(1))  # (it forks nothing)
            pid = os.posix_spawn(argv[0], argv, {}, file_actions=actions, scheduler=fifo)
        except PermissionError:  # no CAP_SYS_NICE (a container): as an ordinary process
            pid = os.posix_spawn(argv[0], argv, {}, file_actions=actions)
    except OSError as e:
        os.close(r)
        raise SweepFailed(f"sweeping uid {uid}: {e}") from None
    finally:
        os.close(w)
    with os.fdopen(r, "rb") as err:
        ended = _wait(pid, 30)
        if not ended:
            os.kill(pid, signal.SIGKILL)
        _, status = os.waitpid(pid, 0)
        os.set_blocking(r, False)
        said = (err.read(4096) or b"").decode(errors="replace").strip()[-300:]
    if not ended:
        return -signal.SIGKILL, f"no end within 30 s {said}".strip()
    return os.waitstatus_to_exitcode(status), said


def _wait(pid: int, timeout: float) -> bool:
    """Whether child ``pid`` ended within ``timeout`` seconds (not reaped)."""
    fd = os.pidfd_open(pid)
    try:
        return bool(select.select([fd], [], [], timeout)[0])
    finally:
        os.close(fd)


_quarantined: list[int] = []


def quarantine(uid: int, lock: int, why: str) -> None:
    """Keep ``uid`` claimed for as long as this process lives: a sweep failed, so a
    program's process may still run as it, and no other worker may get it."""
    _quarantined.append(lock)
    log.warning("sandbox uid %d kept out of use until this process exits: %s", uid, why)
