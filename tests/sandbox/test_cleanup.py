"""``kill -9`` of a process that owns pools: once a next pool starts, nothing of it is left.

A child process opens pools of every tier that runs here, a session, and busy runs, then
is killed with SIGKILL. Its workers, runs and judges die with it (``--die-with-parent``,
``PR_SET_PDEATHSIG``, pid namespaces); its cgroups and temp folders, which no process can
remove at its own death, are removed when the next pool starts (``tier.sweep_stale``).
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from textwrap import dedent

import pytest

from codegym.sandbox import Sandbox, _cgroups
from codegym.sandbox.tiers import working_tiers
from codegym.testing import await_until

OWNER = dedent("""
    import asyncio, sys
    from codegym.sandbox import AssertTest, Limits, Sandbox, Session

    async def main():
        pools = [Sandbox(tier=t, workers=2) for t in sys.argv[1:]]
        for p in pools:
            await p.start()
        session = Session()
        await session.start()
        await session.write_file("x.txt", "x")
        lim = Limits(cpu_s=60, wall_s=60)
        spin = "import os\\nos.fork()\\nwhile True:\\n    pass\\n"
        busy = [asyncio.create_task(p.run_python(spin, limits=lim)) for p in pools]
        code = "def f():\\n    while True:\\n        pass\\n"
        busy += [asyncio.create_task(
            pools[0].run_tests(code, [AssertTest("assert f()")], limits=lim))]
        print("ready", flush=True)  # the test waits until the runs have started
        await asyncio.gather(*busy)

    asyncio.run(main())
""")


def _left_by(pid: int) -> dict[str, list[str]]:
    tag = f"{pid}-"
    procs = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cgroups = (entry / "cgroup").read_text()
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if f"/codegym/{tag}" in cgroups and state != "Z":
            procs.append(entry.name)
    groups = []
    if _cgroups.version() is not None:
        for base in _cgroups._base(_cgroups.version() or 1):
            if base.exists():
                groups += [str(d) for d in base.iterdir() if d.name.startswith(tag)]
    tmp = Path(tempfile.gettempdir())
    files = [e.name for e in tmp.iterdir() if f"_{pid}_" in e.name or f"-{pid}-" in e.name]
    return {"processes": procs, "cgroups": groups, "temp": files}


@pytest.mark.skipif(os.geteuid() != 0, reason="the jail's cgroups need root here")
async def test_a_killed_owner_leaves_nothing_once_a_pool_starts() -> None:
    tiers = [t for t in ("jail", "process", "gvisor") if t in working_tiers()]
    owner = subprocess.Popen(
        [sys.executable, "-c", OWNER, *tiers], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        assert owner.stdout is not None
        line = await asyncio.wait_for(asyncio.to_thread(owner.stdout.readline), 120)
        assert line == b"ready\n", owner.stderr.read() if owner.stderr else b""
        # every tier's runs have started: processes, cgroups and temp files exist
        await await_until(
            lambda: all(_left_by(owner.pid).values()), timeout=60, what="the owner's runs"
        )
    finally:
        owner.send_signal(signal.SIGKILL)
        owner.wait()
    # its processes die with it; allow a busy host time for the kills to land
    await await_until(
        lambda: not _left_by(owner.pid)["processes"], timeout=30, what="the owner's processes dying"
    )
    async with Sandbox(workers=1):  # a next pool sweeps what no process could remove
        pass
    assert _left_by(owner.pid) == {"processes": [], "cgroups": [], "temp": []}
