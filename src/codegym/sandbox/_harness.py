"""What runs inside the run's first process, E (standard library only).

Executed by the jail's interpreter next to ``_zygote.py``. E runs one program (``exec``,
``python``), or runs a program and then answers an assert test's judge (``serve``; the
test itself runs in the judge, see ``_judge``), or supervises a batch of stdin/stdout
cases, each in a child (``_stdio``), reporting each case's fate and output on fd 3.

The result channel (fd 3) is writable by the program in the modes where the program is
E itself, so every line the harness writes on it is signed: ``\n<32 hex of HMAC-SHA256>
<payload>\n``, keyed by a fresh per-run secret the zygote makes before the fork
(``Channel``). The zygote keeps the key in its own process and accepts only lines that
verify. In those modes the channel carries only pid 1's death mark (a forged one is
ignored); with stdio cases E supervises and the program runs in children that have no
fd 3 at all. The set-up mark goes on fd 4, which E closes before the program starts.
"""

from __future__ import annotations

import atexit
import builtins
import ctypes
import errno
import hmac
import json
import os
import re
import resource
import select
import signal
import stat
import sys
import threading
import traceback
import types

RESULT_FD = 3  # results of stdio cases, and the signed death mark of pid 1
MARK_FD = RESULT_FD
# fd 4: set-up done ("R"), or the upload that failed ("F..."); E closes it before the program
CALL_FD = 6  # serve mode: the socket to the assert test's judge
_TAG_HEX = 32  # 128 bits of HMAC-SHA256: unforgeable without the key, short on the wire
_HEX = re.compile(rb"[0-9a-f]{%d}" % _TAG_HEX)
# a genuine SIGXCPU lands at the rlimit by the kernel's tick-sampled clock, which on a
# busy VM runs ahead of rusage (0.84-0.99 of the limit measured); see _verdict.py
XCPU_MIN_FRACTION = 0.5
SYS_CLONE = 56  # x86_64
_libc = ctypes.PyDLL(None, use_errno=True)  # PyDLL: the GIL stays held across fork/clone


FATAL_BY_DEFAULT = (
    signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2,
    signal.SIGALRM, signal.SIGXCPU, signal.SIGXFSZ, signal.SIGVTALRM, signal.SIGPROF,
    signal.SIGABRT,
)  # fmt: skip


class Channel:
    """The signing side of the result channel, holding this run's key.

    Built in the program process from the one-element list the zygote hands over, whose
    bytearray it takes (the zygote reads the key straight into it: no immutable copy,
    freed or not, is left in the process), so the key lives on only inside this object,
    which ``wipe`` zeroes in a child that runs a program.
    """

    __slots__ = ("_key",)

    def __init__(self, secret: list) -> None:
        raw = secret.pop()
        self._key = raw if type(raw) is bytearray else bytearray(raw)

    def sign(self, payload: bytes) -> bytes:
        return b"\n" + _tag(self._key, payload) + b" " + payload + b"\n"

    def report(self, result: dict, fd: int = RESULT_FD) -> None:
        os.write(fd, self.sign(json.dumps(result).encode()))

    def wipe(self) -> None:
        """Zero the key in this process (a fork about to run a program that needs none)."""
        self._key[:] = bytes(len(self._key))


def _tag(key: bytes | bytearray, payload: bytes) -> bytes:
    return hmac.digest(key, payload, "sha256").hex()[:_TAG_HEX].encode()


def verified(raw: bytes, key: bytes | bytearray) -> tuple[list[bytes], bool]:
    """The payloads of the lines in ``raw`` signed with ``key``, and whether anything
    else (a forgery, or a stray write by the program) was there too.

    Linear in ``len(raw)`` whatever the program wrote (a regular expression over it
    backtracked quadratically on a megabyte of would-be tags with no newline, holding the
    zygote for minutes). A signed line starts with a newline of its own (``sign``), so
    bytes a program left without one cannot hide it.
    """
    good: list[bytes] = []
    stray = False
    for line in raw.split(b"\n"):
        if len(line) > _TAG_HEX and line[_TAG_HEX] == 32 and _HEX.fullmatch(line[:_TAG_HEX]):
            payload = line[_TAG_HEX + 1 :]
            if hmac.compare_digest(line[:_TAG_HEX], _tag(key, payload)):
                good.append(payload)
                continue
        stray = stray or bool(line.strip())
    return good, stray


