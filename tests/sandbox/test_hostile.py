"""Adversarial tests, part one: exhausting resources, signals and crashes, rlimits, other
processes, privileges and the network. What every test checks, and the shared pool:
``hostile_kit``."""

from __future__ import annotations

import os
import socket
import subprocess
import time
import uuid
from pathlib import Path
from textwrap import dedent

import pytest
from hostile_kit import (
    ATTEMPT,
    LIMITS,
    MEMORY_MB,
    REPO,
    SHORT,
    _aftermath,
    _outcomes,
    _refused,
    _snapshot,
    _worker_host_pids,
)

from codegym.sandbox import (
    AssertTest,
    IOTest,
    Limits,
    Sandbox,
    Verdict,
)

pytestmark = pytest.mark.asyncio(loop_scope="module")


# ---------------------------------------------------------------- resource exhaustion


async def test_fork_bomb(sb: Sandbox) -> None:
    snap = _snapshot(sb)
    code = dedent(r"""
        import os
        while True:
            try:
                os.fork()
            except OSError:
                pass
    """)
    r = await sb.run_python(code, limits=Limits(cpu_s=1, wall_s=2, memory_mb=MEMORY_MB))
    assert r.verdict == Verdict.TIMEOUT, (r.verdict, r.reason)
    await _aftermath(sb, snap)


async def test_process_count_is_capped(sb: Sandbox) -> None:
    snap = _snapshot(sb)
    code = dedent(r"""
        import os, time
        n = 0
        while n < 1000:
            try:
                pid = os.fork()
            except OSError:
                break
            if pid == 0:
                time.sleep(60)
                os._exit(0)
            n += 1
        print('forked:', n)
    """)
    limits = Limits(cpu_s=1, wall_s=3, memory_mb=MEMORY_MB, max_processes=16)
    r = await sb.run_python(code, limits=limits)
    assert r.verdict == Verdict.OK, (r.reason, r.stderr[-500:])
    assert int(_outcomes(r.stdout)["forked"]) < 16  # and the sleepers died with the run
    await _aftermath(sb, snap)


async def test_memory_bomb(sb: Sandbox) -> None:
    snap = _snapshot(sb)
    r = await sb.run_python(
        "x = []\nwhile True:\n    x.append(bytearray(16 << 20))\n", limits=LIMITS
    )
    assert r.verdict == Verdict.MEMORY, (r.verdict, r.reason)
    assert r.peak_memory_mb is None or r.peak_memory_mb <= MEMORY_MB * 1.05
    await _aftermath(sb, snap)


async def test_disk_fill(sb: Sandbox) -> None:
    snap = _snapshot(sb)
    name = f"fill-{uuid.uuid4().hex}"
    code = dedent(r"""
        import os, sys
        for d in ('/work', '/tmp', '/dev/shm'):
            n = 0
            try:
                while True:
                    with open(os.path.join(d, f'{sys.argv[1]}-{n}'), 'wb') as f:
                        f.write(b'x' * (1 << 20))
                    n += 1
            except OSError as e:
                print(f'{d}: {n} {e.strerror}')
    """)
    limits = Limits(cpu_s=1, wall_s=3, memory_mb=MEMORY_MB, disk_mb=16)
    r = await sb.run_python(code, limits=limits, argv=[name])
    assert r.verdict == Verdict.OK, (r.reason, r.stderr[-500:])
    written = _outcomes(r.stdout)
    assert set(written) == {"/work", "/tmp", "/dev/shm"}
    for outcome in written.values():
        assert int(outcome.split()[0]) <= 16 and "No space left" in outcome, written
    await _aftermath(sb, snap, host_paths=(REPO / f"{name}-0", Path("/tmp") / f"{name}-0"))


