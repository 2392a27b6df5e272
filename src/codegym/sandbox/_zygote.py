"""The fork server that runs inside a sandbox worker (standard library only).

This file runs in the *jail's* interpreter (the system Python by default), never in
codegym's process. The worker imports it (``tier.zygote_argv``: from bytecode the host
compiled, ``tier.zygote_files``; compiling here left megabytes of heap that every run's
fork and exit paid for) and calls ``main``, which reads length-prefixed frames on stdin
and answers on stdout.

Per execution it builds this process tree::

    zygote Z (long-lived, warm imports)
      ├─ T  the forker: a copy of Z taken before any run (jail tier; see start_forker)
      │    └─ R  plain runs' pid namespace's init (pid 1 there): mounts its /proc once,
      │            and sweeps each run away (see _reaper_main)
      ├─ J  the judge: runs assert tests' code, in Z's pid namespace and a mount
      │       namespace of its own, started at the first assert test and kept
      │       (see _start_judge and _judge)
      └─ E  forked by T with CLONE_PARENT, in a fresh ipc namespace and R's pid
              namespace (pid 2), or, in session and workspace workers, as pid 1 of a
              fresh pid namespace with a /proc of its own; the work dir, /tmp and
              /dev/shm are Z's tmpfs, emptied between runs (``Scratch``), or, in session
              and workspace workers, E has a mount namespace of its own with fresh ones;
              rlimits, all capabilities dropped, no_new_privs, not dumpable, seccomp;
              then the harness runs the program (or serves J's calls, or forks per stdio
              case)

An assert test is a fresh E that runs the program and serves the calls of J, which holds
the test; the two talk over a socket pair Z made with E's pipes, and Z judges the test
from J's report and E's fate (CPU from the slot's counter). A stdio batch is one E that
supervises its cases; their expected outputs stay in Z, which compares.

Z enforces the wall deadline and the output cap (it reads the pipes). When E exits, R
kills and reaps every process left in its namespace (or, where E is pid 1 of its own,
the kernel does), before Z takes the run's result, so nothing the program started
survives the run. E never sees Z, T or J: its /proc and pid numbering are R's.

Z has the next E forked as soon as it has answered a run, and that E does every step that
does not depend on the request (namespaces, mounts, signal handlers, fds, privilege drop,
seccomp, the harness's streams) and then blocks reading its request from a pipe. A
request so meets a child that only has to read it and run. (Forking it earlier, while
the current run executes, was measured slower on 2 cores: the fork competes with the
run.) Z moves E into the run's cgroup slot when it hands it the request, so only the run
is charged to the slot. E is prepared for one tmpfs size (the previous run's ``disk_mb``);
a request that asks for another size gets a freshly forked E.

Per run the process that forks E (T, or Z where there is no forker) makes a fresh secret
key before the fork (read straight into a bytearray: no bytes object, freed or not,
holds it) and hands it to the harness in a one-element list the harness empties (so no
frame or object of the forking code keeps it in E, and wiping the Channel's bytearray
leaves no copy). E signs its stdio
results and its death mark (fd 3) with it; Z gets a copy (from T over its socket) and
believes only what verifies (``_harness.Channel``), so a program writing to that fd
forges nothing. Infra comes only from what no program can cause: E reports its set-up on
fd 4 and closes it before the program starts. The zygote's directory is taken off
``sys.path`` once the harness is imported, so programs do not see it there.

Without namespaces (the ``process`` tier) E is an ordinary child in its own session and
the tree is killed by process group; double-forked daemons that call setsid escape that.
"""

from __future__ import annotations

import _signal  # signal.signal's enum conversions cost a run ~60 copy-on-write faults
import atexit
import ctypes
import errno
import fcntl
import gc
import json
import os
import resource
import select
import signal
import socket
import struct
import sys
import time
from dataclasses import dataclass
from typing import Any

_HDR = struct.Struct(">I")
_MAX_FRAME = 1 << 30

CLONE_NEWNS = 0x00020000
CLONE_NEWIPC = 0x08000000
CLONE_NEWPID = 0x20000000
CLONE_PARENT = 0x00008000
SYS_CAPSET = 126
SYS_GETDENTS64 = 217
PR_SET_NO_NEW_PRIVS = 38
PR_SET_DUMPABLE = 4
PR_SET_SECCOMP = 22
SECCOMP_MODE_FILTER = 2
PR_SET_PDEATHSIG = 1
SWEEP_TIMEOUT_S = 30.0  # the reaper kills and reaps what a run left within this, or the worker goes
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_BIND = 1, 2, 4, 8, 4096
MS_REC, MS_PRIVATE = 16384, 1 << 18

_libc = ctypes.PyDLL(None, use_errno=True)  # PyDLL: no GIL hand-off per call
# E's pipe ends, in the order the zygote sends them to the forker
# workspaces (see _mount_workspace): image layers (read-only), a run's fresh upper, and
# the uppers of kept workspaces, all under one folder a run hides once it has mounted
WS_DIR = "/.ws"
WS_LAYERS, WS_RUN, WS_KEEP = f"{WS_DIR}/layers", f"{WS_DIR}/run", f"{WS_DIR}/keep"
MNT_DETACH, MS_REMOUNT = 2, 32
KEEP_SPARE_INODES = 1024  # lent to a full kept workspace, in all, so its runs still mount
E_ENDS = ("out_w", "err_w", "result_w", "ready_w", "req_r", "call")
COUNTER_FDS_LOW = 32  # where the zygote keeps the slot's counters (see _stdio.open_counters)


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def _check(ret: int, what: str) -> None:
    if ret != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


# ---------------------------------------------------------------- framing


def read_raw(stream) -> bytes:
    """One whole frame as it came, so the zygote can hand it on to E unchanged."""
    raw = stream.read(4)
    if len(raw) < 4:
        raise EOFError
    (n,) = _HDR.unpack(raw)
    if n > _MAX_FRAME:
        raise ValueError("frame too large")
    head = stream.read(n)
    sizes = json.loads(head).get("_blobs", [])
    return raw + head + stream.read(sum(sizes))


def parse_frame(raw: bytes) -> tuple[dict, list[bytes]]:
    (n,) = _HDR.unpack_from(raw)
    header = json.loads(raw[4 : 4 + n])
    at, blobs = 4 + n, []
    for k in header.pop("_blobs", []):
        blobs.append(raw[at : at + k])
        at += k
    return header, blobs


def read_frame(stream) -> tuple[dict, list[bytes]]:
    return parse_frame(read_raw(stream))


def frame_bytes(header: dict, blobs: list[bytes] = ()) -> bytes:
    header = dict(header, _blobs=[len(b) for b in blobs])
    data = json.dumps(header, separators=(",", ":")).encode()
    return _HDR.pack(len(data)) + data + b"".join(blobs)


def write_frame(stream, header: dict, blobs: list[bytes] = ()) -> None:
    stream.write(frame_bytes(header, blobs))
    stream.flush()


# ---------------------------------------------------------------- privilege drop


