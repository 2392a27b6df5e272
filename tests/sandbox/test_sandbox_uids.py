"""The uids sandboxed programs run as (as root): never a system uid, and their locks in a
folder no program can have made."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from codegym.sandbox import _uids, tiers

root_only = pytest.mark.skipif(os.geteuid() != 0, reason="uids are claimed only as root")


@root_only
@pytest.mark.parametrize("value", ["0", "999", "-5", "64055x", "²", str((1 << 32) - 100)])
def test_sandbox_uids_that_reach_root_or_a_system_uid_are_refused(
    monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    """Programs running as root (``CODEGYM_SANDBOX_UID=0``) could write root's cache and
    plant code every later run executes (found by review); the pool refuses to start."""
    monkeypatch.setenv("CODEGYM_SANDBOX_UID", value)
    for name in ("jail", "process"):
        problems = tiers.make_tier(name, None).problems()
        assert any(f"CODEGYM_SANDBOX_UID={value!r}" in p for p in problems), (name, problems)
    monkeypatch.setenv("CODEGYM_SANDBOX_UID", "64055")
    assert _uids.uid_problem() is None


@root_only
def test_uid_locks_in_a_folder_another_uid_made_are_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A program (process tier) that made the lock folder first in a shared /tmp could
    hold every uid's lock or point the lock files at root's files (found by review)."""
    locks = tmp_path / "codegym-uids"
    monkeypatch.setattr(_uids, "UID_LOCKS", locks)
    for planted in ("a link", "a file", "another uid's folder"):
        if planted == "a link":
            (tmp_path / "theirs").mkdir(mode=0o700)
            locks.symlink_to(tmp_path / "theirs")
        elif planted == "a file":
            locks.write_bytes(b"")
        else:
            locks.mkdir(mode=0o700)
            os.chown(locks, 1000, 1000)
        with pytest.raises(PermissionError, match="not a folder of this user's alone"):
            _uids.claim_uid()
        if planted != "another uid's folder":
            locks.unlink()
    os.chown(locks, 0, 0)
    victim = tmp_path / "victim"
    first = _uids.sandbox_uid()
    (locks / str(first)).symlink_to(victim)  # followed, O_CREAT would make it as root
    with pytest.raises(OSError):
        _uids.claim_uid()
    assert not victim.exists()
    (locks / str(first)).unlink()
    uid, fd = _uids.claim_uid()
    os.close(fd)
    assert uid == first and (locks / str(first)).is_file()


@root_only
def test_a_span_holding_a_local_account_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """Programs would run as that account, and a process-tier sweep would kill its
    processes (review: the default's first uid is libvirt-qemu on some Debian hosts)."""
    accounts = [line.split(":") for line in Path("/etc/passwd").read_text().splitlines()]
    high = [(int(a[2]), a[0]) for a in accounts if len(a) > 2 and a[2].isdigit()]
    high = [(uid, name) for uid, name in high if uid >= 1000 + _uids.UIDS_NEEDED]
    if not high:
        pytest.skip("no local account above the lowest span to collide with")
    uid, name = high[0]
    monkeypatch.setenv("CODEGYM_SANDBOX_UID", str(uid - _uids.UIDS_NEEDED + 1))  # its last
    for tier_name in ("jail", "process"):
        problems = tiers.make_tier(tier_name, None).problems()
        assert any(f"uid {uid} is {name!r} in /etc/passwd" in p for p in problems), problems
        assert any("set CODEGYM_SANDBOX_UID to the first of" in p for p in problems)
    monkeypatch.setenv("CODEGYM_SANDBOX_UID", str(uid + 1))  # just past it
    assert _uids.uid_problem() is None or f"uid {uid} " not in (_uids.uid_problem() or "")


@root_only
def test_a_sweep_refuses_while_its_own_uid_is_a_worker_s(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two pools whose spans overlap: one's sweeper uid is the other's worker uid, and the
    sweep's kill(-1) would reach that worker (found by review). The sweep refuses instead."""
    monkeypatch.setenv("CODEGYM_SANDBOX_UID", "70000")  # off the span the other tests use
    sweeper = _uids.sweeper_uid()
    _, held = _uids.claim_uid(range(sweeper, sweeper + 1))  # as the other pool's worker
    try:
        with pytest.raises(_uids.SweepFailed, match="overlaps this one's"):
            _uids.sweep_uid(_uids.process_uids()[0])
    finally:
        os.close(held)
    _uids.sweep_uid(_uids.process_uids()[0])  # nothing of that uid's left: ends at once


@root_only
def test_a_span_overlapping_a_live_process_s_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """Pools 1 apart: one's layer owner is the other's sweeper, whose sweeps its workspace
    programs could then stop (found by review). The second pool is refused, and once the
    first process is gone its span is free again."""
    import subprocess
    import sys

    hold = (
        "import os, sys, time; os.environ['CODEGYM_SANDBOX_UID'] = '71000'\n"
        "from codegym.sandbox import _uids; _uids.register_span(); print('held', flush=True)\n"
        "time.sleep(60)"
    )
    other = subprocess.Popen([sys.executable, "-c", hold], stdout=subprocess.PIPE, text=True)
    try:
        assert other.stdout is not None and other.stdout.readline() == "held\n"
        monkeypatch.setenv("CODEGYM_SANDBOX_UID", "71001")
        with pytest.raises(PermissionError, match="the 514 uids from 71000, which overlap"):
            _uids.register_span()
        monkeypatch.setenv("CODEGYM_SANDBOX_UID", str(71000 + 2 * _uids.UIDS_NEEDED))
        _uids.register_span()  # far enough
        os.close(_uids._registered.pop((str(_uids.UID_LOCKS), 71000 + 2 * _uids.UIDS_NEEDED)))
    finally:
        other.kill()
        other.wait()
    monkeypatch.setenv("CODEGYM_SANDBOX_UID", "71001")
    _uids.register_span()  # the holder is gone
    os.close(_uids._registered.pop((str(_uids.UID_LOCKS), 71001)))
