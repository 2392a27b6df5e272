"""What runs inside the restricted program process (standard library only).

Executed by the jail's interpreter next to ``_zygote.py``. It runs one program, or one
program against many test cases, and reports per-test results on fd 3 as JSON lines.

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
import errno
import json
import math
import os
import select
import signal
import sys
import threading
import time
import traceback
import types

RESULT_FD = 3
_OUT_CAP = 1 << 20


FATAL_BY_DEFAULT = (
    signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2,
    signal.SIGALRM, signal.SIGXCPU, signal.SIGXFSZ, signal.SIGVTALRM, signal.SIGPROF,
    signal.SIGABRT,
)  # fmt: skip


def die(signum: int, frame: object) -> None:
    """Act out a signal's default action for pid 1, which the kernel would ignore.

    The zygote installs this in the program process (pid 1 of its namespace). The
    marker on fd 4 lets the zygote report the signal rather than an exit status.
    """
    try:
        os.write(4, b"S%d" % signum)
    except OSError:
        pass
    os._exit(128 + signum)


def _default_signals() -> None:
    """In a forked test process (not pid 1) the kernel's defaults work again."""
    for sig in FATAL_BY_DEFAULT:
        if signal.getsignal(sig) is die:
            signal.signal(sig, signal.SIG_DFL)


def warm() -> None:
    """Touch lazily-initialised machinery once, in the zygote, so forks share it."""
    compile("x = 1", "<warm>", "exec")
    traceback.format_exception(ValueError, ValueError("warm"), None)


def write_files(files: list, blobs: list[bytes]) -> None:
    for path, idx, mode in files:
        parent = os.path.dirname(path)
        if parent:
            os.makedirs(parent, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, mode)
        with os.fdopen(fd, "wb") as f:
            f.write(blobs[idx])


def parse_results(raw: bytes) -> list[dict]:
    out = []
    for line in raw.splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            break  # a truncated last line: the missing tests are reported as not run
    return out


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


# ---------------------------------------------------------------- running


def _std_streams() -> None:
    sys.stdin = open(0, closefd=False, errors="replace")
    sys.stdout = open(1, "w", closefd=False, errors="backslashreplace")
    sys.stderr = open(2, "w", buffering=1, closefd=False, errors="backslashreplace")
    sys.__stdin__, sys.__stdout__, sys.__stderr__ = sys.stdin, sys.stdout, sys.stderr


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
    """Exit like the interpreter would: join threads, run exit hooks, flush."""
    try:
        if threading.active_count() > 1:
            threading._shutdown()  # type: ignore[attr-defined]
        if atexit._ncallbacks():
            atexit._run_exitfuncs()
    except BaseException:
        pass
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:  # a closed or broken stdout is the program's business
            pass
    os._exit(rc)


def run(req: dict, blobs: list[bytes]) -> int:
    mode = req["mode"]
    tests = req.get("tests")
    if mode == "exec" and not tests:
        argv = req["argv"]
        os.execvpe(argv[0], argv, dict(os.environ))
    _std_streams()
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
                _report_all(tests, "error", "the program does not compile")
            _finish(1)
            return 1
    else:
        code_obj = None
    if not tests:
        rc, _ = _exec_main(code_obj, path)
        _finish(rc)
    kind = tests[0]["kind"]
    if kind == "assert":
        _run_asserts(code_obj, path, tests, req["limits"])
    else:
        _run_stdio(code_obj, req, tests, blobs)
    _finish(0)
    return 0


def _report(result: dict) -> None:
    os.write(RESULT_FD, (json.dumps(result) + "\n").encode())


def _report_all(tests: list, verdict: str, detail: str) -> None:
    for i in range(len(tests)):
        _report({"i": i, "passed": False, "verdict": verdict, "detail": detail})


