"""Stdin/stdout test cases: run each in a child, report what it printed (stdlib only).

Runs in E, the run's first process, which only supervises here: every case (and the
optional build step) runs in a child of E, and E holds neither the expected outputs nor
the key's use (the zygote strips the expected outputs from E's request and compares
outside the run, see ``compare``; a case's copy of the key is zeroed). E ignores every
signal its children can send (as pid 1 of the run's own namespace, with no handlers; in
the pid namespace a worker's plain runs share, by ignoring each one it can), so a case
cannot end or steer the batch short of SIGKILL or SIGSTOP, which end it as the
program's own failure (the remaining cases are not completed).

Per case: the case's CPU time is the run's cgroup slot's CPU counter over the case
(everything it started, reaped or not, threads included; ``RUSAGE_CHILDREN`` of E where
the tier has no counter), and when the case's process ends, everything it left behind
is killed (``kill(-1)`` from E) and reaped by E (pid 1, or the cases' subreaper) before
the next case starts.
"""

from __future__ import annotations

import base64
import decimal
import fcntl
import math
import os
import resource
import select
import signal
import time

import _harness

_OUT_CAP = 1 << 20
# one case's signed result line at most: its output in base64 (not JSON-escaped latin-1,
# up to 6 bytes a byte) and the rest; the zygote sizes a batch's result buffer by it
RESULT_MAX = _OUT_CAP * 4 // 3 + (1 << 16)
_NS = True  # the zygote sets False for the process tier (no namespace: E is not pid 1)
_GUARDED = False  # this supervisor ignores the signals it could otherwise die of
PR_SET_CHILD_SUBREAPER = 36


def run_cases(channel, req: dict, blobs: list[bytes]) -> None:  # type: ignore[no-untyped-def]
    """Run every case of ``req`` and report each on the result channel."""
    global _GUARDED
    if _NS and os.getpid() == 1:
        # pid 1 ignores signals it has no handler for: its children cannot end it
        for sig in (*_harness.FATAL_BY_DEFAULT, signal.SIGINT):
            signal.signal(sig, signal.SIG_DFL)
    elif _NS:
        # in a pid namespace shared by the worker's runs (its init is the zygote's): the
        # cases cannot end this process by any signal it can ignore, and what they leave
        # behind is re-parented here, to be reaped before the next case (see _reap)
        _GUARDED = True
        for sig in (*_harness.FATAL_BY_DEFAULT, signal.SIGINT):
            signal.signal(sig, signal.SIG_IGN)
        _harness._libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    lim = req["limits"]
    tests = req["tests"]
    meter = Meter({name: COUNTER_FD + i for i, name in enumerate(COUNTERS)})
    code_obj = None
    if req["mode"] == "python":
        try:
            code_obj, _ = _harness.compile_program(blobs, req)
        except (SyntaxError, ValueError) as e:
            _report_all(channel, tests, "error", f"the program does not compile: {e}")
            return
    build = req.get("build")
    if build:
        res, out = _case(channel, meter, lambda: _exec_merged(build), lim, b"")
        if res["verdict"] != "ok":
            why = res["detail"]
            _report_all(channel, tests, "error", f"build failed: {why} {_snip(out)}".strip())
            return
    argv = req.get("argv")
    cwd = os.getcwd()
    before = set(os.listdir(cwd))  # the uploads, the program and a build's outputs
    modes = _modes(cwd)
    for i, t in enumerate(tests):
        if i:
            _tidy(cwd, before, modes)
        stdin = blobs[t["stdin"]]
        if code_obj is not None:
            fn = lambda: _python(code_obj, req)  # noqa: E731
        else:
            fn = lambda: os.execvpe(argv[0], argv, dict(os.environ))  # noqa: E731
        res, out = _case(channel, meter, fn, lim, stdin)
        if res["verdict"] == "ok":
            res["out"] = base64.b64encode(out).decode()  # compared by the zygote
        channel.report({"i": i, **res})


def _tidy(cwd: str, keep: set[str], modes: dict[str, int]) -> None:
    """What a case left in the run's scratch places is gone before the next case: all of
    /tmp and /dev/shm (the run's own tmpfs: with namespaces only, never the host's), and
    every new entry of the work dir (files that were there before the cases began, which a
    case may change, stay as it left them). Each place gets back the mode it had before
    the cases began (``modes``): a case that locked the work dir does not lock the next
    one out of it."""
    places = [("/tmp", set()), ("/dev/shm", set())] if _NS else []
    for where, spare in [*places, (cwd, keep)]:
        try:
            if where in modes:
                os.chmod(where, modes[where])
            fd = os.open(where, _DIR_FLAGS)
        except OSError:
            continue
        try:
            for name in os.listdir(fd):
                if name not in spare:
                    _remove(fd, name)
        except OSError:
            pass
        finally:
            os.close(fd)


