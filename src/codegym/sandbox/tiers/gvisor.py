"""The ``gvisor`` tier: a warm zygote inside one gVisor (``runsc``) sandbox per worker.

Each worker is one long-lived ``runsc run`` container whose init process is the zygote;
frames flow over the container's stdin/stdout, and every execution is a fork inside
gVisor (no ``runsc exec`` per run). The container sees an empty read-only root with
``/usr`` and a few ``/etc`` files bound read-only, the two zygote files at
``/opt/codegym``, gVisor's own ``/proc`` and ``/dev``, and no network but loopback
(``--network=none``). Per run the zygote then builds the same tree as in the ``jail``
tier: a fresh pid/mount/ipc namespace (gVisor's own), private tmpfs work dir, /tmp and
/dev/shm, rlimits, no capabilities, no_new_privs and the seccomp deny-list.

Threat model. Covered: what the ``jail`` tier covers (with the limits below), plus the
host kernel. The program's system calls are served by gVisor's user-space kernel (the
Sentry), which runs on the host as an unprivileged user in its own namespaces under a
strict host seccomp filter; file access goes through a separate gofer process, and only
read-only binds are exposed. The program never makes a host system call: a host kernel
bug is reachable only through the Sentry's own small, filtered set of host calls, which
makes this the tier for agents and multi-tenant use. Not covered: bugs in gVisor itself
(a Sentry escape still lands in a confined, unprivileged process), CPU side channels,
the public system files under /usr, and denial of service inside one worker's sandbox (a
run can slow its own worker).

Limits, and how each is enforced (weaker than ``jail`` where noted):

- CPU time: RLIMIT_CPU inside gVisor, and the run's rusage as measured by gVisor.
  Weaker: this gVisor arms RLIMIT_CPU on ``setrlimit`` only, not on ``fork``, so a
  process the program forks itself is stopped by the wall-clock limit instead (the
  verdict is still ``timeout``; it just takes ``wall_s``). The harness re-arms it for
  each test of a batch.
- Wall clock and output: the zygote, as in every tier.
- Memory: RLIMIT_AS (``memory_mb`` + 512 MiB of address space) per process, inside
  gVisor. Weaker: bounded per process, not per tree. gVisor's memory cgroup does not
  enforce its limit (measured), and a host cgroup limit per run would kill the Sentry
  (the whole worker), so there is no per-run cgroup. The whole sandbox (Sentry, gofer
  and the program) sits in one host cgroup per worker with an 8 GiB / 8192-task
  backstop.
- Processes and threads: RLIMIT_NPROC, which gVisor enforces per uid inside the
  sandbox; the zygote shares the uid, so a run gets one fewer than ``max_processes``.
  (This gVisor's cgroupfs has no pids controller.)
- Peak memory is the run's ``ru_maxrss`` (largest process), not a cgroup peak.

Known gaps of this runsc build (Debian's 20221219): no ``pidfd_open`` (the zygote falls
back to a SIGCHLD pipe); ``statx``/``fstatat`` reject ``AT_NO_AUTOMOUNT`` with EINVAL,
so coreutils ``ls`` and ``stat`` fail inside the sandbox (``cp``, ``find``, ``du``,
Python and compilers work); ``fork`` costs ~9 ms under ptrace (<1 ms natively).

Needs: ``runsc`` on PATH (Debian: ``apt-get install runsc``; ``CODEGYM_RUNSC`` names
another binary), root (``runsc run`` creates namespaces and chroots its processes;
the sandbox itself then runs as an unprivileged host user), and a working platform.
The default is ``ptrace`` (``CODEGYM_RUNSC_PLATFORM`` overrides it): ``kvm`` needs
/dev/kvm and hangs in some nested VMs; ``systrap`` exists only in newer gVisor.
Cost on a 2-vCPU VM: ~35 ms per warm ``print(1)`` (``runsc exec`` per run: ~90 ms), and
~0.45 s to start a worker (``benchmarks/gvisor_bench.py``).
"""

from __future__ import annotations

import functools
import json
import os
import secrets
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from codegym.sandbox import _cgroups
from codegym.sandbox.tier import (
    BASE_ENV,
    DEFAULT_PRELOAD,
    ZYGOTE_DIR,
    Launch,
    Tier,
    WorkerSpec,
    find_python,
    zygote_argv,
    zygote_dir,
    zygote_files,
)
from codegym.sandbox.tiers.jail import ETC_FILES, INNER_UID, WORKDIR