async def test_file_larger_than_the_disk_limit(sb: Sandbox) -> None:
    snap = _snapshot(sb)
    code = dedent(r"""
        import os
        with open('big', 'wb') as f:
            while True:
                f.write(b'x' * (1 << 20))
                f.flush()
                print('size:', os.fstat(f.fileno()).st_size, flush=True)
    """)
    limits = Limits(cpu_s=1, wall_s=3, memory_mb=MEMORY_MB, disk_mb=8)
    r = await sb.run_python(code, limits=limits)
    # the write past the limit fails (EFBIG, ENOSPC) or SIGXFSZ ends the program
    assert r.verdict == Verdict.ERROR or r.signal == "SIGXFSZ", (r.verdict, r.reason)
    sizes = [int(line.split()[1]) for line in r.stdout.splitlines()]
    assert sizes and max(sizes) <= 8 << 20, sizes
    await _aftermath(sb, snap)


async def test_unbounded_output(sb: Sandbox) -> None:
    snap = _snapshot(sb)
    code = dedent(r"""
        import sys
        while True:
            sys.stdout.write('o' * 4096)
            sys.stderr.write('e' * 4096)
    """)
    r = await sb.run_python(code, limits=LIMITS)
    assert r.verdict == Verdict.OUTPUT_LIMIT, (r.verdict, r.reason)
    assert r.truncated and len(r.stdout) + len(r.stderr) <= LIMITS.output_bytes
    await _aftermath(sb, snap)


async def test_unbounded_output_from_a_subprocess(sb: Sandbox) -> None:
    snap = _snapshot(sb)
    r = await sb.run("yes hostile | cat", limits=LIMITS)
    assert r.verdict == Verdict.OUTPUT_LIMIT, (r.verdict, r.reason)
    assert len(r.stdout) + len(r.stderr) <= LIMITS.output_bytes
    await _aftermath(sb, snap)


async def test_sleep_forever(sb: Sandbox) -> None:
    snap = _snapshot(sb)
    r = await sb.run_python("import time\ntime.sleep(10**6)\n", limits=SHORT)
    assert r.verdict == Verdict.TIMEOUT, (r.verdict, r.reason)
    await _aftermath(sb, snap)


async def test_spinning_threads(sb: Sandbox) -> None:
    snap = _snapshot(sb)
    code = dedent(r"""
        import threading
        def spin():
            while True:
                pass
        for _ in range(8):
            threading.Thread(target=spin).start()
    """)
    r = await sb.run_python(code, limits=LIMITS)
    assert r.verdict == Verdict.TIMEOUT, (r.verdict, r.reason)
    assert r.cpu_s >= 0.9  # the threads' CPU time is charged to the run
    await _aftermath(sb, snap)


async def test_infinite_recursion(sb: Sandbox) -> None:
    snap = _snapshot(sb)
    r = await sb.run_python("def f():\n    return f()\nf()\n", limits=LIMITS)
    assert r.verdict == Verdict.ERROR and "RecursionError" in r.stderr, (r.verdict, r.reason)
    await _aftermath(sb, snap)


async def test_unbounded_recursion_past_the_recursion_limit(sb: Sandbox) -> None:
    snap = _snapshot(sb)
    code = dedent(r"""
        import sys
        sys.setrecursionlimit(10**8)
        def f(n):
            return f(n + 1)
        f(0)
    """)
    r = await sb.run_python(code, limits=LIMITS)
    # frames that outgrow the memory limit, or a C stack overflow
    assert r.verdict in (Verdict.MEMORY, Verdict.KILLED), (r.verdict, r.reason)
    await _aftermath(sb, snap)


async def test_read_stdin_forever(sb: Sandbox) -> None:
    snap = _snapshot(sb)
    r = await sb.run_python("import sys\nwhile True:\n    sys.stdin.read()\n", "x", limits=LIMITS)
    assert r.verdict == Verdict.TIMEOUT, (r.verdict, r.reason)
    await _aftermath(sb, snap)