def _modes(cwd: str) -> dict[str, int]:
    """The permission bits of the places ``_tidy`` empties, as the batch found them."""
    found = {}
    for where in ("/tmp", "/dev/shm", cwd) if _NS else (cwd,):
        try:
            found[where] = os.lstat(where).st_mode & 0o7777
        except OSError:
            continue
    return found


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _remove(root: int, name: str) -> None:
    """Remove ``name`` (in the folder open at ``root``) and everything under it.

    Every step is relative to one open folder (``unlinkat``, ``openat``, ``..``) and every
    entry is listed and removed once, so the cost is the tree's size, whatever its shape:
    by full paths a deep tree cost the square of its depth in path walks, and listing a
    folder again after each of its subfolders cost the square of its width, either
    enough to spend the batch's CPU. No path is too long and no recursion limit applies.
    By now no process of the case is left, so the tree holds still. A folder that cannot
    be entered or emptied stays (and so do the folders above it); the next case sees it.
    """
    try:
        os.unlink(name, dir_fd=root)
        return
    except IsADirectoryError:
        pass
    except OSError:
        return
    cur = _enter(root, name)
    if cur < 0:
        return
    path = [name]  # from ``root`` down to ``cur``
    todo = [_unlink_files(cur)]  # each level's subfolders not yet visited
    while True:
        if todo[-1]:
            sub = todo[-1].pop()
            down = _enter(cur, sub)
            if down >= 0:
                os.close(cur)
                cur = down
                path.append(sub)
                todo.append(_unlink_files(cur))
            continue
        # this folder is as empty as it gets: up one, and remove it
        try:
            up = root if len(path) == 1 else os.open("..", _DIR_FLAGS, dir_fd=cur)
        except OSError:
            up = -1
        os.close(cur)
        if up < 0:
            return
        try:
            os.rmdir(path.pop(), dir_fd=up)
        except OSError:
            pass
        todo.pop()
        if not path:
            return
        cur = up


def _unlink_files(folder: int) -> list[str]:
    """Unlink every entry of ``folder`` but its subfolders, which it returns."""
    subs = []
    try:
        names = os.listdir(folder)
    except OSError:
        return subs
    for entry in names:
        try:
            os.unlink(entry, dir_fd=folder)
        except IsADirectoryError:
            subs.append(entry)
        except OSError:
            pass
    return subs


def _enter(parent: int, name: str) -> int:
    """Open the folder ``name`` under ``parent`` (made accessible first: a case may have
    locked it); -1 if it cannot be."""
    try:
        os.chmod(name, 0o700, dir_fd=parent)
    except OSError:
        pass
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=parent)
    except OSError:
        return -1


def _report_all(channel, tests: list, verdict: str, detail: str) -> None:  # type: ignore[no-untyped-def]
    for i in range(len(tests)):
        channel.report({"i": i, "passed": False, "verdict": verdict, "detail": detail})


def _exec_merged(argv: list) -> int:
    os.dup2(1, 2)  # compiler diagnostics go where the report can quote them
    os.execvpe(argv[0], argv, dict(os.environ))
    return 127


def _python(code_obj, req: dict) -> int:  # type: ignore[no-untyped-def]
    signal.signal(signal.SIGINT, signal.default_int_handler)
    _harness._std_streams()
    _harness.enter_site(req)  # here in the case, never in the supervisor
    rc, _, _ = _harness.exec_main(code_obj, os.path.join(os.getcwd(), "main.py"))
    _harness.finish(rc)
    return rc


COUNTER_FD = 7  # E's copies of the slot's counters, from here up (set by the zygote)
COUNTERS: tuple[str, ...] = ()  # their names, in that order; empty: no cgroup slot


def open_counters(paths: dict[str, str], low: int) -> dict[str, int]:
    """Open the slot's counter files once, at fds >= ``low`` (out of the way of the fixed
    numbers a run's fds are moved to); a file that cannot be opened is left out."""
    fds = {}
    for name, path in paths.items():
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            continue
        fds[name] = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, low)
        os.close(fd)
    return fds


