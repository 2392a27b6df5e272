"""The floor: a bare fork server, with and without the per-run isolation steps.

A minimal fork server (one warm interpreter per worker, ``fork`` per run, the program's
stdout on a pipe, no harness, no protocol beyond a length prefix) run under bubblewrap,
2 workers, ``print(1)``, to show what this machine allows before codegym's own work, and
what each per-run isolation step costs on its own:

- ``bare``: fork and run;
- ``+ns``: the child is ``clone``d into new pid, mount and ipc namespaces and mounts a
  fresh tmpfs on ``/tmp`` and ``/dev/shm`` and a fresh ``/proc`` (as codegym's runs do);
- ``+ns+cgroup``: and the server moves each child into a cgroup (memory, pids, cpuacct;
  v1 only, as on this machine; skipped elsewhere);
- ``shared-mnt``: the ``jail`` tier's design for plain runs: per-run pid and ipc
  namespaces and a /proc of the run's own (the last run's unmounted first), the server's
  one mount namespace otherwise, its scratch folders checked empty after each run, and
  the v1 cgroup move;
- ``reused-pidns``: as ``shared-mnt``, but one pid namespace per worker serves every run:
  its init (a fork of the server, pid 1 there) mounts its ``/proc`` once, and after each
  run kills what the run left (``kill(-1)`` from pid 1), reaps it and sets the next pid
  back (``ns_last_pid``), so a run sees no number an earlier one used; the server forks
  each run into that namespace (``setns`` of its pid namespace for children) with a fresh
  ipc namespace. No pid namespace and no ``/proc`` mount per run; one round trip to the
  init per run instead.
- ``worker-ns``: the design without per-run namespaces (issue 19's proposal): the
  worker's own pid/mount/ipc namespaces serve every run; each child mounts a fresh tmpfs
  on ``/tmp`` and ``/dev/shm`` over the last run's (the old ones detached), takes a uid
  of its own (one of 64, rotating) so it can signal nothing else, and is moved into the
  v1 cgroup; after it exits the server reads the cgroup's ``cgroup.procs`` and kills what
  the run left. The jail's uid is mapped alone in bwrap's user namespace, so this variant
  runs bwrap as real root without one (the cost of a per-run uid is one ``setresuid``).

The sandbox's own figures are in ``sandbox_bench.py``; docs/BENCHMARKS.md puts them side
by side. Run as root (cgroups): ``.venv/bin/python benchmarks/forkserver_floor.py``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import struct
import tempfile
import time
from pathlib import Path

HDR = struct.Struct(">I")
PYTHON = "/usr/bin/python3"
PRELOAD = (
    "abc array bisect collections copy dataclasses decimal fractions functools hashlib heapq "
    "io itertools json math operator random re statistics string sys time typing unittest"
)

# The server, run by the jail's interpreter: argv[1] is the variant, argv[2] a cgroup path.
SERVER = f"""
import ctypes, gc, os, struct, sys
H = struct.Struct(">I")
variant, cg = sys.argv[1], sys.argv[2]
for m in {PRELOAD!r}.split():
    __import__(m)
libc = ctypes.PyDLL(None, use_errno=True)
procs = [f"/sys/fs/cgroup/{{c}}/{{cg}}/cgroup.procs" for c in ("memory", "pids", "cpuacct")]
runs = 0
if variant in ("shared-mnt", "reused-pidns"):  # one mount namespace of the server's own
    libc.unshare(0x00020000)
    libc.mount(b"none", b"/", None, 16384 | (1 << 18), None)
if variant == "reused-pidns":  # the runs' pid namespace and its init, made once
    cmd_r, cmd_w = os.pipe()
    ack_r, ack_w = os.pipe()
    init = libc.syscall(56, 0x20000000 | 17, 0, 0, 0, 0)  # CLONE_NEWPID
    if init == 0:
        while not os.path.exists("/proc/self"):
            libc.umount2(b"/proc", 2)
        libc.mount(b"proc", b"/proc", b"proc", 14, None)
        last = os.open("/proc/sys/kernel/ns_last_pid", os.O_WRONLY)
        os.write(ack_w, b"1")
        while os.read(cmd_r, 1):
            try:
                os.kill(-1, 9)  # from pid 1: everything in the namespace but itself
            except ProcessLookupError:
                pass  # the run left nothing
            try:
                while True:
                    os.waitpid(-1, 0)
            except ChildProcessError:
                pass
            os.pwrite(last, b"1", 0)  # the next run is pid 2 again
            os.write(ack_w, b"1")
        os._exit(0)
    os.read(ack_r, 1)
    pidfd = os.pidfd_open(init)
    assert libc.setns(pidfd, 0x20000000) == 0, "setns"
gc.collect(); gc.freeze()
inp, out = os.fdopen(0, "rb", buffering=0), os.fdopen(1, "wb", buffering=0)
def read(n):
    b = b""
    while len(b) < n:
        c = inp.read(n - len(b))
        if not c:
            raise SystemExit
        b += c
    return b