async def test_stdin_always_reaches_eof(sb: Sandbox) -> None:
    snap = _snapshot(sb)
    code = dedent(r"""
        import os, sys
        first = sys.stdin.buffer.read()
        again = sys.stdin.buffer.read()
        print('read:', len(first), len(again), len(os.read(0, 4096)))
    """)
    r = await sb.run_python(code, b"a" * (1 << 20), limits=LIMITS)
    assert r.verdict == Verdict.OK, (r.reason, r.stderr[-500:])
    assert _outcomes(r.stdout)["read"] == f"{1 << 20} 0 0"
    await _aftermath(sb, snap)


async def test_closed_stdout(sb: Sandbox) -> None:
    snap = _snapshot(sb)
    code = dedent(r"""
        import os
        os.close(1)
        os.close(2)
        print('into the void')
        print('and more')
    """)
    r = await sb.run_python(code, limits=LIMITS)
    assert r.verdict in (Verdict.OK, Verdict.ERROR), (r.verdict, r.reason)
    assert r.stdout == ""
    await _aftermath(sb, snap)


# ---------------------------------------------------------------- signals, crashes, rlimits


async def test_segfault_via_ctypes(sb: Sandbox) -> None:
    snap = _snapshot(sb)
    r = await sb.run_python("import ctypes\nctypes.string_at(0)\n", limits=LIMITS)
    assert (r.verdict, r.signal) == (Verdict.KILLED, "SIGSEGV"), (r.verdict, r.reason)
    await _aftermath(sb, snap)


async def test_ignore_sigterm(sb: Sandbox) -> None:
    snap = _snapshot(sb)
    code = dedent(r"""
        import signal, time
        for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(s, signal.SIG_IGN)
        time.sleep(10**6)
    """)
    r = await sb.run_python(code, limits=SHORT)
    assert r.verdict == Verdict.TIMEOUT, (r.verdict, r.reason)
    await _aftermath(sb, snap)


async def test_stopped_process(sb: Sandbox) -> None:
    snap = _snapshot(sb)
    code = dedent(r"""
        import os, signal
        child = os.fork()
        if child == 0:
            os.kill(os.getpid(), signal.SIGSTOP)
            os._exit(0)
        os.waitpid(child, 0)  # a stopped child never exits
    """)
    r = await sb.run_python(code, limits=SHORT)
    assert r.verdict == Verdict.TIMEOUT, (r.verdict, r.reason)
    await _aftermath(sb, snap)


async def test_ignore_sigxcpu_and_raise_the_soft_cpu_limit(sb: Sandbox) -> None:
    snap = _snapshot(sb)
    code = dedent(r"""
        import resource, signal
        signal.signal(signal.SIGXCPU, signal.SIG_IGN)
        soft, hard = resource.getrlimit(resource.RLIMIT_CPU)
        resource.setrlimit(resource.RLIMIT_CPU, (hard, hard))
        while True:
            pass
    """)
    r = await sb.run_python(code, limits=LIMITS)
    assert r.verdict == Verdict.TIMEOUT, (r.verdict, r.reason)
    await _aftermath(sb, snap)


async def test_raise_hard_rlimits(sb: Sandbox) -> None:
    snap = _snapshot(sb)
    code = ATTEMPT + dedent(r"""
        import resource
        inf = (resource.RLIM_INFINITY, resource.RLIM_INFINITY)
        for name in ('RLIMIT_CPU', 'RLIMIT_NOFILE', 'RLIMIT_FSIZE', 'RLIMIT_CORE'):
            attempt(name, lambda: resource.setrlimit(getattr(resource, name), inf))
        while True:
            pass
    """)
    r = await sb.run_python(code, limits=LIMITS)
    assert r.verdict == Verdict.TIMEOUT, (r.verdict, r.reason)  # the CPU limit still holds
    assert set(_outcomes(r.stdout).values()) == {"ValueError"}, r.stdout
    await _aftermath(sb, snap)


# ---------------------------------------------------------------- other processes