def death_handler(channel: Channel):  # -> Callable[[int, object], None]
    """A handler acting out a fatal signal's default action for pid 1.

    The kernel ignores such signals for pid 1 of a namespace (the program process), so
    the zygote installs this there: it leaves a signed mark on fd 4, so the zygote
    reports the signal rather than an exit status, and exits.
    """

    def die(signum: int, frame: object) -> None:
        try:
            os.write(MARK_FD, channel.sign(b"S%d" % signum))
        except OSError:
            pass
        os._exit(128 + signum)

    die.codegym_die = True  # type: ignore[attr-defined]
    return die


_MARK = re.compile(rb"S\d{1,2}")


def death_signal(marks: bytes, key: bytes | bytearray) -> int | None:
    """The signal a genuine death mark in ``marks`` names; forged marks are ignored."""
    for payload in verified(marks, key)[0]:
        if _MARK.fullmatch(payload):
            return int(payload[1:])
    return None


_WHY = {
    errno.ELOOP: "a folder on its path is a symbolic link (never followed)",
    errno.ENOTDIR: "something on its path is not a folder (or is a symbolic link)",
    errno.ENXIO: "it exists and is not a regular file",
    errno.EISDIR: "it is a folder",
    errno.ENOSPC: "No space left on the workspace",
}


def write_files(root: str, files: list, blobs: list[bytes]) -> str | None:
    """Write uploads under ``root`` without following symlinks; None, or what failed.

    Every component is opened relative to its parent with ``O_NOFOLLOW``, so a folder a
    program replaced by a symlink (in a session) refuses the upload instead of sending it
    elsewhere; a FIFO or device where a file should be is refused too (opened
    non-blocking, then checked).
    """
    for path, idx, mode in files:
        parts = path.split("/")
        dfd = -1
        try:
            dfd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
            for part in parts[:-1]:
                try:
                    os.mkdir(part, 0o755, dir_fd=dfd)
                except FileExistsError:
                    pass
                sub = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=dfd)
                os.close(dfd)
                dfd = sub
            flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
            fd = os.open(parts[-1], flags, mode, dir_fd=dfd)
            try:
                if not stat.S_ISREG(os.fstat(fd).st_mode):
                    return f"could not write {path!r}: it exists and is not a regular file"
                os.ftruncate(fd, 0)
                view = memoryview(blobs[idx])
                while view:
                    view = view[os.write(fd, view) :]
            finally:
                os.close(fd)
        except OSError as e:
            return f"could not write {path!r}: {_WHY.get(e.errno or 0, e.strerror)}"
        finally:
            if dfd >= 0:
                os.close(dfd)
    return None


def parse_results(raw: bytes, key: bytes | bytearray) -> tuple[list[dict], bool]:
    """The genuine results on the channel, and whether anything forged was there too."""
    lines, forged = verified(raw, key)
    out = []
    for line in lines:
        if _MARK.fullmatch(line):
            continue  # pid 1's death mark shares the channel
        try:
            out.append(json.loads(line))
        except ValueError:
            forged = True  # we signed it, so it parses; unreachable short of a key leak
    return out, forged


class ExitWatch:
    """An fd that turns readable when child ``pid`` exits; the child is not reaped.

    A pidfd where the kernel has ``pidfd_open``. gVisor (the ``gvisor`` tier) lacks it:
    there a SIGCHLD wakeup pipe stands in, and ``exited()`` asks ``waitid(WNOWAIT)``.
    Create it in the parent after the fork, so no child inherits the handler.
    """

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self._pipe: tuple[int, int] | None = None
        try:
            self.fd = os.pidfd_open(pid)
            return
        except OSError as e:
            if e.errno != errno.ENOSYS:
                raise
        r, w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self._pipe = (r, w)
        self.fd = r
        self._handler = signal.signal(signal.SIGCHLD, lambda *_: None)
        self._wakeup = signal.set_wakeup_fd(w, warn_on_full_buffer=False)
        os.write(w, b"\0")  # the child may be gone already: check once up front

    def exited(self) -> bool:
        """Whether the child has exited; call when ``fd`` is readable."""
        if self._pipe is None:
            return True
        try:
            while os.read(self.fd, 512):
                pass
        except BlockingIOError:
            pass
        flags = os.WEXITED | os.WNOHANG | os.WNOWAIT
        return os.waitid(os.P_PID, self.pid, flags) is not None

    def close(self) -> None:
        if self._pipe is None:
            os.close(self.fd)
            return
        signal.set_wakeup_fd(self._wakeup)
        signal.signal(signal.SIGCHLD, self._handler)
        for fd in self._pipe:
            os.close(fd)