class Meter:
    """CPU seconds and OOM kills of the run's cgroup slot, or E's reaped children.

    ``fds``: the counters by name, already open. No run can open them: the zygote opened
    them before it covered their folder, since a counter of every run a slot ever had is
    a channel from one run to the next (burn CPU here, read the total there)."""

    def __init__(self, fds: dict[str, int]) -> None:
        self.fds = fds

    def read(self) -> tuple[float, int]:
        """(CPU seconds, OOM kills) so far; only differences mean anything."""
        cpu = self.fds.get("cpu_ns")
        if cpu is not None:
            cpu_s = int(os.pread(cpu, 64, 0)) / 1e9
        elif "cpu_stat" in self.fds:
            cpu_s = _keyed(os.pread(self.fds["cpu_stat"], 4096, 0)).get("usage_usec", 0) / 1e6
        else:
            ru = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu_s = ru.ru_utime + ru.ru_stime
        oom = self.fds.get("oom")
        kills = _keyed(os.pread(oom, 4096, 0)).get("oom_kill", 0) if oom is not None else 0
        return cpu_s, kills


def _keyed(text: bytes) -> dict[str, int]:
    out = {}
    for line in text.decode().splitlines():
        k, _, v = line.partition(" ")
        if v.strip().isdigit():
            out[k] = int(v)
    return out


def _case(channel, meter: Meter, fn, lim: dict, stdin: bytes) -> tuple[dict, bytes]:  # type: ignore[no-untyped-def]
    """Fork, run ``fn`` in the child with ``stdin``; judge it here. The child's copy of
    the batch's key is zeroed and its result pipe closed before ``fn`` runs, and the
    expected outputs were never here: the child can only print."""
    out_r, out_w = os.pipe()
    in_fd = os.memfd_create("case")
    os.write(in_fd, stdin)
    os.lseek(in_fd, 0, 0)
    cpu0, oom0 = meter.read()
    start = time.monotonic()
    pid = _harness.fork()
    if pid == 0:
        rc = 1
        try:
            # the case could walk its frames up to the supervisor's channel; with fd 3
            # closed below the key is no use to it, and zeroed it is not there at all
            channel.wipe()
            if _GUARDED:  # the case gets the default actions the supervisor set aside
                for sig in (*_harness.FATAL_BY_DEFAULT, signal.SIGINT):
                    signal.signal(sig, signal.SIG_DFL)
            if not _NS:
                os.setpgid(0, 0)  # the case's own group, killed whole at its end
            # gVisor arms RLIMIT_CPU on setrlimit only, not on fork: arm it again
            resource.setrlimit(resource.RLIMIT_CPU, resource.getrlimit(resource.RLIMIT_CPU))
            os.dup2(in_fd, 0)
            os.dup2(out_w, 1)
            os.closerange(3, 65536)  # the result channel, the counters: none is the case's
            rc = fn()
        finally:
            os._exit(rc)
    os.close(out_w)
    os.close(in_fd)
    watch = _harness.ExitWatch(pid)
    out = bytearray()
    poller = select.poll()
    poller.register(watch.fd, select.POLLIN)
    poller.register(out_r, select.POLLIN)
    deadline = start + lim["wall_s"]
    exited = timed_out = overflow = False
    pipe_open = True
    while not exited or pipe_open:
        left = deadline - time.monotonic()
        if left <= 0 and not exited:
            timed_out = True
            _kill_case(pid)
            deadline = float("inf")
            continue
        for fd, _ in poller.poll(None if left == float("inf") else max(0.0, left) * 1000):
            if fd == watch.fd:
                if watch.exited():
                    exited = True
                    poller.unregister(fd)
                    _kill_case(pid)  # what it left behind holds the pipe open: end it now
                continue
            chunk = os.read(fd, 65536)
            if not chunk:
                poller.unregister(fd)
                pipe_open = False
            else:
                out += chunk[: max(0, _OUT_CAP - len(out))]
                if len(out) >= _OUT_CAP and not overflow:
                    overflow = True
                    _kill_case(pid)
    status = _reap(pid)
    watch.close()
    os.close(out_r)
    cpu1, oom1 = meter.read()
    cpu = cpu1 - cpu0
    timing = {"cpu_s": round(cpu, 6), "wall_s": round(time.monotonic() - start, 6)}
    sig = os.WTERMSIG(status) if os.WIFSIGNALED(status) else 0
    # a SIGXCPU is believed only with the CPU to show for it: the program can send it too
    xcpu = sig == signal.SIGXCPU and cpu >= _harness.XCPU_MIN_FRACTION * lim["cpu_s"]
    if timed_out or cpu > lim["cpu_s"] or xcpu:
        return {"passed": False, "verdict": "timeout", "detail": "", **timing}, bytes(out)
    if overflow:
        return {"passed": False, "verdict": "output_limit", "detail": "", **timing}, bytes(out)
    if oom1 > oom0:
        return {"passed": False, "verdict": "memory", "detail": "out of memory", **timing}, b""
    if sig:
        verdict = "memory" if sig == signal.SIGKILL else "killed"
        try:
            detail = f"killed by {signal.Signals(sig).name}"
        except ValueError:
            detail = f"killed by signal {sig}"
        return {"passed": False, "verdict": verdict, "detail": detail, **timing}, bytes(out)
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        return {"passed": False, "verdict": "error", "detail": f"exit code {code}", **timing}, b""
    return {"passed": True, "verdict": "ok", "detail": "", **timing}, bytes(out)