async def test_kill_minus_one(sb: Sandbox, host_sleeper: subprocess.Popen[bytes]) -> None:
    snap = _snapshot(sb)
    r = await sb.run("sleep 30 & kill -9 -1; echo survived", limits=LIMITS)
    assert (r.verdict, r.stdout) == (Verdict.OK, "survived\n"), (r.reason, r.stderr[-500:])
    assert host_sleeper.poll() is None, "kill -9 -1 reached a host process of the same uid"
    await _aftermath(sb, snap)


async def test_kill_the_zygote(sb: Sandbox, host_sleeper: subprocess.Popen[bytes]) -> None:
    snap = _snapshot(sb)
    # Every pid it can see or guess: its /proc, the cgroup's member lists, the workers' and
    # the host sleeper's host pids, and every small pid number.
    code = dedent(r"""
        import glob, os, signal, sys
        visible = {int(p) for p in os.listdir('/proc') if p.isdigit()}
        targets = visible | {int(a) for a in sys.argv[1:]} | set(range(1, 4096))
        for path in glob.glob('/run/cg/*'):
            try:
                targets |= {int(x) for x in open(path).read().split() if int(x) < 1 << 22}
            except (OSError, ValueError):
                pass
        reached = set()
        for pid in sorted(targets - {os.getpid()}):
            try:
                os.kill(pid, signal.SIGKILL)
                reached.add(pid)
            except OSError:
                pass
        print('outside:', sorted(reached - visible))
    """)
    host_pids = [*_worker_host_pids(sb), host_sleeper.pid, os.getpid()]
    r = await sb.run_python(code, limits=LIMITS, argv=[str(p) for p in host_pids])
    assert r.verdict == Verdict.OK, (r.verdict, r.reason, r.stderr[-500:])
    assert _outcomes(r.stdout)["outside"] == "[]"  # it could signal nothing it cannot see
    assert host_sleeper.poll() is None
    await _aftermath(sb, snap)  # no worker died or had to be restarted


async def test_the_namespace_s_init_is_out_of_reach(sb: Sandbox) -> None:
    # A plain run shares its worker's pid namespace and uid with that namespace's init,
    # which sweeps each run away: a CPU limit of 0 set on it killed it at its next sweep,
    # and every run after was infra (found by review). Nothing a run can do reaches it.
    snap = _snapshot(sb)
    code = ATTEMPT + dedent(r"""
        import resource, signal
        for res in (resource.RLIMIT_CPU, resource.RLIMIT_NOFILE, resource.RLIMIT_AS):
            attempt(f'prlimit-1-{res}', lambda: resource.prlimit(1, res, (0, 0)))
        attempt('prlimit-self-pid', lambda: resource.prlimit(os.getpid(), resource.RLIMIT_CORE))
        for sig in (signal.SIGKILL, signal.SIGTERM, signal.SIGSTOP):
            if os.getpid() != 1:  # (a workspace run is its own namespace's init)
                os.kill(1, sig)  # the kernel drops what a namespace sends its init
        attempt('mem-1', lambda: open('/proc/1/mem', 'rb'))
        attempt('environ-1', lambda: open('/proc/1/environ', 'rb'))
    """)
    r = await sb.run_python(code, limits=LIMITS)
    _refused(r, "EPERM", "EACCES")
    r = await sb.run_python("print('still here')", limits=LIMITS)
    assert (r.verdict, r.stdout) == (Verdict.OK, "still here\n"), (r.verdict, r.reason)
    await _aftermath(sb, snap)  # no worker died or had to be restarted


