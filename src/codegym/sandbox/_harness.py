"""What runs inside the restricted program process (standard library only).

Executed by the jail's interpreter next to ``_zygote.py``. It runs one program, or one
program against many test cases, and reports per-test results on fd 3 as JSON lines.

The result channel (fd 3) and the death-mark pipe (fd 4) are writable by the program, so
every line the harness writes on them is signed: ``<32 hex of HMAC-SHA256> <payload>\n``,
keyed by a fresh per-run secret the zygote makes before the fork (``Channel``). The zygote
keeps the key in its own process and accepts only lines that verify; anything else on
fd 3 is a forgery and fails the whole batch (the program's fault). The key never enters
the request, the environment, a module global or ``sys.argv``; forks that run a stdio
program wipe it and close fds 3 and 4 first. Code running in the harness's own process
(the program of an assert batch) can still dig the key out of the harness's frames or
objects; see docs/sandbox.md for what that does and does not cover.

Test kinds:
- ``assert``: the program runs once; each test's code then runs against the program's
  globals. One test runs in-process; several fork once each, so a test that mutates state
  or hangs cannot affect the next.
- ``stdio``: each case runs the program afresh with the case's stdin; stdout is compared
  exactly, by whitespace-separated tokens, or by tokens with a float tolerance.
"""

from __future__ import annotations

import atexit
import builtins
import ctypes
import errno
import hmac
import json
import math
import os
import re
import resource
import select
import signal
import sys
import threading
import time
import traceback
import types

RESULT_FD = 3
MARK_FD = 4
_OUT_CAP = 1 << 20
_TAG_HEX = 32  # 128 bits of HMAC-SHA256: unforgeable without the key, short on the wire
_SIGNED = re.compile(rb"([0-9a-f]{%d}) ([^\n]*)\n" % _TAG_HEX)
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

    Built in the program process from the one-element list the zygote hands over; the
    list is emptied, so the key lives on only inside this object.
    """

    __slots__ = ("_key",)

    def __init__(self, secret: list) -> None:
        self._key = bytearray(secret.pop())

    def sign(self, payload: bytes) -> bytes:
        return _tag(self._key, payload) + b" " + payload + b"\n"

    def report(self, result: dict, fd: int = RESULT_FD) -> None:
        os.write(fd, self.sign(json.dumps(result).encode()))

    def wipe(self) -> None:
        """Zero the key in this process (a fork about to run a program that needs none)."""
        self._key[:] = bytes(len(self._key))


def _tag(key: bytes | bytearray, payload: bytes) -> bytes:
    return hmac.digest(key, payload, "sha256").hex()[:_TAG_HEX].encode()


def verified(raw: bytes, key: bytes | bytearray) -> tuple[list[bytes], bool]:
    """The payloads of the lines in ``raw`` signed with ``key``, and whether anything
    else (a forgery, or a stray write by the program) was there too."""
    good: list[bytes] = []
    rest = bytearray()
    end = 0
    for m in _SIGNED.finditer(raw):
        if hmac.compare_digest(m.group(1), _tag(key, m.group(2))):
            good.append(m.group(2))
            rest += raw[end : m.start()]
            end = m.end()
    rest += raw[end:]
    return good, bool(rest.strip())


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


def death_signal(marks: bytes, key: bytes | bytearray) -> int | None:
    """The signal a genuine death mark in ``marks`` names; forged marks are ignored."""
    for payload in verified(marks, key)[0]:
        if re.fullmatch(rb"S\d{1,2}", payload):
            return int(payload[1:])
    return None


def _default_signals() -> None:
    """In a forked test process (not pid 1) the kernel's defaults work again."""
    for sig in FATAL_BY_DEFAULT:
        if getattr(signal.getsignal(sig), "codegym_die", False):
            signal.signal(sig, signal.SIG_DFL)


def write_files(files: list, blobs: list[bytes]) -> None:
    for path, idx, mode in files:
        parent = os.path.dirname(path)
        if parent:
            os.makedirs(parent, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, mode)
        with os.fdopen(fd, "wb") as f:
            f.write(blobs[idx])


