"""The fork server that runs inside a sandbox worker (standard library only).

This file is executed by the *jail's* interpreter (the system Python by default), not
imported by codegym. It reads length-prefixed frames on stdin and answers on stdout.

Per execution it builds this process tree::

    zygote Z (long-lived, warm imports)
      └─ D  pid 1 of a fresh pid/mount/ipc namespace: mounts a private tmpfs work dir,
           │  /dev/shm and /proc, then reaps everything and reports the tree's rusage
           └─ E  the program: rlimits, all capabilities dropped, no_new_privs, seccomp

Z enforces the wall deadline and the output cap (it reads the pipes). When D exits the
kernel kills every process left in its namespace, so nothing the program started
survives the run. E never sees Z: it has its own /proc and pid numbering.

Per run Z also makes a fresh secret key before the fork and hands it to the harness in a
one-element list the harness empties (so no frame or object of Z's code keeps it in E).
E signs its test results (fd 3) and its death mark (fd 4) with it; Z keeps its own copy
and believes only what verifies (``_harness.Channel``), so a program writing to those
fds forges nothing. The zygote's directory is taken off ``sys.path`` once the harness is
imported, so programs do not see it there.

Without namespaces (the ``process`` tier) D is an ordinary child in its own session and
the tree is killed by process group; double-forked daemons that call setsid escape that.
"""

from __future__ import annotations

import atexit
import ctypes
import gc
import json
import os
import resource
import select
import signal
import struct
import sys
import time

_HDR = struct.Struct(">I")
_MAX_FRAME = 1 << 30

CLONE_NEWNS = 0x00020000
CLONE_NEWIPC = 0x08000000
CLONE_NEWPID = 0x20000000
SYS_CLONE = 56
SYS_CAPSET = 126
PR_SET_NO_NEW_PRIVS = 38
PR_SET_SECCOMP = 22
SECCOMP_MODE_FILTER = 2
PR_SET_PDEATHSIG = 1
MS_NOSUID, MS_NODEV, MS_NOEXEC = 2, 4, 8

_libc = ctypes.PyDLL(None, use_errno=True)  # PyDLL: keep the GIL across clone()


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def _check(ret: int, what: str) -> None:
    if ret != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


# ---------------------------------------------------------------- framing


def read_frame(stream) -> tuple[dict, list[bytes]]:
    raw = stream.read(4)
    if len(raw) < 4:
        raise EOFError
    (n,) = _HDR.unpack(raw)
    if n > _MAX_FRAME:
        raise ValueError("frame too large")
    header = json.loads(stream.read(n))
    blobs = [stream.read(k) for k in header.pop("_blobs", [])]
    return header, blobs


def write_frame(stream, header: dict, blobs: list[bytes] = ()) -> None:
    header = dict(header, _blobs=[len(b) for b in blobs])
    data = json.dumps(header, separators=(",", ":")).encode()
    stream.write(_HDR.pack(len(data)) + data + b"".join(blobs))
    stream.flush()


# ---------------------------------------------------------------- privilege drop