# ---------------------------------------------------------------- forking


def fork(clone_flags: int = 0, single_threaded: bool | None = None) -> int:
    """fork(), or clone() with namespace flags, skipping CPython's at-fork hooks when
    this process has a single thread.

    ``os.fork()`` runs ``PyOS_AfterFork_Child`` in the child, which rebuilds the
    ``threading`` module's state and reseeds ``random``: about 1 ms of CPU per fork here,
    nearly all of it copy-on-write faults on the objects it touches (about 220 of the
    260 faults of a fork-and-exit). Those hooks exist for locks that other threads held
    at the fork; with one thread there are none, and the interpreter's state is already
    right in the child (same thread, same ident). Only ``random`` is reseeded, as
    CPython does, so runs do not share a random stream. With other threads the full
    hooks run, as ``os.fork()`` would. ``single_threaded``: what a caller that starts no
    thread already knows (the zygote's forker, whose /proc may be a run's).
    """
    hooks = not (_single_threaded() if single_threaded is None else single_threaded)
    if hooks and not clone_flags:
        return os.fork()
    if hooks:
        _libc.PyOS_BeforeFork()
    if clone_flags:
        pid = _libc.syscall(SYS_CLONE, clone_flags | signal.SIGCHLD, 0, 0, 0, 0)
    else:
        pid = _libc.fork()  # glibc's, so its own state (locks, cached tid) is reset
    if pid == 0:
        try:
            if hooks:
                _libc.PyOS_AfterFork_Child()
            else:
                _reseed_random()
        except BaseException:
            os._exit(125)  # never let the child go on as its parent
        return 0
    if hooks:
        _libc.PyOS_AfterFork_Parent()
    if pid < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"fork: {os.strerror(err)}")
    return pid


def _reseed_random() -> None:
    """What CPython's own at-fork hook for ``random`` does (``_inst.seed()``), with its
    failures ignored as CPython ignores them: a program that broke ``random`` gets what it
    broke, and the fork goes on."""
    mod = sys.modules.get("random")
    if mod is None:
        return
    try:
        mod.Random.seed(mod._inst)
    except Exception:
        pass


def _single_threaded() -> bool:
    try:
        return len(os.listdir("/proc/self/task")) == 1
    except OSError:
        return False  # cannot tell: take the safe path


# ---------------------------------------------------------------- running


def _std_streams(streams: tuple = ()) -> None:
    """Make ``streams`` (or fresh ones on fds 0-2) the program's standard streams."""
    sys.stdin, sys.stdout, sys.stderr = streams or _open_streams()
    sys.__stdin__, sys.__stdout__, sys.__stderr__ = sys.stdin, sys.stdout, sys.stderr


def _open_streams() -> tuple:
    return (
        open(0, closefd=False, errors="replace"),
        open(1, "w", closefd=False, errors="backslashreplace"),
        open(2, "w", buffering=1, closefd=False, errors="backslashreplace"),
    )


_ZYGOTE_STREAMS: tuple = ()


def warm() -> None:
    """Touch lazily-initialised machinery once, in the zygote, so forks share it.

    Also builds the program's text streams on fds 0-2 here: a child moves its own pipes
    onto those fds and takes the streams over (``standby``), which costs it far fewer
    copy-on-write faults than building them. Nothing in the zygote writes to them.
    """
    global _ZYGOTE_STREAMS
    compile("x = 1", "<warm>", "exec")
    traceback.format_exception(ValueError, ValueError("warm"), None)
    _ZYGOTE_STREAMS = _open_streams()


def standby() -> None:
    """The harness's share of E's set-up before its request arrives (see ``_zygote``).

    The text streams sit on fds 0-2, which are final by now; taking them over here, and
    touching the calls a run makes first, takes their copy-on-write page faults off the
    time between a request and its answer.
    """
    _std_streams(_ZYGOTE_STREAMS)
    for limit in (resource.RLIMIT_CPU, resource.RLIMIT_AS, resource.RLIMIT_FSIZE):
        resource.getrlimit(limit)
    compile("pass", "<standby>", "exec")