PLATFORM_ENV = "CODEGYM_RUNSC_PLATFORM"
PROBE_TIMEOUT_S = 30.0
BACKSTOP_MEMORY_MB = 8192
BACKSTOP_PIDS = 8192
# All the zygote needs, inside gVisor's own user namespace: new pid/mount/ipc namespaces
# and tmpfs/proc mounts per run. The program drops it before it starts.
ZYGOTE_CAPS = ("CAP_SYS_ADMIN",)
LINKS = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")


class GVisorTier(Tier):
    name = "gvisor"

    def __init__(self, python: str | None = None) -> None:
        self.python = find_python(python)
        self.runsc = os.environ.get("CODEGYM_RUNSC") or shutil.which("runsc")
        self.platform = os.environ.get(PLATFORM_ENV, "ptrace")

    def problems(self) -> list[str]:
        missing = []
        if not self.runsc:
            missing.append("gVisor is not installed: no runsc on PATH (apt-get install runsc)")
        if not self.python:
            missing.append("no system Python at /usr/bin/python3 (apt-get install python3)")
        elif not Path(self.python).resolve().is_relative_to("/usr"):
            missing.append(
                f"the sandbox Python {self.python} is not under /usr, the only host "
                "directory the gVisor sandbox sees; use the system Python"
            )
        if os.geteuid() != 0:
            missing.append(
                f"runsc needs root to create its sandbox (codegym runs as uid {os.geteuid()})"
            )
        cg = _cgroups.usable()
        if cg:
            missing.append(f"cgroups: {cg}")
        if not missing:
            assert self.runsc and self.python
            failure = _probe(self.runsc, self.platform, self.python)
            if failure:
                missing.append(failure)
        return missing

    def launch(self, spec: WorkerSpec) -> Launch:
        assert self.runsc and self.python
        tmp = Path(tempfile.mkdtemp(prefix=f"codegym-gvisor-{spec.name}-"))
        bundle = tmp / "bundle"
        args = zygote_argv(self.python, ZYGOTE_DIR)
        binds = {f"{ZYGOTE_DIR}/{f}": str(zygote_dir() / f) for f in zygote_files()}
        try:
            write_bundle(bundle, args, {**BASE_ENV, "HOME": WORKDIR}, binds)
            cgroup = SandboxCgroup(
                spec.name,
                os.geteuid(),
                backstop_memory_mb=BACKSTOP_MEMORY_MB,
                backstop_pids=BACKSTOP_PIDS,
            )
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        argv = [
            *runsc_flags(self.runsc, tmp / "state", self.platform),
            "run",
            "--bundle",
            str(bundle),
            # a restarted worker keeps its name; its container ID must not meet the one
            # of the crashed predecessor that runsc may still be tearing down
            f"codegym-{spec.name}-{secrets.token_hex(3)}",
        ]
        config = {
            "namespaces": True,
            "workdir": WORKDIR,
            "session": spec.session,
            "session_disk_mb": spec.session_disk_mb,
            "preload": list(DEFAULT_PRELOAD),
            "cgroup_procs": [],
            "env": {**BASE_ENV, "HOME": WORKDIR},
            "rlimit_as": True,
            "nproc": True,
        }
        # runsc runs as root on the host; it drops the sandbox to an unprivileged user.
        # --attached (the default of ``runsc run``) kills the sandbox when runsc dies.
        return Launch(
            argv=argv, env=dict(BASE_ENV), config=config, uid=None, cgroup=cgroup, cleanup=[tmp]
        )


class SandboxCgroup(_cgroups.WorkerCgroup):
    """The host cgroup of a whole runsc sandbox (runsc, gofer, Sentry and the program).

    Per-run limits live inside gVisor (rlimits), so ``prepare`` sets nothing, and the only
    host counter that says something about one run is an OOM kill under the backstop.
    CPU time and peak memory come from the run's rusage, as measured by gVisor.
    """

    def prepare(self, memory_mb: int, max_processes: int) -> None:
        return None

    def stats(self) -> _cgroups.Stats:
        mem = self._ctl("memory", slot=False)
        events = "memory.oom_control" if self.v == 1 else "memory.events"
        ooms = _cgroups._keyed(self._read(mem / events)).get("oom_kill", 0)
        return _cgroups.Stats(None, None, ooms)


def runsc_flags(runsc: str, state: Path, platform: str) -> list[str]:
    """runsc's global flags: private state dir, no network, no host cgroup changes."""
    return [
        runsc,
        "--root",
        str(state),
        f"--platform={platform}",
        "--network=none",
        "--ignore-cgroups",  # the worker's host cgroup is set up by codegym
    ]