def parse_results(raw: bytes, key: bytes | bytearray) -> tuple[list[dict], bool]:
    """The genuine results on the channel, and whether anything forged was there too."""
    lines, forged = verified(raw, key)
    out = []
    for line in lines:
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


def fork(clone_flags: int = 0) -> int:
    """fork(), or clone() with namespace flags, skipping CPython's at-fork hooks when
    this process has a single thread.

    ``os.fork()`` runs ``PyOS_AfterFork_Child`` in the child, which rebuilds the
    ``threading`` module's state and reseeds ``random``: about 1 ms of CPU per fork here,
    nearly all of it copy-on-write faults on the objects it touches (about 220 of the
    260 faults of a fork-and-exit). Those hooks exist for locks that other threads held
    at the fork; with one thread there are none, and the interpreter's state is already
    right in the child (same thread, same ident). Only ``random`` is reseeded, as
    CPython does, so runs do not share a random stream. With other threads the full
    hooks run, as ``os.fork()`` would.
    """
    hooks = not _single_threaded()
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


def _exec_main(code_obj, path: str) -> tuple[int, dict]:
    """Run compiled code as ``__main__``; returns (exit code, globals)."""
    g = _main_module(path)
    rc = 0
    try:
        exec(code_obj, g)
    except SystemExit as e:
        rc = _exit_code(e.code)
    except BaseException:
        traceback.print_exc()
        rc = 1
    return rc, g


def _exit_code(code: object) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def _finish(rc: int) -> None:
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


def run(req: dict, blobs: list[bytes], channel: Channel) -> int:
    mode = req["mode"]
    tests = req.get("tests")
    if mode == "exec" and not tests:
        argv = req["argv"]
        channel.wipe()
        for fd in (RESULT_FD, MARK_FD):
            os.set_inheritable(fd, False)  # the command has no use for the harness's pipes
        os.execvpe(argv[0], argv, dict(os.environ))
    sys.argv = list(req.get("argv") or ["main.py"])
    if mode == "python":
        src = blobs[req["code"]]
        path = os.path.join(os.getcwd(), "main.py")
        with open(path, "wb") as f:
            f.write(src)
        try:
            code_obj = compile(src, path, "exec")
        except (SyntaxError, ValueError):
            traceback.print_exc(limit=0)
            if tests:
                _report_all(channel, tests, "error", "the program does not compile")
            _finish(1)
            return 1
    else:
        code_obj = None
    if not tests:
        rc, _ = _exec_main(code_obj, path)
        _finish(rc)
    kind = tests[0]["kind"]
    if kind == "assert":
        _run_asserts(channel, code_obj, path, tests, req["limits"])
    else:
        _run_stdio(channel, code_obj, req, tests, blobs)
    _finish(0)
    return 0


def _report_all(channel: Channel, tests: list, verdict: str, detail: str) -> None:
    for i in range(len(tests)):
        channel.report({"i": i, "passed": False, "verdict": verdict, "detail": detail})


def _run_asserts(channel: Channel, code_obj, path: str, tests: list, lim: dict) -> None:
    rc, g = _exec_main(code_obj, path)
    if rc != 0:
        _report_all(channel, tests, "error", f"the program exited with {rc} before the tests")
        return
    compiled = []
    for t in tests:
        try:
            compiled.append(compile(t["code"], "<test>", "exec"))
        except SyntaxError as e:
            compiled.append(e)
    if len(tests) == 1:
        channel.report({"i": 0, **_assert_in_process(compiled[0], g)})
        return
    for i, c in enumerate(compiled):
        run_one = lambda c=c: _assert_child(channel, c, g)  # noqa: E731
        channel.report({"i": i, **_in_child(channel, run_one, lim, None)[0]})


def _assert_in_process(code_obj, g: dict) -> dict:
    if isinstance(code_obj, SyntaxError):
        return {"passed": False, "verdict": "error", "detail": f"bad test: {code_obj}"}
    try:
        exec(code_obj, g)
    except AssertionError as e:
        return {"passed": False, "verdict": "ok", "detail": f"AssertionError: {e}"[:500]}
    except MemoryError:
        return {"passed": False, "verdict": "memory", "detail": "MemoryError"}
    except BaseException as e:
        return {"passed": False, "verdict": "error", "detail": f"{type(e).__name__}: {e}"[:500]}
    return {"passed": True, "verdict": "ok", "detail": ""}


