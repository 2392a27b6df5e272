"""The ``process`` tier: rlimits, a process group and seccomp, without namespaces.

For hosts without user namespaces or cgroups only. Threat model: almost nothing is
covered. The program runs as an unprivileged uid when codegym runs as root (otherwise as
the calling user, who can read their own files), shares the host's network, file system
and process table; a daemon that calls setsid escapes the run's kill and lives as long as
its worker (as root, every process of the worker's uid, one of the tier's own span, is
killed before the worker starts and when it stops; otherwise it lives on); files and SysV
IPC objects a program leaves in shared folders outlive it; memory is bounded only by
RLIMIT_AS. Never the default, and it says so every time it starts.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from codegym.sandbox._uids import claim_uid, process_uids, uid_problem
from codegym.sandbox.tier import (
    BASE_ENV,
    DEFAULT_PRELOAD,
    Launch,
    Tier,
    WorkerSpec,
    find_python,
    zygote_argv,
    zygote_dir,
)


class ProcessTier(Tier):
    name = "process"

    def __init__(self, python: str | None = None) -> None:
        self.python = find_python(python)

    def problems(self) -> list[str]:
        missing = [] if self.python else ["no Python interpreter found for the sandbox"]
        if uids := uid_problem():
            missing.append(uids)
        return missing

    @property
    def warning(self) -> str | None:
        return (
            "sandbox tier 'process' gives NO real isolation (no namespaces, no cgroups): "
            "programs share the host's network and files. Use it only on hosts where "
            "'jail' cannot run, and never for untrusted multi-tenant code."
        )

    def launch(self, spec: WorkerSpec) -> Launch:
        assert self.python
        uid, lock = claim_uid(process_uids()) if os.geteuid() == 0 else (None, None)
        work = Path(tempfile.mkdtemp(prefix=f"codegym-{spec.name}-"))
        if uid is not None:
            os.chown(work, uid, uid)
        os.chmod(work, 0o700)
        config = {
            "namespaces": False,
            "workdir": str(work),
            "session": spec.session,
            "preload": list(DEFAULT_PRELOAD),
            "cgroup_procs": [],
            "env": {**BASE_ENV, "HOME": str(work)},
            "rlimit_as": True,
            "nproc": True,
        }
        argv = zygote_argv(self.python, str(zygote_dir()))
        return Launch(
            argv=argv,
            env=dict(BASE_ENV),
            config=config,
            uid=uid,
            cleanup=[work],
            uid_lock=lock,
            sweep=uid is not None,  # the worker sweeps it before it starts and at its end
        )
