"""The zygote's files as a worker gets them: sources and their bytecode, which the
worker's interpreter imports instead of compiling (compiling left megabytes of heap in
every zygote, which every run's fork and exit paid for)."""

from __future__ import annotations

import marshal
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


def test_the_bytecode_is_made_in_memory_with_its_asserts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No cache on disk that a later worker would trust (one in a folder another uid could
    write let a program replace the bytecode), and asserts kept whatever ``-O`` says."""
    monkeypatch.setattr(tier, "PACKAGE_DIR", tmp_path)
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    source = tmp_path / "_m.py"
    source.write_text("X = 1\nassert X == 2, 'kept'\n")
    data = tier._bytecode("_m.py", source.read_bytes())
    assert list(tmp_path.iterdir()) == [source]
    with pytest.raises(AssertionError, match="kept"):
        exec(marshal.loads(data[16:]), {})  # past the 16-byte header (PEP 552)
