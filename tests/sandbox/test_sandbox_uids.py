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
    monkeypatch.delenv("CODEGYM_SANDBOX_UID")
    assert _uids.uid_problem() is None


@root_only
@pytest.mark.parametrize(
    ("first", "what"),
    [
        (64055, "DynamicUser= range"),  # the default until 2026-12-06
        (60000 - _uids.UIDS_NEEDED + 2, "systemd-homed"),  # its last uid is 60001
        (65530, "nobody"),
        (1879048191 - 10, "containers' uids"),
        (2147352576 + 100, "foreign-uid range"),
        (2147483648 - 5, "2^31"),
    ],
)
def test_spans_in_ranges_systemd_hands_out_are_refused(
    monkeypatch: pytest.MonkeyPatch, first: int, what: str
) -> None:
    """systemd makes accounts in these ranges as services and containers start, in no
    file the local-account check reads: a program would run as such a service's uid, and
    a process-tier sweep would kill its processes."""
    monkeypatch.setenv("CODEGYM_SANDBOX_UID", str(first))
    for name in ("jail", "process"):
        problems = tiers.make_tier(name, None).problems()
        assert any(what in p and "e.g. the default 2000000000" in p for p in problems), problems
    for fine in (65536, 70000, 1879048192, 2147352576 - _uids.UIDS_NEEDED):
        monkeypatch.setenv("CODEGYM_SANDBOX_UID", str(fine))
        assert _uids.uid_problem() is None, fine


@root_only
def test_a_dead_process_s_span_file_is_removed_and_a_live_one_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Registrations are one at a time, and each removes the span files no live process
    holds (one file per base ever used piled up before)."""
    locks = tmp_path / "codegym-uids"
    locks.mkdir(mode=0o700)
    monkeypatch.setattr(_uids, "UID_LOCKS", locks)
    (locks / "span-75000").write_bytes(b"")  # a dead process's
    folder = os.open(locks, os.O_RDONLY | os.O_DIRECTORY)
    live = _uids._lock(folder, "span-76000", wait=True, shared=True)  # a live one's
    os.close(folder)
    monkeypatch.setenv("CODEGYM_SANDBOX_UID", "77000")
    try:
        _uids.register_span()
        assert sorted(p.name for p in locks.iterdir()) == ["span-76000", "span-77000", "spans"]
        assert _uids.live_span_of(76000 + 5) == 76000 and _uids.live_span_of(77000) == 77000
        assert _uids.live_span_of(75000) is None and not (locks / "span-75000").exists()
    finally:
        assert live is not None
        os.close(live)
        os.close(_uids._registered.pop((str(locks), 77000)))
    assert _uids.live_span_of(76000) is None


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
def test_a_span_holding_a_local_account_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Programs would run as that account, and a process-tier sweep would kill its
    processes (review: the old default's first uid is libvirt-qemu on some Debian hosts).
    The account files are planted, so the test does not depend on the host's accounts."""
    files = {
        "passwd": "root:x:0:0::/root:/bin/sh\nsvc:x:80100:80100::/:/bin/false\n",
        "group": "root:x:0:\ngrp:x:81100:\n",
        "subuid": "alice:82000:65536\n",
        "subgid": "alice:not:numbers\n",  # ignored, as the shadow tools would
    }
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    monkeypatch.setattr(_uids, "ACCOUNT_FILES", tuple(str(tmp_path / n) for n in files))
    _uids._local_account.cache_clear()
    for first, said in [
        (80100 - _uids.UIDS_NEEDED + 1, "uid 80100 is 'svc' in"),  # its last uid
        (81000, "uid 81100 is 'grp' in"),
        (81900, 'uid 82000 is "alice\'s subordinate ids" in'),
        (147000, 'uid 147000 is "alice\'s subordinate ids" in'),
    ]:
        monkeypatch.setenv("CODEGYM_SANDBOX_UID", str(first))
        for tier_name in ("jail", "process"):
            problems = tiers.make_tier(tier_name, None).problems()
            assert any(said in p for p in problems), (first, problems)
            assert any("set CODEGYM_SANDBOX_UID to the first of" in p for p in problems)
    for fine in (80101, 83000 + 65536):  # just past the account, past the subordinate ids
        monkeypatch.setenv("CODEGYM_SANDBOX_UID", str(fine))
        assert _uids.uid_problem() is None, fine
    _uids._local_account.cache_clear()


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
