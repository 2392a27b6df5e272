"""Worker cgroups left behind by a killed owner are swept; live ones are never touched."""

from __future__ import annotations

import os
import subprocess

import pytest

from codegym.sandbox import _cgroups


def _dead_pid() -> int:
    p = subprocess.Popen(["/bin/true"])
    p.wait()
    return p.pid  # reaped: nothing has this pid until the kernel reuses it


@pytest.mark.skipif(_cgroups.usable() is not None, reason="no writable cgroup hierarchy")
def test_sweep_removes_only_cgroups_of_dead_owners() -> None:
    v = _cgroups.version()
    assert v is not None
    dead = [b / f"{_dead_pid()}-test-w0" for b in _cgroups._base(v)]
    live = [b / f"{os.getpid()}-test-w0" for b in _cgroups._base(v)]
    for d in dead + live:
        (d / "run").mkdir(parents=True, exist_ok=True)
    try:
        assert _cgroups.sweep_stale() >= len(dead)
        assert not any(d.exists() for d in dead)
        assert all((d / "run").is_dir() for d in live)
    finally:
        for d in dead + live:
            for sub in (d / "run", d):
                if sub.exists():
                    sub.rmdir()