class PrivilegeDrop:
    """Drop every capability, forbid privilege gain, load the seccomp filter.

    The call's C arguments are built once, in the zygote: built in each child they cost
    about 40 copy-on-write page faults per run (a fault costs 4-6 us in this VM).
    """

    def __init__(self, seccomp_bpf: bytes) -> None:
        # Emptying permitted/effective/inheritable clears the ambient set too; with
        # no_new_privs, setuid and file-capability binaries cannot regain anything, so the
        # bounding set need not be walked (41 prctl calls per run).
        self.header = (ctypes.c_uint32 * 2)(0x20080522, 0)
        self.data = (ctypes.c_uint32 * 6)()
        self.prog = None
        if seccomp_bpf:
            self.buf = ctypes.create_string_buffer(seccomp_bpf, len(seccomp_bpf))
            self.prog = ctypes.byref(_SockFprog(len(seccomp_bpf) // 8, ctypes.addressof(self.buf)))
        for name in ("syscall", "prctl", "mount"):
            getattr(_libc, name)  # looked up once here, not by dlsym in every child

    def __call__(self) -> None:
        _check(_libc.syscall(SYS_CAPSET, self.header, self.data), "capset")
        _check(_libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")
        # Not dumpable: the processes the program forks (same uid) cannot open this
        # one's /proc/PID/mem or fd/, where the run's key and result pipe are. A child
        # inherits the flag; an exec'd command gets it back, but holds no key.
        _check(_libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0), "dumpable")
        if self.prog is not None:
            _check(_libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, self.prog, 0, 0), "seccomp")


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
        self.drop_privileges = PrivilegeDrop(seccomp_bpf)
        self.namespaces = bool(config["namespaces"])
        self.workdir = config["workdir"]
        self.session = bool(config.get("session"))
        self.as_extra_mb = int(config.get("as_extra_mb", 512))
        # the run slot's cgroup.procs files, opened once (an open() per run cost the
        # zygote ~27 copy-on-write faults); each E closes them before the program runs
        self.slot_fds = [
            os.open(p, os.O_WRONLY | os.O_CLOEXEC) for p in config.get("cgroup_procs", [])
        ]
        self.channel_fds: tuple[int, ...] = ()
        self.forker: socket.socket | None = None  # the line to T, see start_forker
        # plain runs share one pid namespace, whose init R sweeps each run away (_sweep)
        self.shared_pidns = False
        self.reaper: socket.socket | None = None  # the line to R (see _reaper_main)
        self.ready: _Ready | None = None  # the next E, forked ahead of its request
        self.last_shape: str | None = None  # what the last run's E was prepared for
        self.want = ""  # the shape of E the current request needs (see _shape)
        self.judge_ctl: socket.socket | None = None  # the worker's judge (_start_judge)
        self.judge_pid = -1
        self.judge_sources: dict[str, int] = {}
        self.judge_site: tuple[str, ...] = ()  # the image packages it imports from
        for name in config.get("preload", []):
            try:
                __import__(name)
            except Exception:
                pass
        self.ws = config.get("workspaces")  # {"root": ...} when runs may use images
        # plain runs share this zygote's mount namespace and scratch (see Scratch)
        self.scratch: Scratch | None = None
        self.own_mounts = False  # a mount namespace of this zygote's own (where it may mount)
        if self.namespaces and config.get("shared_mounts") and not (self.session or self.ws):
            _check(_libc.unshare(CLONE_NEWNS), "unshare")
            self.own_mounts = True
            if _private_mounts():
                dirs = (self.workdir, "/tmp", "/dev/shm")
                self.scratch = Scratch(dirs, bool(config.get("tmpfs_inodes")))
        if (self.session or self.ws) and self.namespaces:
            # a mount namespace of our own: bwrap's is owned by a user namespace we lack
            # CAP_SYS_ADMIN in, so mounting there is refused
            _check(_libc.unshare(CLONE_NEWNS), "unshare")
            self.own_mounts = True
            if self.session:
                size = f"size={int(config['session_disk_mb'])}m,mode=0700".encode()
                _mount(b"tmpfs", self.workdir.encode(), b"tmpfs", MS_NOSUID | MS_NODEV, size)
            if self.ws:
                # kept workspaces' uppers, one size-capped tmpfs each (see workspace_op)
                flags = MS_NOSUID | MS_NODEV
                _mount(b"tmpfs", WS_KEEP.encode(), b"tmpfs", flags, b"size=1m,mode=0700")
        import _harness  # bound next to this file, with the modules below
        import _judge
        import _serve
        import _stdio

        self.harness, self.judge, self.stdio = _harness, _judge, _stdio
        del _serve  # imported here so a run finds it without the zygote's directory
        _stdio._NS = self.namespaces
        # per-test CPU: the slot's counters (without them, E's rusage), open here for good
        counters = config.get("counters") or {}
        self.counter_fds = _stdio.open_counters(counters, COUNTER_FDS_LOW)
        _stdio.COUNTERS = tuple(self.counter_fds)
        self.meter = _stdio.Meter(self.counter_fds) if counters else None
        self._cover([*config.get("cgroup_procs", []), *counters.values()])
        # a program's sys.path should not lead to the harness's files
        here = os.path.dirname(os.path.abspath(__file__))
        sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
        self.harness.warm()
        # the runs' environment, set here once so each child inherits it ready-made
        os.environ.clear()
        os.environ.update(config["env"])
        atexit._clear()  # exit hooks of preloaded modules belong to the zygote, not to runs
        gc.collect()
        gc.freeze()  # children never walk (and so never copy) the zygote's objects

    def _cover(self, paths: list[str]) -> None:
        """Put the folders of the slot's files out of every run's sight, once their fds
        are open: a run that can read the slot's counters learns what the runs before it
        did (the CPU total is a channel from one run to the next, the OOM count another),
        and its cgroup.procs is none of its business either."""
        if not paths or not self.own_mounts:
            return
        flags = MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC
        for folder in sorted({os.path.dirname(p) for p in paths}):
            _mount(b"tmpfs", folder.encode(), b"tmpfs", flags, b"size=4k,mode=0555")

    # -- the child side -------------------------------------------------

    def _clone_flags(self) -> int:
        """A run's own namespaces: ipc always; pid unless it goes into R's (see
        start_forker); mount unless it shares Scratch."""
        if self.shared_pidns:
            return CLONE_NEWIPC
        return CLONE_NEWPID | CLONE_NEWIPC | (0 if self.scratch else CLONE_NEWNS)

    def _spawn(self) -> int:
        if not self.namespaces:
            return self.harness.fork()
        return self.harness.fork(self._clone_flags())

    def _child(self, fds: dict, secret: list[bytes], shape: str, cwd: str | None) -> None:
        """E: set up its namespaces, drop every privilege, wait for the request, run it.

        Everything that does not depend on the request happens before it arrives (the
        zygote forks E ahead of time), so a request meets a child that is ready.

        A plain jail run's E is pid 2 of R's namespace, where R sweeps away what it
        started once it exits (``_sweep``). Elsewhere with namespaces E is pid 1 of a
        fresh pid namespace, so when it exits the kernel kills everything it started; a
        pid 1 ignores signals it has no handler for, so there E installs handlers that
        end it as the default action would (see ``_harness.death_handler``).

        The set-up mark goes on fd 4, which E closes before the program starts: nothing
        the program does can make a run look like a failed set-up (``infra``).
        """
        code = 1
        try:
            channel = self.harness.Channel(secret)  # empties ``secret``
            disk_mb, ws = _parse_shape(shape)
            full = ""
            if self.shared_pidns:
                pass  # R's pid namespace, with the /proc R mounted once; Z's scratch
            elif self.scratch is not None:
                # the zygote's namespace, its scratch emptied for this run: the /proc
                # mounted below goes over the jail's (the last run's goes)
                Scratch.take_down_proc()
            elif self.namespaces:
                size = _tmpfs_opts(disk_mb, bool(self.cfg.get("tmpfs_inodes")))
                fresh = [b"/tmp", b"/dev/shm"]
                if not self.session and ws is None:
                    fresh.append(self.workdir.encode())
                for where in fresh:
                    _mount(b"tmpfs", where, b"tmpfs", MS_NOSUID | MS_NODEV, size)
                if ws is not None:
                    full = self._mount_workspace(ws, size)
                elif self.ws:  # a plain run in a workspace worker sees no kept workspace
                    _libc.umount2(WS_KEEP.encode(), MNT_DETACH)
                    hide = MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC
                    _mount(b"tmpfs", WS_DIR.encode(), b"tmpfs", hide, b"size=4k,mode=0")
            if self.namespaces and not self.shared_pidns:
                # a /proc of this run's own pid namespace; the host's kernel command line
                # is none of the program's business
                _mount(b"proc", b"/proc", b"proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, None)
                _mount(b"/dev/null", b"/proc/cmdline", None, MS_BIND, None)
                die = self.harness.death_handler(channel)
                for sig in self.harness.FATAL_BY_DEFAULT:
                    _signal.signal(sig, die)
            elif not self.namespaces:
                # no namespace ends this run with its worker: the kernel must
                _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
            # a session and process group of the run's own: E was in the worker's, and a
            # program's kill(0, SIGKILL) took the worker with it (infra, found by review)
            os.setsid()
            os.chdir(cwd or self.workdir)
            _signal.signal(_signal.SIGINT, _signal.default_int_handler)
            _signal.signal(_signal.SIGPIPE, _signal.SIG_DFL)  # the zygote ignores it
            os.dup2(fds["out_w"], 1)
            os.dup2(fds["err_w"], 2)
            os.dup2(fds["result_w"], 3)
            os.dup2(fds["ready_w"], 4)
            os.dup2(fds["req_r"], 5)
            os.dup2(fds["call"], 6)
            for i, fd in enumerate(self.counter_fds.values()):  # a stdio batch's meter
                os.dup2(fd, self.stdio.COUNTER_FD + i)
            os.closerange(self.stdio.COUNTER_FD + len(self.counter_fds), 65536)
            _move(os.memfd_create("stdin"), 0)
            self.drop_privileges()
            self.harness.standby()
            with os.fdopen(5, "rb") as inp:
                req, blobs = read_frame(inp)  # blocks until the zygote hands over a run
            if req.get("mode") != "serve":
                os.close(6)
            if not req.get("tests"):  # only a stdio batch's supervisor reads the counters
                os.closerange(self.stdio.COUNTER_FD, self.stdio.COUNTER_FD + len(self.counter_fds))
            if req.get("stdin") is not None:
                os.write(0, blobs[req["stdin"]])
                os.lseek(0, 0, 0)
            failed = full or self.harness.write_files(".", req.get("files", []), blobs)
            if failed:
                os.write(4, b"F" + failed.encode("utf-8", "replace")[:2000])
                os._exit(125)
            apply_rlimits(
                req["limits"],
                self.as_extra_mb,
                bool(self.cfg.get("rlimit_as")),
                bool(self.cfg.get("nproc")),
            )
            if req.get("env"):
                os.environ.update(req["env"])
            os.write(4, b"R")  # set-up done; from here on the program is in charge
            os.close(4)
            code = self.harness.run(req, blobs, channel)
        except EOFError:
            code = 0  # the zygote went away (or discarded us) before handing over a run
        except BaseException as exc:
            try:
                os.write(2, f"codegym harness: {exc!r}\n".encode())
            except OSError:
                pass
            code = 125
        os._exit(code)

    def _mount_workspace(self, ws: dict, size: bytes) -> str:
        """Mount the run's workspace at the work dir: the image's layers, read-only, under
        a writable upper (a fresh tmpfs of the run's size, or a kept workspace's), then
        cover the folder that holds them: the overlay keeps what it needs, and the
        program sees neither the layers' paths nor any other workspace."""
        keep = ws.get("keep")
        root = f"{WS_KEEP}/{keep}" if keep else WS_RUN
        if not keep:
            _mount(b"tmpfs", root.encode(), b"tmpfs", MS_NOSUID | MS_NODEV, size)
            os.mkdir(f"{root}/u", 0o755)
            os.mkdir(f"{root}/w", 0o700)
        lower = ":".join(f"{WS_LAYERS}/{h}" for h in reversed(ws["layers"]))
        opts = f"lowerdir={lower},upperdir={root}/u,workdir={root}/w,userxattr".encode()
        flags = MS_NOSUID | MS_NODEV
        full = ""
        if _libc.mount(b"overlay", self.workdir.encode(), b"overlay", flags, opts) != 0:
            err = ctypes.get_errno()
            if not (keep and err == errno.ENOSPC and self.cfg.get("tmpfs_inodes")):
                _check(-1, "mount the workspace")
            # the workspace's runs used every inode, and overlayfs needs a few to mount:
            # lend it some (at most KEEP_SPARE_INODES over the quota, ever), else the
            # workspace is the program's own dead end, never a failure of ours
            files = os.statvfs(root).f_files
            if files < int(ws.get("inodes", 0)) + KEEP_SPARE_INODES:
                more = f"nr_inodes={files + 64}".encode()
                _mount(b"none", root.encode(), None, MS_REMOUNT | flags, more)
            if _libc.mount(b"overlay", self.workdir.encode(), b"overlay", flags, opts) != 0:
                full = (
                    "the workspace has no free inodes left (its quota and a spare are used "
                    "up): freeze it and fork a copy, or open a new one"
                )
        # what the overlay is made of stays out of sight: the kept uppers (this one's and
        # its neighbours') and the run's tmpfs are detached from this run's namespace (the
        # overlay holds what it needs), and the folder under them is covered
        _libc.umount2(WS_KEEP.encode(), MNT_DETACH)
        if not keep:
            _libc.umount2(root.encode(), MNT_DETACH)
        hide = MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC
        _mount(b"tmpfs", WS_DIR.encode(), b"tmpfs", hide, b"size=4k,mode=0")
        return full

    # -- the zygote side ------------------------------------------------

    def workspace_op(self, op: str, req: dict) -> tuple[dict, list[bytes]]:
        """Open, close or export a kept workspace: its upper, a tmpfs of its own under
        ``WS_KEEP`` that every run in it mounts (one run at a time: the host's lock)."""
        if not self.ws:
            return {"error": "this worker was not started for workspaces"}, []
        wid = str(req.get("id", ""))
        if not wid or not all(c.isalnum() or c == "-" for c in wid) or len(wid) > 64:
            return {"error": f"bad workspace id {wid!r}"}, []
        path = f"{WS_KEEP}/{wid}"
        if self.ready is not None and (_parse_shape(self.ready.shape)[1] or {}).get("keep") == wid:
            self.discard()  # a prepared run holds the workspace mounted
        if op == "ws_open":
            opts = _tmpfs_opts(int(req["disk_mb"]), bool(self.cfg.get("tmpfs_inodes")), "0700")
            os.mkdir(path, 0o700)
            _mount(b"tmpfs", path.encode(), b"tmpfs", MS_NOSUID | MS_NODEV, opts)
            os.mkdir(f"{path}/u", 0o755)
            os.mkdir(f"{path}/w", 0o700)
            return {"ok": True}, []
        if not os.path.isdir(path):
            return {"error": f"no workspace {wid!r} in this worker"}, []
        if op == "ws_close":
            _check(_libc.umount2(path.encode(), MNT_DETACH), "umount")
            os.rmdir(path)
            return {"ok": True}, []
        return _export(f"{path}/u", int(req.get("max_bytes", 1 << 30)))

    def prepare(self, shape: str) -> _Ready:
        """Fork the next E now, so that it is set up before its request arrives.

        ``shape`` is what E's set-up depends on (see ``_shape``): its tmpfs size and the
        workspace it mounts, if any."""
        if self.ready is not None and self.ready.shape == shape:
            return self.ready
        self.discard()
        if self.scratch is not None:
            self.scratch.size(_parse_shape(shape)[0])  # emptied after each run (_drive)
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        res_r, res_w = os.pipe()
        ready_r, ready_w = os.pipe()
        req_r, req_w = os.pipe()
        # an assert test's judge talks to the program over this pair (see _judge)
        call_j, call_e = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        call = call_e.detach()
        call_j_fd = call_j.detach()
        fds = dict(out_w=out_w, err_w=err_w, result_w=res_w, ready_w=ready_w, req_r=req_r)
        fds["call"] = call
        scratch = None
        if not self.namespaces and not self.session:
            import tempfile

            scratch = tempfile.mkdtemp(prefix="run-", dir=self.workdir)
        ends = (out_r, err_r, res_r, ready_r, req_w, call_j_fd)
        try:
            if self.forker is not None:
                pid, key = self._fork_through_forker(fds, shape)
            else:
                pid, key = self._fork_here(fds, ends, shape, scratch)
        except BaseException:
            for fd in ends:
                os.close(fd)
            raise
        finally:
            for fd in fds.values():
                os.close(fd)
        watch = self.harness.ExitWatch(pid)  # a pidfd, or gVisor's stand-in for one
        self.ready = _Ready(
            pid, watch, req_w, out_r, err_r, res_r, ready_r, call_j_fd, key, shape, scratch
        )
        return self.ready

    def _fork_here(
        self, fds: dict, zygote_ends: tuple[int, ...], shape: str, scratch: str | None
    ) -> tuple[int, bytes]:
        """Fork E from the zygote itself (tiers without a forker: ``process``, ``gvisor``)."""
        secret = [_fresh_key()]  # this run's key; see Channel
        pid = self._spawn()
        if pid == 0:
            try:
                for fd in (*zygote_ends, *self.channel_fds):
                    os.close(fd)
                self._child(fds, secret, shape, scratch)
            finally:
                os._exit(125)  # _child never returns: nothing may reach the zygote's loop
        return pid, bytes(secret[0])

    # -- the forker T -------------------------------------------------------

    def start_forker(self) -> None:
        """Fork T, a copy of this zygote taken before any run, that forks every E.

        The zygote reads every request and every answer passes through it, and freed
        memory keeps its bytes: a child forked from the zygote could read earlier runs'
        code, stdin and output in its own heap. T never handles run data (it receives
        E's pipe ends and the tmpfs size over a socket, and answers E's pid and key), so
        an E forked from T holds nothing of any other run. T clones E with
        ``CLONE_PARENT``: E is the zygote's child, which watches and reaps it as before.
        """
        z_end, t_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        r_end = None
        if self.scratch is not None:  # plain runs: one pid namespace for all (see _sweep)
            self.reaper, r_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            self.shared_pidns = True
        pid = self.harness.fork()
        if pid == 0:
            try:
                z_end.close()
                if self.reaper is not None:
                    self.reaper.close()
                self._forker_loop(t_end, r_end)
            finally:
                os._exit(0)
        t_end.close()
        self.forker = z_end
        if r_end is not None:
            r_end.close()
            if self.reaper is not None and self.reaper.recv(8) != b"ready":
                raise OSError("the runs' pid namespace could not be set up")

    def _forker_loop(self, sock: socket.socket, reaper: socket.socket | None) -> None:
        _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        # keep the low fds taken, so E's pipe ends never land on 3-6 (see _child)
        devnull = os.open(os.devnull, os.O_RDWR)
        for fd in self.channel_fds:
            os.dup2(devnull, fd)
        flags = CLONE_PARENT | self._clone_flags()
        # nothing here starts a thread, and a run's /proc may cover the jail's (Scratch)
        single = self.harness._single_threaded()
        if reaper is not None:
            self._start_reaper(reaper, sock, single)
        while True:
            msg, got, _, _ = socket.recv_fds(sock, 8192, len(E_ENDS))
            if not msg:
                return  # the zygote is gone
            secret = [_fresh_key()]  # this run's key; see Channel
            try:
                pid = self.harness.fork(flags, single)
            except OSError as e:
                pid = -(e.errno or 1)
            if pid == 0:
                try:
                    sock.close()
                    self._child(dict(zip(E_ENDS, got, strict=True)), secret, msg.decode(), None)
                finally:
                    os._exit(125)
            for fd in got:
                os.close(fd)
            sock.send(struct.pack("i", pid) + (bytes(secret.pop()) if pid > 0 else b""))

    def _start_reaper(self, end: socket.socket, forker: socket.socket, single: bool) -> None:
        """In T: fork R, pid 1 of the pid namespace every plain run of this worker is
        forked into from now on (T's children go there; T stays outside, unseen).

        R holds no run's data (a copy of T, taken before any run), never runs a program,
        and is not dumpable; runs see it as /proc/1 and cannot signal it (the kernel drops
        what a namespace sends its init) or trace it (seccomp; it keeps capabilities they
        lack). A pid and a /proc mount a run cost about a third of a plain run's machine
        time (benchmarks/forkserver_floor.py, ``reused-pidns``): R pays for them once.
        """
        pid = self.harness.fork(CLONE_NEWPID, single)
        if pid == 0:
            try:
                forker.close()
                self._reaper_main(end)
            finally:
                os._exit(0)
        end.close()
        pidfd = os.pidfd_open(pid)
        _check(_libc.setns(pidfd, CLONE_NEWPID), "setns into the runs' pid namespace")
        os.close(pidfd)

    def _reaper_main(self, end: socket.socket) -> None:
        """R: mount the namespace's /proc once; then, at each word from the zygote, kill
        every process of the namespace but itself (``kill(-1)`` from its init), reap them
        all, and set the next pid back to 2, so no run sees a number an earlier one used
        or anything an earlier one left running."""
        _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        sock = end.detach()
        os.dup2(sock, 3)
        devnull = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(devnull, fd)
        os.closerange(4, 65536)
        link = socket.socket(fileno=3)
        Scratch.take_down_proc()
        _mount(b"proc", b"/proc", b"proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, None)
        _mount(b"/dev/null", b"/proc/cmdline", None, MS_BIND, None)
        last_pid = os.open("/proc/sys/kernel/ns_last_pid", os.O_WRONLY | os.O_CLOEXEC)
        _check(_libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0), "dumpable")
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGPIPE):
            signal.signal(sig, signal.SIG_IGN)
        link.send(b"ready")
        while link.recv(8):
            try:
                os.kill(-1, signal.SIGKILL)  # from the init: all of the namespace but it
            except ProcessLookupError:
                pass  # the run left nothing
            while True:
                try:
                    os.waitpid(-1, 0)
                except ChildProcessError:
                    break
            os.pwrite(last_pid, b"1", 0)
            link.send(b"swept")

    def _sweep(self) -> None:
        """Have R kill and reap whatever the last run left in the shared pid namespace
        (a run's own namespace died with its pid 1; this one stays for the next run)."""
        if self.reaper is None:
            return
        self.reaper.settimeout(SWEEP_TIMEOUT_S)
        try:
            self.reaper.send(b"s")
            if self.reaper.recv(8) != b"swept":
                raise OSError("the runs' pid namespace's init is gone")
        except TimeoutError:
            raise OSError("the runs' pid namespace could not be swept in time") from None

    def _fork_through_forker(self, fds: dict, shape: str) -> tuple[int, bytes]:
        assert self.forker is not None
        socket.send_fds(self.forker, [shape.encode()], [fds[k] for k in E_ENDS])
        reply = self.forker.recv(64)
        if len(reply) < 4:
            raise OSError("the zygote's forker process died")
        (pid,) = struct.unpack_from("i", reply)
        if pid < 0:
            raise OSError(-pid, f"clone: {os.strerror(-pid)}")
        return pid, reply[4:]

    def discard(self) -> None:
        """Kill and reap a prepared E that will not be used."""
        e, self.ready = self.ready, None
        if e is None:
            return
        self._kill(e.pid)
        os.waitpid(e.pid, 0)
        e.close()
        self._sweep()

    def _enter_slot(self, pid: int) -> None:
        """Move E into the run's cgroup slot (Z may: same uid, and the slot's
        ``cgroup.procs`` is delegated): from here on E is charged to the run."""
        data = b"%d" % pid
        for fd in self.slot_fds:
            os.pwrite(fd, data, 0)

    # -- a request ------------------------------------------------------

    def run(self, req: dict, blobs: list[bytes], raw: bytes) -> tuple[dict, list[bytes]]:
        """One request: a plain run, a batch of stdio cases, or a batch of assert tests."""
        tests = req.get("tests") or []
        files = req.get("files") or []
        self.want = _shape(req)
        if self.session and files:
            # the session's files are written here, outside any run: a program cannot
            # redirect them (symlinks), lock them out (modes) or crash the writer
            failed = self.harness.write_files(self.workdir, files, blobs)
            if failed:
                return {"setup_error": failed, "reported": True}, [b"", b""]
            req = {**req, "files": []}
            raw = b""
        if tests and tests[0].get("kind") == "assert":
            return self._run_asserts(req, blobs)
        if tests:
            # E gets the inputs, never the expected outputs: those stay here
            keep = list(blobs)
            for t in tests:
                keep[t["expected"]] = b""
            e_tests = [{"kind": "stdio", "stdin": t["stdin"]} for t in tests]
            raw = frame_bytes({**req, "tests": e_tests}, keep)
        elif not raw:
            raw = frame_bytes(req, blobs)
        cap = _Capture(req["limits"]["output_bytes"])
        # a stdio batch's results carry every case's output: room for all of them (a cut
        # line would read as forged, and fail a correct program's whole batch)
        room = (1 << 22) + len(tests) * self.stdio.RESULT_MAX
        obs = self._drive(raw, req["limits"], req["wall_s"], cap, results_max=room)
        header = obs.header()
        if tests and header.get("tests") is not None:
            by_index = {r.get("i"): r for r in header["tests"]}
            for i, t in enumerate(tests):
                if i in by_index and isinstance(by_index[i], dict):
                    by_index[i].update(self._compared(by_index[i], t, blobs[t["expected"]]))
        return header, [bytes(cap.out), bytes(cap.err)]

    def _compared(self, result: dict, test: dict, expected: bytes) -> dict:
        """A case's output compared with its expected output; whatever the output is, a
        failure to compare is the output's (the program's) error, never the zygote's."""
        try:
            return self.stdio.report_for(result, test, expected)
        except Exception as e:
            result.pop("out", None)
            why = f"the output could not be compared: {type(e).__name__}"
            return {**result, "passed": False, "verdict": "error", "detail": why}

    def _drive(
        self,
        raw: bytes,
        lim: dict,
        wall_s: float,
        cap: _Capture,
        judge: dict | None = None,
        results_max: int = 1 << 22,
    ) -> _Observed:
        """Hand a prepared E its request and watch it to the end (and its judge, if any).

        With a judge the run ends when the judge has reported (E is then killed) or at the
        deadline; without one, when E and everything it started is gone.
        """
        e = self.prepare(self.want)
        if os.waitid(os.P_PID, e.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None:
            self.discard()  # the idle E died (killed from outside): fork afresh
            e = self.prepare(self.want)
        self.ready = None
        obs = _Observed(e)
        obs.pid1 = self.namespaces and not self.shared_pidns
        j_r = -1
        jbuf = bytearray()
        if judge is not None:
            j_r = self._hand_to_judge(judge, e.call_j)
            e.call_j = -1
            obs.cpu0 = self.meter.read() if self.meter else None
        self._enter_slot(e.pid)
        start = time.monotonic()
        try:
            _write_all(e.req_w, raw)
        except BrokenPipeError:
            pass  # E died before its run: judged below from its exit status
        os.close(e.req_w)
        e.req_w = -1
        pid, watch = e.pid, e.watch
        out_r, err_r, res_r = e.out_r, e.err_r, e.res_r
        pidfd = watch.fd
        bufs = {out_r: cap.out, err_r: cap.err, res_r: bytearray()}
        deadline = start + wall_s
        poller = select.poll()
        for fd in (out_r, err_r, res_r, pidfd, j_r):
            if fd >= 0:
                poller.register(fd, select.POLLIN)
        open_fds = {out_r, err_r, res_r}
        exited = False
        judging = j_r >= 0
        while not exited or open_fds or judging:
            left = deadline - time.monotonic()
            if left <= 0 and (not exited or judging):
                obs.timed_out = True
                self._kill(pid)
                if judging:
                    judging = False
                    poller.unregister(j_r)
                    self._stop_judge()  # it is stuck in the test's code: a fresh one next
                deadline = float("inf")
                continue
            events = poller.poll(None if left == float("inf") else max(0, left) * 1000)
            for fd, _ in events:
                if fd == pidfd:
                    if watch.exited():
                        exited = True
                        poller.unregister(pidfd)
                        self._sweep()  # what E left holds its pipes: gone now
                    continue
                chunk = os.read(fd, 65536)
                if fd == j_r:
                    jbuf += chunk
                    done = _frame(jbuf)
                    if done is not None or not chunk:  # a result, or the judge died
                        judging = False
                        poller.unregister(j_r)
                        obs.judged = _as_result(done)
                        if done is None:
                            self._stop_judge()
                        if not exited and _running(pid):
                            obs.killed_by_us = True
                            self._kill(pid)  # the test is over: so is the program
                    continue
                if not chunk:
                    poller.unregister(fd)
                    open_fds.discard(fd)
                    continue
                if fd == res_r:
                    bufs[fd] += chunk[: results_max - len(bufs[fd])]
                    continue
                if cap.take(fd == out_r, chunk) and not obs.overflow:
                    obs.overflow = True
                    self._kill(pid)
                    if judging:
                        judging = False
                        poller.unregister(j_r)
                        self._stop_judge()
            if exited and not self.namespaces and not judging:
                break  # daemons may hold the pipes open; the tree is killed below
        obs.wall = time.monotonic() - start
        _, obs.status, obs.ru = os.wait4(pid, 0)
        if self.scratch is not None:
            # E's pid namespace, or R's sweep, took every process of the run
            self.scratch.reset()
        if not self.namespaces:
            _killpg(pid)  # whatever the program left in its process group
        if self.meter is not None and obs.cpu0 is not None:
            obs.cpu1 = self.meter.read()
        obs.marks = _read_all(e.ready_r)
        obs.results = bytes(bufs[res_r])
        e.close()
        self.last_shape = self.want
        return obs

    # -- assert tests ---------------------------------------------------

    def _run_asserts(self, req: dict, blobs: list[bytes]) -> tuple[dict, list[bytes]]:
        """Each test in a fresh run of the program, judged by a judge it cannot reach.

        The program's run (E, pid 1 of its own namespaces) gets no test code: it runs the
        program and serves calls (``_serve``). The test's code runs in a judge forked
        from this zygote, in this zygote's namespaces (``_judge``), and reports here.
        Each test's CPU time is the slot's counter over its run, everything included.
        """
        lim = req["limits"]
        tests = req["tests"]
        e_req = {k: v for k, v in req.items() if k != "tests"}
        e_req["mode"] = "serve"
        raw = frame_bytes(e_req, blobs)
        cap = _Capture(lim["output_bytes"])
        results: list[dict] = []
        cpu = wall = 0.0
        maxrss = 0
        # the whole batch keeps to the wall time the host gives it (a run's teardown, which
        # a program can slow down, counts too): tests past it are timeouts, not infra
        batch_end = time.monotonic() + float(req["wall_s"])
        site = self._judge_site(req)
        for i, t in enumerate(tests):
            judge = {
                "setup": t.get("setup") or "",
                "code": t["code"],
                "names": list(t.get("program") or []),
                "site": site,
            }
            left = min(float(lim["wall_s"]), batch_end - time.monotonic())
            if left <= 0:
                why = "the batch's wall-clock limit ran out before this test"
                results.append({"i": i, "passed": False, "verdict": "timeout", "detail": why})
                continue
            obs = self._drive(raw, lim, left, cap, judge)
            head = obs.header()
            # (a judge that needs no call can finish before the run is even set up)
            if head["setup_error"] or not (head["ready"] or obs.killed_by_us):
                head.update(tests=None, overflow=cap.overflow)
                return head, [bytes(cap.out), bytes(cap.err)]
            results.append({"i": i, **obs.assert_result(lim, cap)})
            cpu += results[-1]["cpu_s"]
            wall += obs.wall
            maxrss = max(maxrss, obs.ru.ru_maxrss)
            if cap.overflow:
                break
        header = {
            "exit_code": 0,
            "timed_out": False,
            "overflow": cap.overflow,
            "wall_s": wall,
            "cpu_s": cpu,
            "maxrss_kb": maxrss,
            "reported": True,
            "ready": True,
            "tests": results,
            "forged": False,
        }
        return header, [bytes(cap.out), bytes(cap.err)]

    def _judge_site(self, req: dict) -> tuple[str, ...]:
        """Where the judge finds the packages of a run's image: its site-packages folder
        in each layer an image build made (never the run's upper or a frozen workspace's
        layer, which programs wrote), so a test's own ``import numpy`` works where its
        program's does."""
        ws, site = req.get("workspace"), req.get("site")
        if not ws or not site or not self.ws:
            return ()
        rel = os.path.relpath(site, self.workdir)
        if rel.startswith(".."):
            return ()
        # only layers an image build made: a frozen one holds what programs wrote (a .pth
        # there would run here, in the process that decides the test)
        built = ws["layers"][: int(ws.get("built") or 0)]
        found = (f"{WS_LAYERS}/{h}/{rel}" for h in built)
        return tuple(d for d in found if os.path.isdir(d))

    def _hand_to_judge(self, judge: dict, call: int) -> int:
        """Give the worker's judge one test and its end of the call socket to the run;
        returns the fd its result comes back on."""
        if self.judge_ctl is not None and self.judge_site != judge["site"]:
            self._stop_judge()  # another image's packages: a judge that imported none yet
        if self.judge_ctl is None:
            self._start_judge(judge["site"])
        assert self.judge_ctl is not None
        try:
            self._send_test(judge, call)
        except OSError:  # it died since the last test: start another and hand it over
            self._stop_judge()
            self._start_judge(judge["site"])
            self._send_test(judge, call)
        finally:
            os.close(call)
        return self.judge_ctl.fileno()

    def _send_test(self, judge: dict, call: int) -> None:
        """A source the judge has seen goes by its number (it keeps them compiled)."""
        assert self.judge_ctl is not None
        wire = {"names": judge["names"]}
        for part in ("setup", "code"):
            source = judge[part]
            known = self.judge_sources.get(source)
            if known is None:
                known = self.judge_sources[source] = len(self.judge_sources)
                wire[part] = source
            wire[part + "_id"] = known
        socket.send_fds(self.judge_ctl, [b"T"], [call])
        self.judge_ctl.sendall(frame_bytes(wire))

    def _start_judge(self, site: tuple[str, ...] = ()) -> None:
        """Fork the worker's judge: one process that runs every assert test's code, one
        test at a time, where no run can reach it (see ``_judge``).

        It is set up once (privileges dropped, seccomp loaded, an address-space bound) and
        kept: forking a judge per test cost as much CPU as the test. A judge stuck in a
        test's code, or dead, is replaced at the next test.
        """
        z_end, j_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        pid = self.harness.fork()
        if pid == 0:
            try:
                z_end.close()
                self._judge_main(j_end.detach(), site)
            finally:
                os._exit(0)
        j_end.close()
        self.judge_ctl, self.judge_pid = z_end, pid
        self.judge_sources = {}  # what this judge was sent, by number
        self.judge_site = site

    def _stop_judge(self) -> None:
        if self.judge_ctl is None:
            return
        _kill_pid(self.judge_pid)
        os.waitpid(self.judge_pid, 0)
        self.judge_ctl.close()
        self.judge_ctl, self.judge_pid = None, -1

    def _judge_main(self, ctl: int, site: tuple[str, ...] = ()) -> None:
        """The judge's process: no program code ever runs here. ``site``: an image's
        site-packages in its read-only layers, which the tests' code may import from."""
        _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        ctl = fcntl.fcntl(ctl, fcntl.F_DUPFD, 16)
        os.dup2(ctl, 3)
        devnull = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(devnull, fd)
        os.closerange(4, 65536)
        hidden = False
        if self.namespaces:
            # a mount namespace of its own where the work dir is an empty, read-only
            # folder: a session's workspace (which its programs write) is out of sight.
            # Only where mounts can be made private: under gVisor this one propagated to
            # the work dir of a run forked earlier. (Nothing the judge does reads files
            # there anyway: it imports no module a program names, and its sys.path is
            # the system's.)
            _check(_libc.unshare(CLONE_NEWNS), "unshare")
            if self.scratch is not None:
                self.scratch.leave()
            if _private_mounts():
                flags = MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC
                _mount(b"tmpfs", self.workdir.encode(), b"tmpfs", flags, b"size=4k,mode=0555")
                hidden = True
        os.chdir(self.workdir if hidden else "/")
        signal.signal(signal.SIGPIPE, signal.SIG_IGN)  # a gone program is an EPIPE
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        # what the programs return must not exhaust the worker (tests' memory is small)
        size_mb = _address_space_mb()
        if size_mb is not None:
            memory = (size_mb + 2048) << 20
            resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
        if site:
            import site as _site

            for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
                os.environ[var] = "1"  # one judge, one thread: no pools sized to the host
            for d in site:
                _site.addsitedir(d)
        self.drop_privileges()
        self.judge.serve_tests(3)

    def _kill(self, pid: int) -> None:
        try:
            if self.namespaces:
                # pid 1 of the run's namespace takes all with it; in R's, E goes first and
                # R sweeps the rest once E is seen gone (_drive)
                os.kill(pid, signal.SIGKILL)
            else:
                _killpg(pid)
        except ProcessLookupError:
            pass


class Scratch:
    """The tmpfs work dir, /tmp and /dev/shm that a zygote's plain runs use in turn.

    A mount namespace per run cost about a quarter of a run's CPU here (the kernel copies
    and tears down every mount of the jail for each one), so plain runs share the
    zygote's namespace instead, and these folders are made as a fresh tmpfs again after
    each run, before its answer goes (so tearing down what it left is on its clock, as its
    own namespace's teardown was). By then no process of the run is left (its pid
    namespace died with it), so what it left is only files and the folders' own state:

    - top-level files are unlinked (``unlinkat`` by name under an open fd of the mount's
      root: no path followed, no folder walked);
    - the root's times are set to now, so none of the program's values carry over;
    - the tmpfs is replaced whole if the run left a folder, more than ``MAX_FILES``
      files, a root whose mode, owner, flags or extended attributes (ACLs among them) it
      changed, or made names it removed again (files, renames, links: the inode counter
      and the directory positions ``getdents`` reports would tell the next run how
      many), or if anything in the check fails.

    What a later run can still learn from the inode numbers and positions: whether the
    tmpfs was replaced, and if not, how many files the last run left (0 to 64 a folder);
    and the time of the reset.
    A new size (the run's ``disk_mb``) replaces all three.
    """

    MAX_FILES = 64
    FS_IOC_GETFLAGS = 0x80086601

    def __init__(self, dirs: tuple[str, ...], inodes: bool) -> None:
        self.dirs, self.inodes = dirs, inodes
        self.mb: int | None = None
        self.fds: dict[str, int] = {}
        self.last: dict[str, tuple[int, int]] = {}  # the last probe's inode and position
        self.flags: dict[str, bytes] = {}  # the fresh root's inode flags

    def size(self, disk_mb: int) -> None:
        """Mount every folder at ``disk_mb``, unless they are at that size already."""
        if self.mb != disk_mb:
            for d in self.dirs:
                self._mount(d, disk_mb)
            self.mb = disk_mb

    def reset(self) -> None:
        """After a run: every folder as a fresh one for the next."""
        assert self.mb is not None
        for d in self.dirs:
            try:
                fresh = d in self.fds and self._emptied(d)  # (not after a failed mount)
            except OSError:
                fresh = False  # whatever made the check fail goes with the tmpfs
            if not fresh:
                self._mount(d, self.mb)

    @staticmethod
    def take_down_proc() -> None:
        """Unmount the /proc of runs gone by (each E mounts its own over the jail's):
        /proc/self resolves only in a /proc of this process's own pid namespace."""
        for _ in range(8):
            if os.path.exists("/proc/self"):
                return
            _check(_libc.umount2(b"/proc", MNT_DETACH), "unmount a run's /proc")
        raise OSError("the jail's own /proc is not under the runs' ones")

    def leave(self) -> None:
        """For the judge, in a mount namespace of its own: drop every mount of the runs'
        (their files stay out of its sight and are not held in memory by it), with a
        /tmp and /dev/shm of its own."""
        self.take_down_proc()
        for d in self.dirs:
            if self.mb is not None:
                _libc.umount2(d.encode(), MNT_DETACH)
            if d != self.dirs[0]:
                opts = b"size=64m,mode=1777"
                _mount(b"tmpfs", d.encode(), b"tmpfs", MS_NOSUID | MS_NODEV, opts)

    def _emptied(self, d: str) -> bool:
        fd = self.fds[d]
        st = os.fstat(fd)
        if st.st_mode != 0o41777 or (st.st_uid, st.st_gid) != (os.getuid(), os.getgid()):
            return False
        if os.listxattr(fd) or self._root_flags(fd) != self.flags[d]:
            return False
        names, inodes = [], set()
        os.lseek(fd, 0, os.SEEK_SET)  # scandir reads on from where this fd's listing is
        with os.scandir(fd) as it:
            for entry in it:
                if entry.is_dir(follow_symlinks=False) or len(names) == self.MAX_FILES:
                    return False
                names.append(entry.name)
                inodes.add(entry.inode())
        for name in names:
            os.unlink(name, dir_fd=fd)
        # every inode and every name the run made is one it left: tmpfs numbers both in
        # order (inodes, and the directory positions getdents reports), so files made and
        # removed again, renames and links would tell the next run how many
        ino, pos = self._probe(fd)
        last_ino, last_pos = self.last[d]
        if (ino - last_ino, pos - last_pos) != (len(inodes) + 1, len(names) + 1):
            return False
        os.utime(fd)
        self.last[d] = (ino, pos)
        return True

    def _root_flags(self, fd: int) -> bytes:
        return fcntl.ioctl(fd, self.FS_IOC_GETFLAGS, b"\0" * 8)

    @staticmethod
    def _probe(fd: int) -> tuple[int, int]:
        """The inode number and directory position a new file in the (otherwise empty)
        folder gets now; the file is removed again."""
        name = b".codegym-probe"
        f = os.open(name, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_CLOEXEC, 0o600, dir_fd=fd)
        try:
            ino = os.fstat(f).st_ino
            os.lseek(fd, 0, os.SEEK_SET)
            buf = ctypes.create_string_buffer(4096)
            n = _libc.syscall(SYS_GETDENTS64, fd, buf, len(buf))
            if n < 0:
                _check(-1, "getdents64")
            # struct linux_dirent64 (ino, off, reclen, type, name); an entry's ``off`` is
            # where the next one is, so the probe's position is its predecessor's ``off``
            data, at, pos, before = buf.raw[:n], 0, -1, -1
            while at < n:
                _, off, reclen = struct.unpack_from("<QqH", data, at)
                if data[at + 19 : at + reclen].split(b"\0", 1)[0] == name:
                    pos = before
                before = off
                at += reclen
            if pos < 0:
                raise OSError("the probe file is not in its folder's listing")
            return ino, pos
        finally:
            os.close(f)
            os.unlink(name, dir_fd=fd)

    def _mount(self, d: str, disk_mb: int) -> None:
        if d in self.fds:
            os.close(self.fds.pop(d))
            _check(_libc.umount2(d.encode(), MNT_DETACH), f"unmount {d}")
        size = _tmpfs_opts(disk_mb, self.inodes)
        _mount(b"tmpfs", d.encode(), b"tmpfs", MS_NOSUID | MS_NODEV, size)
        fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        self.fds[d] = fd
        self.flags[d] = self._root_flags(fd)
        self.last[d] = self._probe(fd)


class _Capture:
    """The run's stdout and stderr (all tests of a batch together), up to the cap."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.out = bytearray()
        self.err = bytearray()
        self.total = 0
        self.overflow = False

    def take(self, stdout: bool, chunk: bytes) -> bool:
        """Keep what fits; True when the run wrote more than the cap."""
        buf = self.out if stdout else self.err
        buf += chunk[: max(0, self.cap - self.total)]
        self.total += len(chunk)
        if self.total > self.cap:
            self.overflow = True
        return self.overflow


class _Observed:
    """What the zygote saw of one E (and its judge)."""

    def __init__(self, e: _Ready) -> None:
        self.key = e.key
        self.timed_out = self.overflow = self.killed_by_us = False
        self.wall = 0.0
        self.status = 0
        self.ru: Any = None
        self.marks = b""
        self.results = b""
        self.judged: dict | None = None
        self.pid1 = True  # E was its namespace's init: its death marks mean something
        self.cpu0: tuple[float, int] | None = None
        self.cpu1: tuple[float, int] | None = None

    def exit_code(self, harness: Any) -> int:
        code = os.waitstatus_to_exitcode(self.status)
        died = harness.death_signal(self.results, self.key) if self.pid1 else None
        if died and os.WIFEXITED(self.status):  # pid 1 ended by a default-fatal signal
            code = -died
        return code

    def header(self) -> dict:
        import _harness

        tests = forged = None
        if self.results:
            tests, forged = _harness.parse_results(self.results, self.key)
        setup_error = None
        if self.marks[:1] == b"F":
            setup_error = self.marks[1:].decode("utf-8", "replace")
        return {
            "exit_code": self.exit_code(_harness),
            "timed_out": self.timed_out,
            "overflow": self.overflow,
            "wall_s": self.wall,
            "cpu_s": self.ru.ru_utime + self.ru.ru_stime,
            "maxrss_kb": self.ru.ru_maxrss,
            "reported": True,
            "ready": self.marks[:1] == b"R",
            "setup_error": setup_error,
            "tests": tests,
            "forged": forged,
        }

    def assert_result(self, lim: dict, cap: _Capture) -> dict:
        """One assert test's result from its run's fate and its judge's report."""
        import _harness

        if self.cpu0 is not None and self.cpu1 is not None:
            cpu = self.cpu1[0] - self.cpu0[0]
            oom = self.cpu1[1] > self.cpu0[1]
        else:
            cpu, oom = self.ru.ru_utime + self.ru.ru_stime, False
        timing = {"cpu_s": round(cpu, 6), "wall_s": round(self.wall, 6)}
        code = self.exit_code(_harness)
        # our own SIGKILL (the judge was done) is no fate of the program's; any other end,
        # even one that raced our kill, is
        sig = -code if code < 0 and not (self.killed_by_us and code == -signal.SIGKILL) else 0
        xcpu = sig == signal.SIGXCPU and cpu >= _harness.XCPU_MIN_FRACTION * lim["cpu_s"]
        j = self.judged

        def fail(verdict: str, detail: str) -> dict:
            return {"passed": False, "verdict": verdict, "detail": detail, **timing}

        if self.timed_out:
            return fail("timeout", f"wall-clock limit of {lim['wall_s']:.3g}s")
        if self.overflow:
            return fail("output_limit", f"wrote more than {cap.cap} bytes")
        if oom:
            return fail("memory", f"exceeded {lim['memory_mb']} MB")
        if cpu > lim["cpu_s"] or xcpu:
            return fail("timeout", f"CPU limit of {lim['cpu_s']:g}s")
        if j is None:
            # the judge died without a word: only what the program sent it can do that
            return fail("error", "the test's judge ended without a result")
        if j.get("verdict") == "infra":
            return fail("infra", str(j.get("detail", ""))[:500])
        if j.get("gone"):
            # a cgroup's OOM count is the word on memory (above); without one, a SIGKILL
            # near the limit is the best sign of it. Any other SIGKILL was sent to the
            # program, by itself or its own (it was always called memory, found by review)
            near = self.ru.ru_maxrss >= 0.9 * (lim["memory_mb"] << 10)
            if sig == signal.SIGKILL and self.cpu1 is None and near:
                return fail("memory", f"exceeded {lim['memory_mb']} MB")
            if sig:
                return fail("killed", f"killed by {_signame(sig)}")
            return fail("error", f"the program exited with {code} before the test finished")
        if j.get("passed"):
            return {"passed": True, "verdict": "ok", "detail": "", **timing}
        return fail(str(j.get("verdict", "error")), str(j.get("detail", ""))[:1000])


def _address_space_mb() -> int | None:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE") >> 20
    except OSError:  # gVisor's zygote has no /proc: its worker's own bounds hold
        return None


def _signame(sig: int) -> str:
    try:
        return signal.Signals(sig).name
    except ValueError:
        return f"signal {sig}"


def _kill_pid(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _running(pid: int) -> bool:
    """Whether child ``pid`` has not exited yet (it is not reaped here)."""
    return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None


def _frame(buf: bytearray) -> bytes | None:
    """The payload of the one length-prefixed frame in ``buf`` once it is complete."""
    if len(buf) < 4:
        return None
    (n,) = _HDR.unpack_from(buf)
    return bytes(buf[4 : 4 + n]) if len(buf) >= 4 + n else None


def _as_result(payload: bytes | None) -> dict | None:
    if payload is None:
        return None
    try:
        value = json.loads(payload)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


@dataclass
class _Ready:
    """A forked E waiting for its request, and the zygote's ends of its pipes."""

    pid: int
    watch: Any  # _harness.ExitWatch
    req_w: int
    out_r: int
    err_r: int
    res_r: int
    ready_r: int
    call_j: int  # the judge's end of the call socket (assert tests), -1 once handed over
    key: bytes
    shape: str
    scratch: str | None

    def close(self) -> None:
        self.watch.close()
        for fd in (self.req_w, self.out_r, self.err_r, self.res_r, self.ready_r, self.call_j):
            if fd >= 0:
                os.close(fd)
        if self.scratch:
            import shutil

            shutil.rmtree(self.scratch, ignore_errors=True)


def _move(fd: int, to: int) -> None:
    os.dup2(fd, to)
    os.close(fd)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _killpg(pid: int) -> None:
    for target in (pid,):
        try:
            os.killpg(target, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def _mount(src: bytes, dst: bytes, fstype: bytes, flags: int, data: bytes | None) -> None:
    _check(_libc.mount(src, dst, fstype, flags, data), f"mount {dst.decode()}")


def _tmpfs_opts(disk_mb: int, inodes: bool, mode: str = "1777") -> bytes:
    """A tmpfs of ``disk_mb``; with ``inodes``, its inodes bounded too (where the kernel
    takes it, not gVisor's tmpfs): tearing down millions of empty files took seconds."""
    bound = f",nr_inodes={disk_mb * 1024}" if inodes else ""
    return f"size={disk_mb}m{bound},mode={mode}".encode()


def _shape(req: dict) -> str:
    """What a run's E must be set up with before its request: the tmpfs size and the
    workspace (image layers, and the kept upper, if any)."""
    return json.dumps([int(req["limits"]["disk_mb"]), req.get("workspace")], separators=(",", ":"))


def _parse_shape(shape: str) -> tuple[int, dict | None]:
    if shape.endswith(",null]"):  # a plain run's, read without json (faults in E)
        return int(shape[1:-6]), None
    disk_mb, ws = json.loads(shape)
    return int(disk_mb), ws


_URANDOM: list[int] = []


def _fresh_key() -> bytearray:
    """16 random bytes read into a bytearray, never into an immutable bytes object."""
    if not _URANDOM:
        _URANDOM.append(os.open("/dev/urandom", os.O_RDONLY | os.O_CLOEXEC))
    key = bytearray(16)
    if os.readv(_URANDOM[0], [key]) != len(key):
        raise OSError("short read from /dev/urandom")
    return key


EXPORT_MAX_PATH = 3000  # a layer's paths must fit the host's PATH_MAX under its cache


def _export(upper: str, max_bytes: int) -> tuple[dict, list[bytes]]:
    """A kept workspace's upper as entries and blobs: what the workspace changed, for a
    patch or a new layer. The program made this tree: nothing is followed (symlinks are
    read as links, files opened ``O_NOFOLLOW``) and the bytes read are capped."""
    import stat as st_

    entries: list[list] = []
    blobs: list[bytes] = []
    total = 0  # bytes the answer will take: contents, and names as JSON escapes them
    stack = [""]
    while stack:
        rel = stack.pop()
        for name in sorted(os.listdir(f"{upper}/{rel}" if rel else upper)):
            sub = f"{rel}/{name}" if rel else name
            full = f"{upper}/{sub}"
            # JSON writes a byte of a name in at most 6 (\\uXXXX)
            total += 6 * len(sub.encode("utf-8", "surrogateescape")) + 32
            if len(full.encode("utf-8", "surrogateescape")) > EXPORT_MAX_PATH:
                return {"refused": f"a path in the workspace is longer than {EXPORT_MAX_PATH}"}, []
            if total > max_bytes:
                return {"refused": f"the workspace holds more than {max_bytes} bytes"}, []
            st = os.lstat(full)
            mode = st.st_mode
            if st_.S_ISDIR(mode):
                try:
                    opaque = os.getxattr(full, "user.overlay.opaque", follow_symlinks=False)
                except OSError:
                    opaque = b""
                entries.append([sub, "d", mode & 0o7777, opaque == b"y"])
                stack.append(sub)
            elif st_.S_ISREG(mode):
                total += st.st_size
                if total > max_bytes:
                    return {"refused": f"the workspace holds more than {max_bytes} bytes"}, []
                fd = os.open(full, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
                try:
                    data = os.read(fd, st.st_size + 1)
                    while len(data) <= st.st_size and (more := os.read(fd, 1 << 20)):
                        data += more
                finally:
                    os.close(fd)
                blobs.append(data[: st.st_size])
                entries.append([sub, "f", mode & 0o7777, len(blobs) - 1])
            elif st_.S_ISLNK(mode):
                target = os.readlink(full)
                total += 6 * len(target.encode("utf-8", "surrogateescape"))
                if total > max_bytes:
                    return {"refused": f"the workspace holds more than {max_bytes} bytes"}, []
                entries.append([sub, "l", 0, target])
            elif st_.S_ISCHR(mode) and st.st_rdev == 0:
                entries.append([sub, "w", 0, None])  # overlayfs's mark of a deletion
    return {"entries": entries}, blobs


def _private_mounts() -> bool:
    """Make every mount of this namespace private (no propagation either way); False
    where the kernel refuses (this gVisor build: EINVAL), and mounts may propagate."""
    return any(_libc.mount(b"none", b"/", None, f, None) == 0 for f in (MS_REC | MS_PRIVATE,))


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
    # a write to a pre-forked E that died must fail with EPIPE, not kill the zygote
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    config, blobs = read_frame(inp)
    zygote = Zygote(config, blobs[0] if blobs else b"")
    zygote.channel_fds = (inp.fileno(), out.fileno())
    # before any run: see start_forker. gVisor does not honour CLONE_PARENT (the runs
    # would be the forker's children), so there the zygote forks them itself.
    if zygote.namespaces and config.get("forker"):
        zygote.start_forker()
    write_frame(out, {"ready": True, "pid": os.getpid(), "python": sys.version.split()[0]})
    while True:
        try:
            raw = read_raw(inp)
        except EOFError:
            zygote.discard()
            return
        req, blobs = parse_frame(raw)
        op = req.get("op")
        try:
            if op == "run":
                header, out_blobs = zygote.run(req, blobs, raw)
            elif op == "ping":
                header, out_blobs = {"pong": True}, []
            elif op in ("ws_open", "ws_close", "ws_export"):
                header, out_blobs = zygote.workspace_op(op, req)
            else:
                header, out_blobs = {"error": f"unknown op {op!r}"}, []
        except Exception as exc:
            header, out_blobs = {"error": f"{type(exc).__name__}: {exc}"}, []
        write_frame(out, header, out_blobs)
        # the next E is forked from this frame: it must not hold this run's request or
        # answer (a program could walk up the stack to them)
        del raw, req, blobs, header, out_blobs
        if op == "run" and zygote.last_shape is not None:
            try:  # fork the next E while the host reads this answer
                zygote.prepare(zygote.last_shape)
            except Exception:  # the next run prepares again, and reports what failed
                zygote.ready = None


if __name__ == "__main__":
    main()