async def test_its_process_group_is_its_own(sb: Sandbox) -> None:
    # The run's first process was in its worker's process group: kill(0, SIGKILL) (the
    # caller's group, whatever the namespace) killed the worker, and the run was infra
    # (found by review). Now it kills the run alone, in every mode.
    snap = _snapshot(sb)
    group_kill = "import os, signal\nos.kill(0, signal.SIGKILL)\n"
    # (a run that is its namespace's init, as in a workspace, survives its own SIGKILL)
    r = await sb.run_python(group_kill, limits=LIMITS)
    assert r.verdict in (Verdict.KILLED, Verdict.OK), (r.verdict, r.reason)
    r = await sb.run_python("import os, signal\nos.kill(0, signal.SIGTERM)\n", limits=LIMITS)
    assert (r.verdict, r.signal) == (Verdict.KILLED, "SIGTERM"), (r.verdict, r.reason)
    r = await sb.run_tests(group_kill + "print(1)\n", [IOTest("", "1")], limits=LIMITS)
    assert Verdict.INFRA not in (r.verdict, r.tests[0].verdict), (r.verdict, r.reason, r.tests)
    program = "import os, signal\ndef f(x):\n    os.kill(0, signal.SIGKILL)\n    return x\n"
    r = await sb.run_tests(program, [AssertTest("assert f(1) == 1")], limits=LIMITS)
    assert Verdict.INFRA not in (r.verdict, r.tests[0].verdict), (r.verdict, r.reason, r.tests)
    await _aftermath(sb, snap)  # no worker died or had to be restarted


async def test_no_child_of_the_zygote_s_own(sb: Sandbox) -> None:
    # From a run's first process (pid 2 of its worker's shared namespace, no longer an
    # init) CLONE_PARENT made children of the zygote's, which the namespace's init never
    # reaped: zombies named by the run were read by the next, and held the slot's pids
    # limit for the worker's life (found by review)
    snap = _snapshot(sb)
    code = ATTEMPT + dedent(r"""
        def clone_parent():
            pid = libc.syscall(56, 0x8000 | 17, 0, 0, 0, 0)
            if pid == 0:
                os._exit(0)
            return pid
        for _ in range(3):
            attempt('clone-parent', clone_parent)
    """)
    r = await sb.run_python(code, limits=LIMITS)
    _refused(r, "EPERM")
    await _aftermath(sb, snap)


async def test_ptrace(sb: Sandbox) -> None:
    snap = _snapshot(sb)
    code = ATTEMPT + dedent(r"""
        import time
        child = os.fork()
        if child == 0:
            time.sleep(30)
            os._exit(0)
        for pid in [1, child, *map(int, sys.argv[1:])]:
            attempt(f'attach-{pid}', lambda: libc.ptrace(16, pid, None, None))
            attempt(f'seize-{pid}', lambda: libc.ptrace(0x4206, pid, None, None))
        attempt('traceme', lambda: libc.ptrace(0, 0, None, None))
        os.kill(child, 9)
    """)
    r = await sb.run_python(code, limits=LIMITS, argv=[str(p) for p in _worker_host_pids(sb)])
    _refused(r, "EPERM")
    await _aftermath(sb, snap)


async def test_read_another_process_memory(sb: Sandbox) -> None:
    snap = _snapshot(sb)
    code = ATTEMPT + dedent(r"""
        def peek(pid):
            with open(f'/proc/{pid}/mem', 'rb') as f:
                f.seek(0x400000)
                return f.read(16)
        buf = ctypes.create_string_buffer(16)
        iov = (ctypes.c_void_p * 2)(ctypes.addressof(buf), 16)
        pids = {int(p) for p in os.listdir('/proc') if p.isdigit()} - {os.getpid()}
        for pid in sorted(pids | set(map(int, sys.argv[1:]))):
            attempt(f'mem-{pid}', lambda: peek(pid))
            attempt(f'vm-readv-{pid}', lambda: libc.process_vm_readv(pid, iov, 1, iov, 1, 0))
    """)
    host_pids = [*_worker_host_pids(sb), os.getpid()]
    r = await sb.run_python(code, limits=LIMITS, argv=[str(p) for p in host_pids])
    _refused(r)
    await _aftermath(sb, snap)