while True:
    (n,) = H.unpack(read(4))
    code = read(n).decode()
    r, w = os.pipe()
    if variant in ("bare", "worker-ns"):
        pid = libc.fork()
    elif variant == "shared-mnt":  # CLONE_NEWPID | CLONE_NEWIPC
        pid = libc.syscall(56, 0x20000000 | 0x08000000 | 17, 0, 0, 0, 0)
    elif variant == "reused-pidns":  # CLONE_NEWIPC, into the runs' pid namespace
        pid = libc.syscall(56, 0x08000000 | 17, 0, 0, 0, 0)
    else:  # CLONE_NEWPID | CLONE_NEWNS | CLONE_NEWIPC, exit signal SIGCHLD
        pid = libc.syscall(56, 0x20000000 | 0x00020000 | 0x08000000 | 17, 0, 0, 0, 0)
    if pid == 0:
        try:
            if variant == "worker-ns":
                for d in (b"/tmp", b"/dev/shm"):
                    libc.umount2(d, 2)  # MNT_DETACH: the last run's tmpfs goes with its users
                    libc.mount(b"tmpfs", d, b"tmpfs", 6, b"size=16m")
                uid = 10000 + runs % 64
                os.setresgid(uid, uid, uid)
                os.setgroups([])
                os.setresuid(uid, uid, uid)
            elif variant == "shared-mnt":
                while not os.path.exists("/proc/self"):
                    libc.umount2(b"/proc", 2)  # the last run's /proc
                libc.mount(b"proc", b"/proc", b"proc", 14, None)
            elif variant not in ("bare", "reused-pidns"):
                for d in (b"/tmp", b"/dev/shm"):
                    libc.mount(b"tmpfs", d, b"tmpfs", 6, b"size=16m")
                libc.mount(b"proc", b"/proc", b"proc", 14, None)
            os.dup2(w, 1)
            sys.stdout = open(1, "w", closefd=False)
            exec(compile(code, "<p>", "exec"), {{"__name__": "__main__"}})
            sys.stdout.flush()
        finally:
            os._exit(0)
    runs += 1
    os.close(w)
    if variant in ("+ns+cgroup", "worker-ns", "shared-mnt", "reused-pidns"):
        for path in procs:
            with open(path, "w") as f:
                f.write(str(pid))
    data = b""
    while chunk := os.read(r, 65536):
        data += chunk
    os.close(r)
    os.waitpid(pid, 0)
    if variant == "reused-pidns":  # what the run left dies before the scratch is checked
        os.write(cmd_w, b"k")
        os.read(ack_r, 1)
    if variant in ("shared-mnt", "reused-pidns"):  # the scratch is checked empty, as Scratch does
        for d in ("/tmp", "/dev/shm"):
            fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
            os.fstat(fd), os.listxattr(fd), os.listdir(fd)
            os.close(fd)
    if variant == "worker-ns":  # what the run left in its cgroup dies with it
        with open(procs[1]) as f:
            for left in f.read().split():
                os.kill(int(left), 9)
    out.write(H.pack(len(data)) + data)
"""


async def worker(variant: str, cg: str, script: Path, jobs: asyncio.Queue[int]) -> int:
    # the per-worker variant needs uids a user namespace from bwrap would not map
    unshare = (
        ["--unshare-pid", "--unshare-ipc", "--unshare-net", "--unshare-uts"]
        if variant == "worker-ns"
        else ["--unshare-all"]
    )
    argv = [
        "bwrap", *unshare, "--die-with-parent", "--cap-add", "ALL",
        "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp",
        "--bind", "/sys/fs/cgroup", "/sys/fs/cgroup", "--ro-bind", str(script), "/tmp/server.py",
        PYTHON, "-I", "/tmp/server.py", variant, cg,
    ]  # fmt: skip
    proc = await asyncio.create_subprocess_exec(*argv, stdin=-1, stdout=-1)
    assert proc.stdin and proc.stdout
    code, wrong = b"print(1)", 0
    while not jobs.empty():
        jobs.get_nowait()
        proc.stdin.write(HDR.pack(len(code)) + code)
        (n,) = HDR.unpack(await proc.stdout.readexactly(4))
        wrong += await proc.stdout.readexactly(n) != b"1\n"
    proc.stdin.close()
    await proc.wait()
    return wrong


async def throughput(variant: str, cg: str, script: Path, n: int) -> tuple[float, int]:
    jobs: asyncio.Queue[int] = asyncio.Queue()
    for i in range(n):
        jobs.put_nowait(i)
    t = time.perf_counter()
    # a cgroup per worker: the per-worker variant kills whatever is left in its own
    wrong = await asyncio.gather(*(worker(variant, f"{cg}-{i}", script, jobs) for i in range(2)))
    return n / (time.perf_counter() - t), sum(wrong)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-n", type=int, default=3000, help="runs per variant")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--only", nargs="+", help="these variants only (bare is always run)")
    args = ap.parse_args()
    cg = f"codegym-floor-{os.getpid()}"
    dirs = [
        Path(f"/sys/fs/cgroup/{c}/{cg}-{i}") for c in ("memory", "pids", "cpuacct") for i in (0, 1)
    ]
    variants = ["bare", "+ns"]
    try:
        for d in dirs:
            d.mkdir()
        variants += ["+ns+cgroup", "shared-mnt", "reused-pidns", "worker-ns"]
    except OSError as e:
        print(f"(no cgroup variants: cannot create v1 cgroups here: {e})")
    if args.only:
        variants = [v for v in variants if v == "bare" or v in args.only]
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "server.py"
        script.write_text(SERVER)
        script.chmod(0o644)
        print(f"print(1), 2 workers, {args.n} runs per variant, runs/s over {args.repeat} rounds")
        for variant in variants:
            rates = []
            for _ in range(args.repeat):
                rate, wrong = asyncio.run(throughput(variant, cg, script, args.n))
                assert wrong == 0, f"{variant}: {wrong} wrong outputs"
                rates.append(rate)
            rates.sort()
            mid, lo, hi = rates[len(rates) // 2], rates[0], rates[-1]
            print(f"  {variant:12s} median {mid:5.0f}/s  ({lo:.0f}–{hi:.0f})")
    for d in dirs:
        for _ in range(50):  # EBUSY right after the last exit: retry
            try:
                d.rmdir()
                break
            except FileNotFoundError:
                break
            except OSError:
                time.sleep(0.01)


if __name__ == "__main__":
    main()