def _assert_child(channel: Channel, code_obj, g: dict) -> int:
    res = _assert_in_process(code_obj, g)
    try:
        sys.stdout.flush()
    except BaseException:
        pass
    channel.report(res)  # fd 3 is this test's private pipe to the harness
    return 0


def _run_stdio(channel: Channel, code_obj, req: dict, tests: list, blobs: list[bytes]) -> None:
    lim = req["limits"]
    argv = req.get("argv")
    build = req.get("build")
    if build:
        res, out = _in_child(channel, lambda: _exec_merged(build), lim, b"")
        if not res["passed"]:
            why = res["detail"] if res["verdict"] != "ok" else ""
            _report_all(channel, tests, "error", f"build failed: {why} {_snip(out)}".strip())
            return
    for i, t in enumerate(tests):
        stdin = blobs[t["stdin"]]
        if code_obj is not None:
            res, out = _in_child(channel, lambda: _stdio_python(code_obj), lim, stdin)
        else:
            run_cmd = lambda: os.execvpe(argv[0], argv, dict(os.environ))  # noqa: E731
            res, out = _in_child(channel, run_cmd, lim, stdin)
        if res["verdict"] == "ok":
            passed = compare(
                out, blobs[t["expected"]], t.get("compare", "exact"), t.get("tolerance", 1e-6)
            )
            res = {
                "passed": passed,
                "verdict": "ok",
                "detail": "" if passed else "wrong answer: " + _snip(out),
            }
        channel.report({"i": i, **res})


def _exec_merged(argv: list) -> int:
    os.dup2(1, 2)  # compiler diagnostics go where the report can quote them
    os.execvpe(argv[0], argv, dict(os.environ))
    return 127


def _stdio_python(code_obj) -> int:
    _std_streams()
    rc, _ = _exec_main(code_obj, os.path.join(os.getcwd(), "main.py"))
    _finish(rc)
    return rc