async def test_orphan_daemon_outliving_the_run(sb: Sandbox) -> None:
    snap = _snapshot(sb)
    marker = f"hostile-daemon-{uuid.uuid4().hex}"
    # Double fork + setsid, then exec a long sleeper (holding stdout open) that reports
    # back once it runs, so it is certainly alive when the program exits.
    code = dedent(r"""
        import os, sys
        r, w = os.pipe()
        os.set_inheritable(w, True)
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                prog = f'import os, time; os.write({w}, b"1"); time.sleep(600)'
                os.execv('/usr/bin/python3', ['python3', '-c', prog, sys.argv[1]])
            os._exit(0)
        os.close(w)
        print('daemon:', os.read(r, 1) == b'1')
    """)
    r = await sb.run_python(code, limits=LIMITS, argv=[marker])
    assert r.verdict == Verdict.OK, (r.reason, r.stderr[-500:])
    assert _outcomes(r.stdout)["daemon"] == "True"
    await _aftermath(sb, snap, marker=marker)


async def test_orphan_shell_background_job(sb: Sandbox) -> None:
    snap = _snapshot(sb)
    marker = f"{time.time_ns() % 10**9}.5"  # sleep's argument doubles as a marker
    # The job reports back once it runs (a file it writes before it becomes the sleeper),
    # and the shell waits for that, so it is certainly alive when the program exits; a job
    # that never starts runs the shell into its wall limit and fails the test.
    job = f"setsid nohup sh -c 'touch job-started; exec sleep {marker}' >/dev/null 2>&1 &"
    cmd = f"{job} while [ ! -e job-started ]; do sleep 0.01; done; echo started"
    r = await sb.run(cmd, limits=LIMITS)
    assert (r.verdict, r.stdout) == (Verdict.OK, "started\n"), (r.reason, r.stderr[-500:])
    await _aftermath(sb, snap, marker=f"sleep {marker}")


# ---------------------------------------------------------------- privileges


async def test_become_root(sb: Sandbox) -> None:
    snap = _snapshot(sb)
    code = ATTEMPT + dedent(r"""
        attempt('setuid', lambda: os.setuid(0))
        attempt('setgid', lambda: os.setgid(0))
        attempt('setgroups', lambda: os.setgroups([0]))
        attempt('setresuid', lambda: os.setresuid(0, 0, 0))
    """)
    _refused(await sb.run_python(code, limits=LIMITS), "EPERM", "EINVAL")
    await _aftermath(sb, snap)


async def test_mount(sb: Sandbox) -> None:
    snap = _snapshot(sb)
    code = ATTEMPT + dedent(r"""
        attempt('tmpfs', lambda: libc.mount(b'none', b'/work', b'tmpfs', 0, None))
        attempt('remount-usr-rw', lambda: libc.mount(None, b'/usr', None, 0x1020, None))
        attempt('umount-work', lambda: libc.umount2(b'/work', 2))
    """)
    _refused(await sb.run_python(code, limits=LIMITS), "EPERM")
    await _aftermath(sb, snap)


async def test_unshare_new_namespaces(sb: Sandbox) -> None:
    snap = _snapshot(sb)
    code = ATTEMPT + dedent(r"""
        def clone(flag):
            pid = libc.syscall(56, flag | 17, 0, 0, 0, 0)  # clone(flag | SIGCHLD)
            if pid == 0:
                os._exit(0)
            return pid
        for name, flag in (('user', 0x10000000), ('mount', 0x20000), ('net', 0x40000000),
                           ('pid', 0x20000000), ('cgroup', 0x02000000)):
            attempt(f'unshare-{name}', lambda: libc.unshare(flag))
            attempt(f'clone-{name}', lambda: clone(flag))
    """)
    _refused(await sb.run_python(code, limits=LIMITS), "EPERM")
    await _aftermath(sb, snap)