def _main_module(path: str) -> dict:
    mod = types.ModuleType("__main__")
    mod.__file__ = path
    mod.__builtins__ = builtins
    sys.modules["__main__"] = mod
    return mod.__dict__


def exec_main(code_obj, path: str) -> tuple[int, dict, bool]:
    """Run compiled code as ``__main__``: (exit code, globals, whether it called exit)."""
    g = _main_module(path)
    rc = 0
    try:
        exec(code_obj, g)
    except SystemExit as e:
        return _exit_code(e.code), g, True
    except BaseException:
        traceback.print_exc()
        rc = 1
    return rc, g, False


def _exit_code(code: object) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def finish(rc: int) -> None:
    """Exit like the interpreter would: join threads, run exit hooks, flush.

    As in CPython's ``Py_FinalizeEx``, a failed flush of ``sys.stdout`` (say, fd 1 was
    closed under buffered output) is reported on stderr and a failed flush of either
    stream makes the exit status 120, whatever the program asked for.
    """
    try:
        if threading.active_count() > 1:
            threading._shutdown()  # type: ignore[attr-defined]
        if atexit._ncallbacks():
            atexit._run_exitfuncs()
    except BaseException:
        pass
    failed = False
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is None or getattr(stream, "closed", False):
                continue
            stream.flush()
        except BaseException as exc:
            failed = True
            if stream is sys.stdout:
                _unraisable(stream, exc)
    os._exit(120 if failed else rc)


def _unraisable(obj: object, exc: BaseException) -> None:
    try:
        os.write(2, f"Exception ignored in: {obj!r}\n{type(exc).__name__}: {exc}\n".encode())
    except (OSError, ValueError):
        pass  # stderr is gone too


def compile_program(blobs: list[bytes], req: dict) -> tuple[object, str]:
    """The program's code object and path; raises SyntaxError/ValueError as compile does."""
    src = blobs[req["code"]]
    # in a workspace the program's file is not one of the workspace's (see Workspace.diff)
    path = os.path.join("/tmp" if req.get("workspace") else os.getcwd(), "main.py")
    with open(path, "wb") as f:
        f.write(src)
    return compile(src, path, "exec"), path


def enter_site(req: dict) -> None:
    """A workspace image's environment, for a program run in-process: the workspace's root
    first on ``sys.path`` (as for a script there) and the image's site-packages, ``.pth``
    files included. Only ever in the program's own process, once it is locked down: a
    ``.pth`` file is code, and a kept workspace's earlier runs may have written it (in
    the process that supervises a stdio batch it could sign that batch's results)."""
    if req.get("site"):
        import site

        sys.path.insert(0, os.getcwd())
        site.addsitedir(req["site"])


def run(req: dict, blobs: list[bytes], channel: Channel) -> int:
    """Run the request in this process (E, the run's first process).

    Modes: ``exec`` replaces this process with a command; ``python`` runs the program
    here; ``serve`` runs the program here, once the judge first asks for it, and then
    answers an assert test's judge on ``CALL_FD``; with stdio ``tests`` this process only
    supervises, each case running in a child (``_stdio``), and the program never runs here.
    """
    mode = req["mode"]
    tests = req.get("tests")
    if tests:
        import _stdio

        _stdio.run_cases(channel, req, blobs)
        os._exit(0)
    if mode == "exec":
        argv = req["argv"]
        channel.wipe()
        os.execvpe(argv[0], argv, dict(os.environ))
    sys.argv = list(req.get("argv") or ["main.py"])
    try:
        code_obj, path = compile_program(blobs, req)
    except (SyntaxError, ValueError):
        traceback.print_exc(limit=0)
        finish(1)
        return 1
    if mode == "serve":
        # the program starts when the judge first asks for it (or ends): what the judge
        # does before, such as timing a task's reference, has no program running beside it
        select.select([CALL_FD], [], [])
    enter_site(req)
    rc, g, exited = exec_main(code_obj, path)
    if mode == "serve" and rc == 0 and not exited:
        import _serve  # imported by the zygote; the program may have replaced it: its loss

        del code_obj, path
        _serve.serve(g, CALL_FD)
    finish(rc)
    return rc
