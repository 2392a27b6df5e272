"""A run cannot starve a concurrent run of a per-user kernel resource, nor learn about the
host from the jail's own files."""

from __future__ import annotations

import asyncio
import os
import tempfile
from textwrap import dedent

import pytest
from adversary_kit import LIMITS, Clean

from codegym.sandbox import Limits, Sandbox, Verdict
from codegym.sandbox.images.layers import layer_owner
from workspace_kit import WorkspaceSandbox

pytestmark = pytest.mark.asyncio(loop_scope="module")

HOARD = dedent("""
    import ctypes, os, sys, time
    libc = ctypes.CDLL(None, use_errno=True)
    held = []
    while True:  # every inotify instance this user may have (max_user_instances)
        fd = libc.inotify_init1(0)
        if fd < 0:
            break
        held.append(fd)
        if len(held) > 100000:
            break
    print(len(held), time.time(), flush=True)  # holding all of them from then on
    time.sleep(float(sys.argv[1]))
""")
WANT_ONE = dedent("""
    import ctypes, os, time
    libc = ctypes.CDLL(None, use_errno=True)
    fd = libc.inotify_init1(0)
    print("ok" if fd >= 0 else os.strerror(ctypes.get_errno()), time.time())
""")


@pytest.mark.skipif(os.geteuid() != 0, reason="a uid per worker needs root")
async def test_one_run_cannot_starve_another_of_inotify(sb: Sandbox, clean: Clean) -> None:
    if isinstance(sb, WorkspaceSandbox):
        # A known weakness, documented in docs/sandbox.md: workspace workers share the
        # layers' owner uid, so per-user kernel counts are shared. Strict: a fix flips it.
        pytest.xfail("workspace workers share one host uid (per-user inotify count)")
    lim = Limits(cpu_s=2, wall_s=8, open_files=4096)
    hoarder = asyncio.create_task(sb.run_python(HOARD, limits=lim, argv=["3"]))
    asks = []
    while not hoarder.done():  # the other worker asks for one, again and again meanwhile
        asks.append(await sb.run_python(WANT_ONE, limits=LIMITS))
        await asyncio.sleep(0.1)
    h = await hoarder
    assert h.verdict is Verdict.OK, h
    count, since = h.stdout.split()
    assert int(count) > 0, h
    # the asks made while the hoarder held them all: there must be some, each served
    during = [r for r in asks if r.stdout and float(r.stdout.split()[1]) > float(since)]
    assert during, "no ask fell inside the hoarder's hold: the test proved nothing"
    for r in during:
        assert (r.verdict, r.stdout.split()[0]) == (Verdict.OK, "ok"), (r.stdout, r.stderr)
    await clean()


@pytest.mark.skipif(os.geteuid() != 0, reason="a uid per worker needs root")
async def test_each_worker_runs_under_a_host_uid_of_its_own(sb: Sandbox) -> None:
    """Plain workers each claim a uid; workspace workers all run as the layers' owner
    (overlayfs in a user namespace copies up only files of a uid the jail maps)."""
    uids = []
    for w in sb._workers:  # as the host sees them (inside, every run is uid 1000)
        assert w.proc is not None
        with open(f"/proc/{w.proc.pid}/status") as f:
            line = next(x for x in f if x.startswith("Uid:"))
        uids.append(int(line.split()[1]))
    if isinstance(sb, WorkspaceSandbox):
        assert set(uids) == {layer_owner()} and 0 not in uids, uids
        return
    assert len(set(uids)) == len(uids) and 0 not in uids, uids


async def test_the_host_s_boot_line_and_paths_stay_hidden(sb: Sandbox, clean: Clean) -> None:
    code = dedent("""
        print(repr(open('/proc/cmdline').read()))
        print(open('/proc/self/mountinfo').read())
    """)
    r = await sb.run_python(code, limits=LIMITS)
    assert r.verdict is Verdict.OK, r.stderr
    cmdline, mounts = r.stdout.split("\n", 1)
    assert cmdline == "''"
    here = os.path.dirname(os.path.abspath(__file__))
    if isinstance(sb, WorkspaceSandbox):
        # The one host path a workspace run sees, documented in docs/sandbox.md: the
        # image cache's layers folder, bound read-only (the overlay's lower layers).
        layers = [line for line in mounts.splitlines() if " /.ws/layers " in line]
        assert [line.split()[3] for line in layers] == [str(sb.images.layers_dir)], layers
        mounts = "\n".join(line for line in mounts.splitlines() if line not in layers)
        assert "/.ws/keep/" not in mounts and " /.ws/run " not in mounts, mounts
    for secret in (tempfile.gettempdir() + "/", here, "codegym_zygote", "/sys/fs/cgroup"):
        assert secret not in mounts, (secret, mounts)
    await clean()