async def test_chroot(sb: Sandbox) -> None:
    snap = _snapshot(sb)
    code = ATTEMPT + dedent(r"""
        os.makedirs('jail')
        attempt('chroot', lambda: os.chroot('jail'))
    """)
    _refused(await sb.run_python(code, limits=LIMITS), "EPERM")
    await _aftermath(sb, snap)


# ---------------------------------------------------------------- network


async def test_tcp_connect_to_a_host_listener(sb: Sandbox) -> None:
    snap = _snapshot(sb)
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        listener.setblocking(False)
        port = listener.getsockname()[1]
        code = ATTEMPT + dedent(r"""
            import socket
            where = ('127.0.0.1', int(sys.argv[1]))
            attempt('tcp', lambda: socket.create_connection(where, timeout=1))
        """)
        r = await sb.run_python(code, limits=LIMITS, argv=[str(port)])
        with pytest.raises(BlockingIOError):
            listener.accept()  # nobody connected
    _refused(r, "EACCES")  # no AF_INET socket at all
    await _aftermath(sb, snap)


async def test_udp_sendto_a_host_socket(sb: Sandbox) -> None:
    snap = _snapshot(sb)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as receiver:
        receiver.bind(("127.0.0.1", 0))
        receiver.setblocking(False)
        port = receiver.getsockname()[1]
        code = ATTEMPT + dedent(r"""
            import socket
            def send():
                s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
                s.sendto(b'exfiltrated', ('127.0.0.1', int(sys.argv[1])))
            attempt('udp', send)
        """)
        r = await sb.run_python(code, limits=LIMITS, argv=[str(port)])
        with pytest.raises(BlockingIOError):
            receiver.recvfrom(100)  # nothing arrived
    _refused(r, "EACCES")
    await _aftermath(sb, snap)


async def test_dns_lookup(sb: Sandbox) -> None:
    snap = _snapshot(sb)
    code = ATTEMPT + dedent(r"""
        import socket
        attempt('dns', lambda: socket.getaddrinfo('example.com', 80))
    """)
    _refused(await sb.run_python(code, limits=LIMITS))
    await _aftermath(sb, snap)


async def test_unix_sockets_to_host_services(sb: Sandbox, tmp_path: Path) -> None:
    snap = _snapshot(sb)
    host_sock = tmp_path / "service.sock"
    targets = [
        str(host_sock),
        "/run/dbus/system_bus_socket",
        "/var/run/dbus/system_bus_socket",
        "/run/systemd/private",
        "/run/postgresql/.s.PGSQL.5432",
        "/tmp/.X11-unix/X0",
    ]
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
        listener.bind(str(host_sock))
        listener.listen()
        listener.setblocking(False)
        code = ATTEMPT + dedent(r"""
            import glob, socket
            paths = set(sys.argv[1:])
            for pattern in ('/run/**', '/var/run/**', '/tmp/**'):
                paths.update(glob.glob(pattern, recursive=True))
            for path in sorted(paths):
                s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                attempt(path, lambda: s.connect(path))
        """)
        r = await sb.run_python(code, limits=LIMITS, argv=targets)
        with pytest.raises(BlockingIOError):
            listener.accept()
    outcomes = _refused(r)
    assert set(targets) <= set(outcomes), outcomes
    await _aftermath(sb, snap)


async def test_abstract_unix_socket_to_the_host(sb: Sandbox) -> None:
    snap = _snapshot(sb)
    name = f"codegym-hostile-{uuid.uuid4().hex}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
        listener.bind("\0" + name)  # abstract names are scoped by network namespace
        listener.listen()
        listener.setblocking(False)
        code = ATTEMPT + dedent(r"""
            import socket
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            attempt('abstract', lambda: s.connect('\0' + sys.argv[1]))
        """)
        r = await sb.run_python(code, limits=LIMITS, argv=[name])
        with pytest.raises(BlockingIOError):
            listener.accept()
    _refused(r, "ECONNREFUSED")
    await _aftermath(sb, snap)