def _run_asserts(code_obj, path: str, tests: list, lim: dict) -> None:
    rc, g = _exec_main(code_obj, path)
    if rc != 0:
        _report_all(tests, "error", f"the program exited with {rc} before the tests")
        return
    compiled = []
    for t in tests:
        try:
            compiled.append(compile(t["code"], "<test>", "exec"))
        except SyntaxError as e:
            compiled.append(e)
    if len(tests) == 1:
        _report({"i": 0, **_assert_in_process(compiled[0], g)})
        return
    for i, c in enumerate(compiled):
        _report({"i": i, **_in_child(lambda c=c: _assert_child(c, g), lim, None)[0]})


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


def _assert_child(code_obj, g: dict) -> int:
    res = _assert_in_process(code_obj, g)
    try:
        sys.stdout.flush()
    except BaseException:
        pass
    os.write(RESULT_FD, json.dumps(res).encode())
    return 0


def _run_stdio(code_obj, req: dict, tests: list, blobs: list[bytes]) -> None:
    lim = req["limits"]
    argv = req.get("argv")
    build = req.get("build")
    if build:
        res, out = _in_child(lambda: _exec_merged(build), lim, b"")
        if not res["passed"]:
            why = res["detail"] if res["verdict"] != "ok" else ""
            _report_all(tests, "error", f"build failed: {why} {_snip(out)}".strip())
            return
    for i, t in enumerate(tests):
        stdin = blobs[t["stdin"]]
        if code_obj is not None:
            res, out = _in_child(lambda: _stdio_python(code_obj), lim, stdin)
        else:
            res, out = _in_child(lambda: os.execvpe(argv[0], argv, dict(os.environ)), lim, stdin)
        if res["verdict"] == "ok":
            passed = compare(
                out, blobs[t["expected"]], t.get("compare", "exact"), t.get("tolerance", 1e-6)
            )
            res = {
                "passed": passed,
                "verdict": "ok",
                "detail": "" if passed else "wrong answer: " + _snip(out),
            }
        _report({"i": i, **res})


def _exec_merged(argv: list) -> int:
    os.dup2(1, 2)  # compiler diagnostics go where the report can quote them
    os.execvpe(argv[0], argv, dict(os.environ))
    return 127


def _stdio_python(code_obj) -> int:
    _std_streams()
    rc, _ = _exec_main(code_obj, os.path.join(os.getcwd(), "main.py"))
    _finish(rc)
    return rc


def _in_child(fn, lim: dict, stdin: bytes | None) -> tuple[dict, bytes]:
    """Fork, run ``fn`` in the child under the per-test limits; judge it here."""
    import resource

    res_r, res_w = os.pipe()
    out_r = out_w = -1
    if stdin is not None:
        out_r, out_w = os.pipe()
        in_fd = os.memfd_create("case")
        os.write(in_fd, stdin)
        os.lseek(in_fd, 0, 0)
    sys.stdout.flush()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.monotonic()
    pid = os.fork()
    if pid == 0:
        rc = 1
        try:
            _default_signals()
            # gVisor arms RLIMIT_CPU on setrlimit only, not on fork: arm it again
            resource.setrlimit(resource.RLIMIT_CPU, resource.getrlimit(resource.RLIMIT_CPU))
            os.close(res_r)
            os.dup2(res_w, RESULT_FD)
            if stdin is not None:
                os.dup2(in_fd, 0)
                os.dup2(out_w, 1)
                os.close(out_r)
            rc = fn()
        finally:
            os._exit(rc)
    os.close(res_w)
    if stdin is not None:
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
                res_buf += chunk[:4096]
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
    if timed_out or cpu > lim["cpu_s"] or _signal_of(status) == signal.SIGXCPU:
        return {"passed": False, "verdict": "timeout", "detail": "", **timing}, bytes(out)
    if overflow:
        return {"passed": False, "verdict": "output_limit", "detail": "", **timing}, bytes(out)
    if res_buf:
        try:
            return {**json.loads(res_buf), **timing}, bytes(out)
        except ValueError:
            pass
    sig = _signal_of(status)
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
