"""The zygote's files as a worker gets them: sources and their bytecode, which the
worker's interpreter imports instead of compiling (compiling left megabytes of heap in
every zygote, which every run's fork and exit paid for)."""

from __future__ import annotations

import marshal
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from codegym.sandbox import tier

pytestmark = pytest.mark.skipif(tier.find_python() is None, reason="no system Python")


def test_the_worker_s_interpreter_imports_the_bytecode_not_the_sources(tmp_path: Path) -> None:
    for name, data in tier.zygote_files().items():
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_bytes(data)
    python = tier.find_python()
    assert python is not None
    modules = [n[:-3] for n in tier.ZYGOTE_FILES]
    boot = f"import sys; sys.path[0] = {str(tmp_path)!r}; import {', '.join(modules)}"
    r = subprocess.run([python, "-v", "-s", "-B", "-c", boot], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    for m in modules:  # -v names where each module's code object came from
        assert f"code object from '{tmp_path}/__pycache__/{m}." in r.stderr, m
    assert not list(tmp_path.glob("*.pyc")) and len(list(tmp_path.glob("__pycache__/*"))) == 6


def _value(source: Path) -> object:
    data = tier._bytecode(source.name, source.read_bytes())
    ns: dict[str, object] = {}
    exec(marshal.loads(data[16:]), ns)  # past the 16-byte header (PEP 552)
    return ns["X"]


@pytest.fixture
def package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A package folder of its own, where bytecode may be written."""
    monkeypatch.setattr(tier, "PACKAGE_DIR", tmp_path)
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    return tmp_path


def test_a_changed_or_damaged_cache_is_compiled_again(package: Path) -> None:
    source = package / "_m.py"
    source.write_text("X = 1\n")
    assert _value(source) == 1
    (cached,) = package.glob("__pycache__/_m.*.pyc")
    assert ".opt-" not in cached.name
    source.write_text("X = 2\n")
    assert _value(source) == 2  # the old source's bytecode is not used
    cached.write_bytes(cached.read_bytes()[:40])  # its header intact, its code cut short
    assert _value(source) == 2 and len(cached.read_bytes()) > 40


def test_the_cache_is_read_only_to_others_whatever_the_umask(package: Path) -> None:
    """Every later worker runs it: a world-writable one was a program's way in."""
    source = package / "_m.py"
    source.write_text("X = 1\n")
    old = os.umask(0)
    try:
        _value(source)
    finally:
        os.umask(old)
    (cached,) = package.glob("__pycache__/_m.*.pyc")
    assert stat.S_IMODE(cached.stat().st_mode) == 0o644
    assert stat.S_IMODE(cached.parent.stat().st_mode) == 0o755


def test_no_cache_where_it_must_not_be_written(
    package: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = package / "_m.py"
    source.write_text("X = 1\n")
    monkeypatch.setattr(sys, "dont_write_bytecode", True)  # PYTHONDONTWRITEBYTECODE, -B
    assert _value(source) == 1 and not (package / "__pycache__").exists()
    monkeypatch.setattr(sys, "dont_write_bytecode", False)

    def read_only(*_: object) -> None:
        raise OSError(30, "Read-only file system")

    monkeypatch.setattr(tier.os, "replace", read_only)  # a read-only install: no cache,
    source.write_text("X = 3\n")
    assert _value(source) == 3  # but bytecode all the same
    assert not list(package.glob("__pycache__/*"))  # and no half-written file left