def _in_child(channel: Channel, fn, lim: dict, stdin: bytes | None) -> tuple[dict, bytes]:
    """Fork, run ``fn`` in the child under the per-test limits; judge it here.

    ``stdin`` None means an assert test: the child reports one signed result on a private
    pipe at fd 3. Otherwise the child runs a program whose output is compared: it gets no
    result pipe and no key at all, so nothing it writes can pass for a result.
    """
    import resource

    res_r = res_w = -1
    out_r = out_w = -1
    if stdin is None:
        res_r, res_w = os.pipe()
    else:
        out_r, out_w = os.pipe()
        in_fd = os.memfd_create("case")
        os.write(in_fd, stdin)
        os.lseek(in_fd, 0, 0)
    sys.stdout.flush()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.monotonic()
    pid = fork()
    if pid == 0:
        rc = 1
        try:
            _default_signals()
            # gVisor arms RLIMIT_CPU on setrlimit only, not on fork: arm it again
            resource.setrlimit(resource.RLIMIT_CPU, resource.getrlimit(resource.RLIMIT_CPU))
            os.close(MARK_FD)  # not pid 1: signals end it without a mark
            if stdin is None:
                os.close(res_r)
                os.dup2(res_w, RESULT_FD)
                os.close(res_w)
            else:
                channel.wipe()
                os.close(RESULT_FD)
                os.dup2(in_fd, 0)
                os.dup2(out_w, 1)
                for fd in (out_r, out_w, in_fd):
                    os.close(fd)
            rc = fn()
        finally:
            os._exit(rc)
    if stdin is None:
        os.close(res_w)
    else:
        os.close(out_w)
        os.close(in_fd)
    watch = ExitWatch(pid)
    pidfd = watch.fd
    out = bytearray()
    res_buf = bytearray()
    poller = select.poll()
    for fd in (pidfd, res_r, out_r):
        if fd >= 0:
            poller.register(fd, select.POLLIN)
    deadline = start + lim["wall_s"]
    exited = timed_out = overflow = False
    open_fds = {res_r, out_r} - {-1}
    while not exited or open_fds:
        left = deadline - time.monotonic()
        if left <= 0 and not exited:
            timed_out = True
            _kill_tree(pid)
            deadline = float("inf")
            continue
        for fd, _ in poller.poll(None if left == float("inf") else max(0.0, left) * 1000):
            if fd == pidfd:
                if watch.exited():
                    exited = True
                    poller.unregister(fd)
                continue
            chunk = os.read(fd, 65536)
            if not chunk:
                poller.unregister(fd)
                open_fds.discard(fd)
            elif fd == res_r:
                res_buf += chunk[: max(0, 65536 - len(res_buf))]
            else:
                out += chunk[: max(0, _OUT_CAP - len(out))]
                if len(out) >= _OUT_CAP and not overflow:
                    overflow = True
                    _kill_tree(pid)
    _, status = os.waitpid(pid, 0)
    watch.close()
    for fd in (res_r, out_r):
        if fd >= 0:
            os.close(fd)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    timing = {"cpu_s": round(cpu, 6), "wall_s": round(time.monotonic() - start, 6)}
    sig = _signal_of(status)
    # a SIGXCPU is believed only with the CPU to show for it: the program can send it too
    xcpu = sig == signal.SIGXCPU and cpu >= XCPU_MIN_FRACTION * lim["cpu_s"]
    if timed_out or cpu > lim["cpu_s"] or xcpu:
        return {"passed": False, "verdict": "timeout", "detail": "", **timing}, bytes(out)
    if overflow:
        return {"passed": False, "verdict": "output_limit", "detail": "", **timing}, bytes(out)
    if res_buf:
        results, forged = parse_results(bytes(res_buf), channel._key)
        if forged or len(results) != 1:
            return {**_FORGED, **timing}, bytes(out)
        return {**results[0], **timing}, bytes(out)
    if sig:
        verdict = "memory" if sig == signal.SIGKILL else "killed"
        return {
            "passed": False,
            "verdict": verdict,
            "detail": f"killed by {signal.Signals(sig).name}",
            **timing,
        }, bytes(out)
    code = os.waitstatus_to_exitcode(status)
    if stdin is None:  # an assert test that never reported: it exited early
        return {
            "passed": False,
            "verdict": "error",
            "detail": f"the test exited with {code} before finishing",
            **timing,
        }, bytes(out)
    verdict = "ok" if code == 0 else "error"
    return {
        "passed": code == 0,
        "verdict": verdict,
        "detail": "" if code == 0 else f"exit code {code}",
        **timing,
    }, bytes(out)


_FORGED = {
    "passed": False,
    "verdict": "error",
    "detail": "forged: the program wrote to the harness's result channel",
    "forged": True,
}


def _kill_tree(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _signal_of(status: int) -> int:
    return os.WTERMSIG(status) if os.WIFSIGNALED(status) else 0


def _snip(b: bytes) -> str:
    return b[:200].decode("utf-8", "replace")


def compare(actual: bytes, expected: bytes, mode: str, tolerance: float) -> bool:
    """Compare program output with the expected output.

    ``exact`` ignores only trailing whitespace at line ends and at the end; ``tokens``
    compares whitespace-separated tokens; ``float`` compares tokens numerically with a
    relative/absolute tolerance where both parse as numbers.
    """
    a = actual.decode("utf-8", "replace")
    e = expected.decode("utf-8", "replace")
    if mode == "exact":
        return [ln.rstrip() for ln in a.rstrip().splitlines()] == [
            ln.rstrip() for ln in e.rstrip().splitlines()
        ]
    at, et = a.split(), e.split()
    if len(at) != len(et):
        return False
    if mode == "tokens":
        return at == et
    for x, y in zip(at, et, strict=True):
        if x == y:
            continue
        try:
            fx, fy = float(x), float(y)
        except ValueError:
            return False
        if not math.isclose(fx, fy, rel_tol=tolerance, abs_tol=tolerance):
            return False
    return True
