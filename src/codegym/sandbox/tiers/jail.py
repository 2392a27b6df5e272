"""The ``jail`` tier: a warm zygote inside one bubblewrap jail per worker.

Threat model. Covered: a hostile Python, C, C++, JavaScript or shell program, running as
an unprivileged host uid in fresh user, pid, network, ipc, uts, mount and cgroup
namespaces, sees a read-only /usr and a handful of /etc files, no network interface but
loopback, and no host process. Per run it gets a fresh pid and ipc namespace with a
/proc of its own, a tmpfs work dir, /tmp and /dev/shm that no earlier run left anything
in (the worker's, emptied between runs: see ``_zygote.Scratch``; a mount namespace of its
own in session and workspace workers), a cgroup slot (memory, pids), rlimits, no
capabilities, no_new_privs and a seccomp deny-list; when the run ends the kernel kills
every process it started. Not covered: kernel vulnerabilities reachable through the
allowed syscalls (use the ``gvisor`` tier for multi-tenant use), CPU side channels, and
a program that reads the (public) system files under /usr.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from codegym.sandbox import _cgroups
from codegym.sandbox._uids import claim_uid, register_span, sandbox_uid, uid_problem
from codegym.sandbox._zygote import WS_KEEP, WS_LAYERS, WS_RUN
from codegym.sandbox.images.layers import layer_owner
from codegym.sandbox.tier import (
    BASE_ENV,
    DEFAULT_PRELOAD,
    ZYGOTE_DIR,
    Launch,
    Tier,
    WorkerSpec,
    find_python,
    zygote_argv,
    zygote_memfds,
)

INNER_UID = 1000
ETC_FILES = (
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "alternatives",
    "localtime",
    "ssl/openssl.cnf",
    "nsswitch.conf",
    "os-release",
)
WORKDIR = "/work"


class JailTier(Tier):
    name = "jail"

    def __init__(self, python: str | None = None) -> None:
        self.python = find_python(python)
        self.bwrap = shutil.which("bwrap")

    def problems(self) -> list[str]:
        missing = []
        if not self.bwrap:
            missing.append("bubblewrap is not installed (apt-get install bubblewrap)")
        if not self.python:
            missing.append("no system Python at /usr/bin/python3 (apt-get install python3)")
        if uids := uid_problem():
            return [*missing, uids]  # (the check below runs bwrap as that uid)
        if self.bwrap and not _userns_ok(self.bwrap):
            missing.append(
                "unprivileged user namespaces are disabled "
                "(sysctl kernel.unprivileged_userns_clone=1 / user.max_user_namespaces>0)"
            )
        cg = _cgroups.usable()
        if cg:
            missing.append(f"cgroups: {cg}")
        return missing

    def launch(self, spec: WorkerSpec) -> Launch:
        assert self.bwrap and self.python
        if spec.layers is not None:
            # layers are owned by one uid, which the worker must map (see layer_owner)
            uid, lock = layer_owner(), None
            if os.geteuid() == 0:
                register_span()  # (claim_uid does it for the other workers)
        else:
            uid, lock = claim_uid() if os.geteuid() == 0 else (os.geteuid(), None)
        cgroup = _cgroups.WorkerCgroup(
            f"{spec.name}", uid, backstop_memory_mb=8192, backstop_pids=4200
        )
        argv = [
            self.bwrap,
            "--unshare-all",
            "--die-with-parent",
            "--new-session",
            "--uid",
            str(INNER_UID),
            "--gid",
            str(INNER_UID),
            "--cap-add",
            "ALL",
            "--hostname",
            "sandbox",
            "--ro-bind",
            "/usr",
            "/usr",
            "--proc",
            "/proc",
            "--dev",
            "/dev",
            "--tmpfs",
            "/tmp",
            "--dir",
            WORKDIR,
        ]
        for link in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
            target = Path("/") / link
            if target.is_symlink():
                argv += ["--symlink", os.readlink(target), f"/{link}"]
            elif target.is_dir():
                argv += ["--ro-bind", str(target), f"/{link}"]
        for name in ETC_FILES:
            argv += ["--ro-bind-try", f"/etc/{name}", f"/etc/{name}"]
        memfds = zygote_memfds()
        argv += ["--perms", "0755", "--dir", ZYGOTE_DIR, "--dir", f"{ZYGOTE_DIR}/__pycache__"]
        for f, fd in memfds.items():
            argv += ["--perms", "0444", "--file", str(fd), f"{ZYGOTE_DIR}/{f}"]
        inner_procs = []
        for i, path in enumerate(cgroup.slot_procs()):
            inner = f"/run/cg/{i}"
            argv += ["--bind", str(path), inner]
            inner_procs.append(inner)
        # read-only counters: per-test CPU and OOM kills of everything a test started
        counters = {}
        for name, path in cgroup.counters().items():
            if path.exists():
                counters[name] = f"/run/cg/{name}"
                argv += ["--ro-bind", str(path), counters[name]]
        pass_fds = list(memfds.values())
        if spec.layers is not None:
            argv += ["--dir", WS_RUN, "--dir", WS_KEEP, "--ro-bind", spec.layers, WS_LAYERS]
        # the jail's own root, /dev and mount points must not carry state between runs
        argv += ["--remount-ro", "/dev", "--remount-ro", "/"]
        argv += ["--chdir", "/", *zygote_argv(self.python, ZYGOTE_DIR)]
        config = {
            "namespaces": True,
            "workdir": WORKDIR,
            "session": spec.session,
            "session_disk_mb": spec.session_disk_mb,
            "preload": list(DEFAULT_PRELOAD),
            "cgroup_procs": inner_procs,
            "counters": counters,
            "tmpfs_inodes": True,  # bound each run's tmpfs inodes too (see _zygote)
            "env": {**BASE_ENV, "HOME": WORKDIR},
            "shared_mounts": True,  # plain runs: no mount namespace each (_zygote.Scratch)
            "forker": True,  # runs forked from a clean image (_zygote.Zygote.start_forker)
            "workspaces": spec.layers is not None,
        }
        return Launch(
            argv=argv,
            env=dict(BASE_ENV),
            config=config,
            uid=uid,
            cgroup=cgroup,
            pass_fds=pass_fds,
            uid_lock=lock,
        )


def _userns_ok(bwrap: str) -> bool:
    uid = sandbox_uid() if os.geteuid() == 0 else None
    try:
        r = subprocess.run(
            [bwrap, "--unshare-user", "--unshare-pid", "--ro-bind", "/", "/", "true"],
            user=uid,
            group=uid,
            extra_groups=[] if uid is not None else None,
            capture_output=True,
            timeout=10,
        )
    except (OSError, subprocess.SubprocessError):
        return False
    return r.returncode == 0
