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
if variant == "shared-mnt":  # one mount namespace of the server's own, private
    libc.unshare(0x00020000)
    libc.mount(b"none", b"/", None, 16384 | (1 << 18), None)
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
            elif variant != "bare":
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
    if variant in ("+ns+cgroup", "worker-ns", "shared-mnt"):
        for path in procs:
            with open(path, "w") as f:
                f.write(str(pid))
    data = b""
    while chunk := os.read(r, 65536):
        data += chunk
    os.close(r)
    os.waitpid(pid, 0)
    if variant == "shared-mnt":  # the scratch is checked empty, as codegym's Scratch does
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
    args = ap.parse_args()
    cg = f"codegym-floor-{os.getpid()}"
    dirs = [
        Path(f"/sys/fs/cgroup/{c}/{cg}-{i}") for c in ("memory", "pids", "cpuacct") for i in (0, 1)
    ]
    variants = ["bare", "+ns"]
    try:
        for d in dirs:
            d.mkdir()
        variants += ["+ns+cgroup", "shared-mnt", "worker-ns"]
    except OSError as e:
        print(f"(no cgroup variants: cannot create v1 cgroups here: {e})")
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