def _kill_case(pid: int) -> None:
    """Kill the case and everything it started (``kill(-1)`` from E: every process of
    the namespace but E and its init)."""
    try:
        if _NS:
            os.kill(-1, signal.SIGKILL)
        else:
            os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _reap(pid: int) -> int:
    """Reap the case and, with namespaces, every orphan it left; the case's status."""
    status = None
    if not _NS:
        return os.waitpid(pid, 0)[1]
    while True:
        try:
            got, st = os.waitpid(-1, 0)
        except ChildProcessError:
            break
        if got == pid:
            status = st
    return status if status is not None else 0


def _snip(b: bytes) -> str:
    return b[:200].decode("utf-8", "replace")


def compare(actual: bytes, expected: bytes, mode: str, tolerance: float) -> bool:
    """Compare program output with the expected output (in the zygote, outside the run).

    ``exact`` ignores only trailing whitespace at line ends and at the end; ``tokens``
    compares whitespace-separated tokens; ``float`` compares tokens numerically with a
    relative/absolute tolerance where either is a decimal or exponent number, and
    integers exactly (998244000 is not 998244353 at any tolerance); ``lines`` compares
    line by line after stripping each (and the whole), a line matching when equal or when
    its tokens are the same decimal numbers (``1.50`` is ``1.5``), as LiveCodeBench does.
    """
    a = actual.decode("utf-8", "replace")
    e = expected.decode("utf-8", "replace")
    if mode == "exact":
        return [ln.rstrip() for ln in a.rstrip().splitlines()] == [
            ln.rstrip() for ln in e.rstrip().splitlines()
        ]
    if mode == "lines":
        al, el = a.strip().split("\n"), e.strip().split("\n")
        return len(al) == len(el) and all(map(_same_line, al, el))
    at, et = a.split(), e.split()
    if len(at) != len(et):
        return False
    if mode == "tokens":
        return at == et
    for x, y in zip(at, et, strict=True):
        if x == y:
            continue
        if _is_int(x) and _is_int(y):
            if _int_key(x) != _int_key(y):  # by digits: no int() of a 5,000-digit token
                return False
            continue
        try:
            fx, fy = float(x), float(y)
        except ValueError:
            return False
        if not math.isclose(fx, fy, rel_tol=tolerance, abs_tol=tolerance):
            return False
    return True


def _same_line(actual: str, expected: str) -> bool:
    """Equal once stripped, or the same decimal numbers token by token."""
    if actual.strip() == expected.strip():
        return True
    try:
        a = [decimal.Decimal(t) for t in actual.split()]
        return a == [decimal.Decimal(t) for t in expected.split()]
    except (decimal.InvalidOperation, ValueError):  # not a number; a signalling NaN
        return False


def _is_int(token: str) -> bool:
    body = token[1:] if token[:1] in "+-" else token
    return body.isascii() and body.isdigit()


def _int_key(token: str) -> tuple[bool, str]:
    """An integer token as (negative, digits without leading zeros): equal keys, equal
    integers; ``-0`` is ``0``."""
    negative = token.startswith("-")
    digits = token.lstrip("+-").lstrip("0")
    return (negative and bool(digits), digits)


def report_for(result: dict, test: dict, expected: bytes) -> dict:
    """A case's result with its output compared (in the zygote) and dropped."""
    out = result.pop("out", None)
    if result.get("verdict") != "ok" or out is None:
        return result
    actual = base64.b64decode(out, validate=True)
    passed = compare(actual, expected, test.get("compare", "exact"), test.get("tolerance", 1e-6))
    return {
        **result,
        "passed": passed,
        "detail": "" if passed else "wrong answer: " + _snip(actual),
    }