def write_bundle(bundle: Path, args: list[str], env: dict[str, str], binds: dict[str, str]) -> None:
    """Write an OCI bundle: an empty read-only root, /usr and /etc files bound read-only.

    ``binds`` maps container paths to host files, bound read-only.
    """
    rootfs = bundle / "rootfs"
    for d in ("usr", "etc", "proc", "dev", "tmp", WORKDIR.lstrip("/")):
        (rootfs / d).mkdir(parents=True, exist_ok=True)
    mounts: list[dict[str, Any]] = [
        {"destination": "/proc", "type": "proc", "source": "proc"},
        {
            "destination": "/tmp",
            "type": "tmpfs",
            "source": "tmpfs",
            "options": ["nosuid", "nodev", "mode=1777", "size=64m"],
        },
        _ro_bind("/usr", "/usr"),
    ]
    for link in LINKS:
        host = Path("/") / link
        if host.is_symlink():
            (rootfs / link).symlink_to(os.readlink(host))
        elif host.is_dir():
            (rootfs / link).mkdir()
            mounts.append(_ro_bind(str(host), f"/{link}"))
    files = {f"/etc/{name}": f"/etc/{name}" for name in ETC_FILES}
    for dest, src in {**files, **binds}.items():
        host = Path(src)
        if not host.exists():
            continue
        point = rootfs / dest.lstrip("/")
        point.parent.mkdir(parents=True, exist_ok=True)
        if host.is_dir():
            point.mkdir(exist_ok=True)
        else:
            point.touch()
        mounts.append(_ro_bind(src, dest))
    caps = list(ZYGOTE_CAPS)
    spec = {
        "ociVersion": "1.0.0",
        "process": {
            "user": {"uid": INNER_UID, "gid": INNER_UID},
            "args": args,
            "env": [f"{k}={v}" for k, v in env.items()],
            "cwd": "/",
            "capabilities": {k: caps for k in ("bounding", "effective", "permitted")},
            "rlimits": [{"type": "RLIMIT_NOFILE", "hard": 65536, "soft": 1024}],
            "noNewPrivileges": True,
        },
        "root": {"path": "rootfs", "readonly": True},
        "hostname": "sandbox",
        "mounts": mounts,
        "linux": {
            "namespaces": [{"type": t} for t in ("pid", "network", "ipc", "uts", "mount")],
        },
    }
    (bundle / "config.json").write_text(json.dumps(spec, indent=1))


def _ro_bind(src: str, dest: str) -> dict[str, Any]:
    return {
        "destination": dest,
        "type": "bind",
        "source": src,
        "options": ["rbind", "ro", "nosuid", "nodev"],
    }


@functools.cache
def _probe(runsc: str, platform: str, python: str) -> str | None:
    """Start a throwaway sandbox that runs the system Python; None when that works."""
    code = "import ctypes, os; print('ok', os.getuid())"
    with tempfile.TemporaryDirectory(prefix="codegym-gvisor-probe-") as tmp:
        write_bundle(Path(tmp) / "bundle", [python, "-I", "-c", code], dict(BASE_ENV), {})
        argv = [
            *runsc_flags(runsc, Path(tmp) / "state", platform),
            "run",
            "--bundle",
            str(Path(tmp) / "bundle"),
            f"codegym-probe-{os.getpid()}",
        ]
        try:
            r = subprocess.run(
                argv,
                capture_output=True,
                timeout=PROBE_TIMEOUT_S,
                stdin=subprocess.DEVNULL,
                env=dict(BASE_ENV),
            )
        except subprocess.TimeoutExpired:
            hint = (
                " (the kvm platform hangs in nested VMs; try ptrace)" if platform == "kvm" else ""
            )
            return (
                f"runsc did not start a sandbox within {PROBE_TIMEOUT_S:.0f}s on the "
                f"{platform!r} platform{hint}; set {PLATFORM_ENV} to another platform"
            )
        except OSError as e:
            return f"cannot run {runsc}: {e}"
    out = r.stdout.decode("utf-8", "replace").strip()
    if r.returncode != 0 or not out.startswith("ok"):
        err = r.stderr.decode("utf-8", "replace").strip()[-500:]
        return (
            f"runsc failed to start a sandbox on the {platform!r} platform "
            f"(exit {r.returncode}): {err or out or 'no output'}"
        )
    return None