def drop_privileges(seccomp_bpf: bytes) -> None:
    """Drop every capability, forbid privilege gain, load the seccomp filter."""
    # Emptying permitted/effective/inheritable clears the ambient set too; with
    # no_new_privs, setuid and file-capability binaries cannot regain anything, so the
    # bounding set need not be walked (41 prctl calls per run).
    header = (ctypes.c_uint32 * 2)(0x20080522, 0)
    data = (ctypes.c_uint32 * 6)()
    _check(_libc.syscall(SYS_CAPSET, header, data), "capset")
    _check(_libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")
    if seccomp_bpf:
        buf = ctypes.create_string_buffer(seccomp_bpf, len(seccomp_bpf))
        prog = _SockFprog(len(seccomp_bpf) // 8, ctypes.addressof(buf))
        _check(
            _libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(prog), 0, 0), "seccomp"
        )


def apply_rlimits(lim: dict, as_extra_mb: int, address_space: bool, nproc: bool) -> None:
    r = resource

    cpu = max(1, int(lim["cpu_s"] + 0.999))
    r.setrlimit(r.RLIMIT_CPU, (cpu, cpu + 1))
    if address_space:
        mem = (lim["memory_mb"] + as_extra_mb) << 20
        r.setrlimit(r.RLIMIT_AS, (mem, mem))
    fsize = lim["disk_mb"] << 20
    r.setrlimit(r.RLIMIT_FSIZE, (fsize, fsize))
    r.setrlimit(r.RLIMIT_NOFILE, (lim["open_files"], lim["open_files"]))
    r.setrlimit(r.RLIMIT_CORE, (0, 0))
    if nproc:
        r.setrlimit(r.RLIMIT_NPROC, (lim["max_processes"], lim["max_processes"]))


# ---------------------------------------------------------------- the zygote


class Zygote:
    def __init__(self, config: dict, seccomp_bpf: bytes) -> None:
        self.cfg = config
        self.bpf = seccomp_bpf
        self.namespaces = bool(config["namespaces"])
        self.workdir = config["workdir"]
        self.session = bool(config.get("session"))
        self.as_extra_mb = int(config.get("as_extra_mb", 512))
        self.cgroup_procs = config.get("cgroup_procs", [])
        self.channel_fds: tuple[int, ...] = ()
        for name in config.get("preload", []):
            try:
                __import__(name)
            except Exception:
                pass
        if self.session and self.namespaces:
            # a mount namespace of our own: bwrap's is owned by a user namespace we lack
            # CAP_SYS_ADMIN in, so mounting there is refused
            _check(_libc.unshare(CLONE_NEWNS), "unshare")
            _mount(
                b"tmpfs",
                self.workdir.encode(),
                b"tmpfs",
                MS_NOSUID | MS_NODEV,
                f"size={int(config['session_disk_mb'])}m,mode=0700".encode(),
            )
        import _harness  # bound next to this file

        self.harness = _harness
        # a program's sys.path should not lead to the harness's files
        here = os.path.dirname(os.path.abspath(__file__))
        sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
        self.harness.warm()
        atexit._clear()  # exit hooks of preloaded modules belong to the zygote, not to runs
        gc.collect()
        gc.freeze()  # children never walk (and so never copy) the zygote's objects

    # -- the child side -------------------------------------------------

    def _spawn(self) -> int:
        if not self.namespaces:
            return os.fork()
        _libc.PyOS_BeforeFork()
        pid = _libc.syscall(
            SYS_CLONE, CLONE_NEWPID | CLONE_NEWNS | CLONE_NEWIPC | signal.SIGCHLD, 0, 0, 0, 0
        )
        if pid == 0:
            _libc.PyOS_AfterFork_Child()
        else:
            _libc.PyOS_AfterFork_Parent()
        if pid < 0:
            raise OSError(ctypes.get_errno(), "clone")
        return pid

    def _child(self, req: dict, blobs: list[bytes], fds: dict, secret: list[bytes]) -> None:
        """E: set up its own namespaces and limits, drop every privilege, run.

        With namespaces E is pid 1 of a fresh pid namespace, so when it exits the kernel
        kills everything it started. A pid 1 ignores signals it has no handler for, so
        E installs handlers that end it as the default action would (see ``_harness.die``).
        """
        code = 1
        try:
            channel = self.harness.Channel(secret)  # empties ``secret``
            lim = req["limits"]
            if self.namespaces:
                size = f"size={lim['disk_mb']}m,mode=1777".encode()
                fresh = [b"/tmp", b"/dev/shm"]
                if not self.session:
                    fresh.append(self.workdir.encode())
                for where in fresh:
                    _mount(b"tmpfs", where, b"tmpfs", MS_NOSUID | MS_NODEV, size)
                _mount(b"proc", b"/proc", b"proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, None)
                die = self.harness.death_handler(channel)
                for sig in self.harness.FATAL_BY_DEFAULT:
                    signal.signal(sig, die)
            else:
                os.setsid()
            for path in self.cgroup_procs:
                with open(path, "w") as f:
                    f.write("0")
            os.chdir(req.get("_cwd") or self.workdir)
            self.harness.write_files(req.get("files", []), blobs)
            signal.signal(signal.SIGINT, signal.default_int_handler)
            os.dup2(fds["stdin"], 0)
            os.dup2(fds["out_w"], 1)
            os.dup2(fds["err_w"], 2)
            keep = fds.get("result_w", -1)
            os.dup2(fds["ready_w"], 4)
            os.dup2(keep if keep >= 0 else os.open(os.devnull, os.O_WRONLY), 3)
            os.closerange(5, 65536)
            apply_rlimits(
                lim,
                self.as_extra_mb,
                bool(self.cfg.get("rlimit_as")),
                bool(self.cfg.get("nproc")),
            )
            os.environ.clear()
            os.environ.update(self.cfg["env"])
            os.environ.update(req.get("env") or {})
            drop_privileges(self.bpf)
            os.write(4, b"R")  # set-up done; from here on the program is in charge
            code = self.harness.run(req, blobs, channel)
        except BaseException as exc:
            try:
                os.write(2, f"codegym harness: {exc!r}\n".encode())
            except OSError:
                pass
            code = 125
        os._exit(code)

    # -- the zygote side ------------------------------------------------

    def run(self, req: dict, blobs: list[bytes]) -> tuple[dict, list[bytes]]:
        lim = req["limits"]
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        res_r, res_w = os.pipe() if req.get("tests") else (-1, -1)
        stdin = os.memfd_create("stdin")
        os.write(stdin, blobs[req["stdin"]] if req.get("stdin") is not None else b"")
        os.lseek(stdin, 0, 0)
        fds = dict(stdin=stdin, out_w=out_w, err_w=err_w, result_w=res_w)
        scratch = None
        if not self.namespaces and not self.session:
            import tempfile

            scratch = tempfile.mkdtemp(prefix="run-", dir=self.workdir)
            req["_cwd"] = scratch
        ready_r, fds["ready_w"] = os.pipe()
        secret = [os.urandom(16)]  # this run's key; see Channel
        start = time.monotonic()
        pid = self._spawn()
        if pid == 0:
            for fd in (out_r, err_r, res_r, ready_r, *self.channel_fds):
                if fd >= 0:
                    os.close(fd)
            self._child(req, blobs, fds, secret)
        for fd in (out_w, err_w, stdin, res_w, fds["ready_w"]):
            if fd >= 0:
                os.close(fd)
        watch = self.harness.ExitWatch(pid)  # a pidfd, or gVisor's stand-in for one
        pidfd = watch.fd
        cap = lim["output_bytes"]
        bufs = {out_r: bytearray(), err_r: bytearray(), res_r: bytearray()}
        total = 0
        overflow = timed_out = False
        deadline = start + req["wall_s"]
        poller = select.poll()
        for fd in (out_r, err_r, res_r, pidfd):
            if fd >= 0:
                poller.register(fd, select.POLLIN)
        open_fds = {out_r, err_r, res_r} - {-1}
        exited = False
        while not exited or open_fds:
            left = deadline - time.monotonic()
            if left <= 0 and not exited:
                timed_out = True
                self._kill(pid)
                deadline = float("inf")
                continue
            events = poller.poll(None if left == float("inf") else max(0, left) * 1000)
            for fd, _ in events:
                if fd == pidfd:
                    if watch.exited():
                        exited = True
                        poller.unregister(pidfd)
                    continue
                chunk = os.read(fd, 65536)
                if not chunk:
                    poller.unregister(fd)
                    open_fds.discard(fd)
                    continue
                if fd == res_r:
                    bufs[fd] += chunk[: (1 << 22) - len(bufs[fd])]
                    continue
                room = cap - total
                bufs[fd] += chunk[: max(0, room)]
                total += len(chunk)
                if total > cap and not overflow:
                    overflow = True
                    self._kill(pid)
            if exited and not self.namespaces:
                break  # daemons may hold the pipes open; the tree is killed below
        wall = time.monotonic() - start
        _, status, ru = os.wait4(pid, 0)
        watch.close()
        if not self.namespaces:
            _killpg(pid)  # whatever the program left in its process group
        marks = _read_all(ready_r)
        for fd in (out_r, err_r, res_r, ready_r):
            if fd >= 0:
                os.close(fd)
        if scratch:
            import shutil

            shutil.rmtree(scratch, ignore_errors=True)
        code = os.waitstatus_to_exitcode(status)
        died = self.harness.death_signal(marks[1:], secret[0]) if len(marks) > 1 else None
        if died and os.WIFEXITED(status):  # pid 1 ended by a default-fatal signal (harness.die)
            code = -died
        tests = forged = None
        if res_r >= 0:
            tests, forged = self.harness.parse_results(bytes(bufs[res_r]), secret[0])
        header = {
            "exit_code": code,
            "timed_out": timed_out,
            "overflow": overflow,
            "wall_s": wall,
            "cpu_s": ru.ru_utime + ru.ru_stime,
            "maxrss_kb": ru.ru_maxrss,
            "reported": True,
            "ready": marks[:1] == b"R",
            "tests": tests,
            "forged": forged,
        }
        return header, [bytes(bufs[out_r]), bytes(bufs[err_r])]

    def _kill(self, pid: int) -> None:
        try:
            if self.namespaces:
                os.kill(pid, signal.SIGKILL)  # pid 1 of the run's namespace: takes all
            else:
                _killpg(pid)
        except ProcessLookupError:
            pass


def _killpg(pid: int) -> None:
    for target in (pid,):
        try:
            os.killpg(target, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def _mount(src: bytes, dst: bytes, fstype: bytes, flags: int, data: bytes | None) -> None:
    _check(_libc.mount(src, dst, fstype, flags, data), f"mount {dst.decode()}")


def _read_all(fd: int) -> bytes:
    os.set_blocking(fd, False)
    out = b""
    try:
        while chunk := os.read(fd, 65536):
            out += chunk
    except BlockingIOError:
        pass
    return out


def main() -> None:
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    inp = os.fdopen(os.dup(0), "rb")
    out = os.fdopen(os.dup(1), "wb")
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(2, 1)  # stray prints from the zygote never corrupt the channel
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    config, blobs = read_frame(inp)
    zygote = Zygote(config, blobs[0] if blobs else b"")
    zygote.channel_fds = (inp.fileno(), out.fileno())
    write_frame(out, {"ready": True, "pid": os.getpid(), "python": sys.version.split()[0]})
    while True:
        try:
            req, blobs = read_frame(inp)
        except EOFError:
            return
        op = req.get("op")
        try:
            if op == "run":
                header, out_blobs = zygote.run(req, blobs)
            elif op == "ping":
                header, out_blobs = {"pong": True}, []
            else:
                header, out_blobs = {"error": f"unknown op {op!r}"}, []
        except Exception as exc:
            header, out_blobs = {"error": f"{type(exc).__name__}: {exc}"}, []
        write_frame(out, header, out_blobs)


if __name__ == "__main__":
    main()
