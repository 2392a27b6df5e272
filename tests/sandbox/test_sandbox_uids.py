"""The uids sandboxed programs run as (as root): never a system uid, and their locks in a
folder no program can have made."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from codegym.sandbox import tier, tiers

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
    assert tier.uid_problem() is None


@root_only
def test_uid_locks_in_a_folder_another_uid_made_are_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A program (process tier) that made the lock folder first in a shared /tmp could
    hold every uid's lock or point the lock files at root's files (found by review)."""
    locks = tmp_path / "codegym-uids"
    monkeypatch.setattr(tier, "UID_LOCKS", locks)
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
            tier.claim_uid()
        if planted != "another uid's folder":
            locks.unlink()
    os.chown(locks, 0, 0)
    victim = tmp_path / "victim"
    first = tier.sandbox_uid()
    (locks / str(first)).symlink_to(victim)  # followed, O_CREAT would make it as root
    with pytest.raises(OSError):
        tier.claim_uid()
    assert not victim.exists()
    (locks / str(first)).unlink()
    uid, fd = tier.claim_uid()
    os.close(fd)
    assert uid == first and (locks / str(first)).is_file()
