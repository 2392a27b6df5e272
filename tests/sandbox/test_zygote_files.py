"""The zygote's files as a worker gets them: sources and their bytecode, which the
worker's interpreter imports instead of compiling (compiling left megabytes of heap in
every zygote, which every run's fork and exit paid for)."""

from __future__ import annotations

import hashlib
import marshal
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from codegym.sandbox import _bytecode, tier

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


def test_the_bytecode_has_its_asserts_and_nothing_is_written_beside_the_sources(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Nothing beside the sources (a cache in a folder another uid could write let a
    program replace the bytecode), and asserts kept whatever ``-O`` says."""
    monkeypatch.setattr(tier, "PACKAGE_DIR", tmp_path)
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    source = tmp_path / "_m.py"
    source.write_text("X = 1\nassert X == 2, 'kept'\n")
    data = tier._bytecode("_m.py", source.read_bytes())
    assert {p.name for p in tmp_path.iterdir()} <= {"_m.py", "cache"}
    with pytest.raises(AssertionError, match="kept"):
        exec(marshal.loads(data[16:]), {})  # past the 16-byte header (PEP 552)


SOURCE = b"X = 41 + 1\n"
NAME = "/opt/codegym/_m.py"
root_only = pytest.mark.skipif(os.geteuid() != 0, reason="the cache is kept only as root")


@pytest.fixture
def cache(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The bytecode cache, under a folder of this test's own in the home (not in /tmp,
    which others can write: the cache is not kept under it)."""
    home = Path(tempfile.mkdtemp(prefix="codegym-test-", dir=Path.home()))
    monkeypatch.setenv("XDG_CACHE_HOME", str(home / "xdg"))
    folder = _bytecode.cache_folder()
    assert folder is not None and folder.parent.parent == home / "xdg"
    yield folder
    shutil.rmtree(home, ignore_errors=True)


def _compiles(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Counts what is compiled from now on."""
    made: list[str] = []

    def counted(source: bytes, filename: str, *args: object, **kw: object) -> object:
        made.append(filename)
        return compile(source, filename, *args, **kw)  # type: ignore[call-overload]

    monkeypatch.setattr(_bytecode, "compile", counted, raising=False)
    return made


def _entry(data: bytes) -> bytes:
    """What a cache file holds for ``data``: it, then its sha256."""
    return data + hashlib.sha256(data).digest()


@root_only
def test_a_second_process_takes_the_cached_bytecode(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = _bytecode.compiled("_m.py", SOURCE, NAME)
    assert stat.S_IMODE(cache.stat().st_mode) == 0o700
    assert stat.S_IMODE(cache.parent.stat().st_mode) == 0o700
    (entry,) = cache.iterdir()
    assert stat.S_IMODE(entry.stat().st_mode) == 0o600 and entry.read_bytes() == _entry(first)
    made = _compiles(monkeypatch)
    assert _bytecode.compiled("_m.py", SOURCE, NAME) == first and made == []
    ns: dict[str, object] = {}
    exec(marshal.loads(first[16:]), ns)
    assert ns["X"] == 42
    # a changed source is a new entry, and the old one goes
    _bytecode.compiled("_m.py", b"X = 7\n", NAME)
    assert made == [NAME] and len(list(cache.iterdir())) == 1


@root_only
@pytest.mark.parametrize(
    "spoil",
    ["folder open to others", "a parent open to others", "a parent a link",
     "entry writable by others", "entry a link", "entry a FIFO", "entry cut",
     "entry with a bit flipped", "entry with bytes after it", "entry of another file",
     "entry of another uid"],
)  # fmt: skip
def test_a_cache_that_is_not_root_s_alone_or_not_whole_is_not_run(
    cache: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, spoil: str
) -> None:
    good = _bytecode.compiled("_m.py", SOURCE, NAME)
    (entry,) = cache.iterdir()
    # what a planter would write: this source's header and digest, another program's code
    evil = _entry(good[:16] + marshal.dumps(compile("X = 666\n", NAME, "exec")))
    if spoil == "folder open to others":
        cache.chmod(0o777)
        entry.write_bytes(evil)
    elif spoil == "a parent open to others":
        cache.parent.chmod(0o777)  # another uid could swap the folder for its own
        entry.write_bytes(evil)
    elif spoil == "a parent a link":
        (tmp_path / "elsewhere").mkdir(mode=0o700)
        cache.parent.rename(tmp_path / "elsewhere" / "codegym")
        cache.parent.symlink_to(tmp_path / "elsewhere" / "codegym")
        entry.write_bytes(evil)
    elif spoil == "entry writable by others":
        entry.write_bytes(evil)
        entry.chmod(0o666)
    elif spoil == "entry a link":
        (tmp_path / "planted").write_bytes(evil)
        entry.unlink()
        entry.symlink_to(tmp_path / "planted")
    elif spoil == "entry a FIFO":  # must not block the pool's start
        entry.unlink()
        os.mkfifo(entry, 0o600)
    elif spoil == "entry cut":
        entry.write_bytes(entry.read_bytes()[:-5])
    elif spoil == "entry with a bit flipped":  # still unmarshals: only the digest tells
        raw = entry.read_bytes()
        assert raw.count((42).to_bytes(4, "little")) == 1  # the constant 42 (41 + 1 folded)
        entry.write_bytes(raw.replace((42).to_bytes(4, "little"), (43).to_bytes(4, "little")))
    elif spoil == "entry with bytes after it":
        entry.write_bytes(entry.read_bytes() + b"\0" * 64)
    elif spoil == "entry of another file":  # whole, but not this file's code
        entry.write_bytes(_entry(_bytecode.compiled("_x.py", SOURCE, "/opt/codegym/_x.py")))
    else:
        entry.write_bytes(evil)
        os.chown(entry, 1000, 1000)
    made = _compiles(monkeypatch)
    assert _bytecode.compiled("_m.py", SOURCE, NAME) == good
    assert made == [NAME]


@root_only
def test_no_cache_under_a_folder_others_can_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """/tmp is sticky, but another user can mount FUSE there and claim any owner."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    made = _compiles(monkeypatch)
    _bytecode.compiled("_m.py", SOURCE, NAME)
    _bytecode.compiled("_m.py", SOURCE, NAME)
    assert made == [NAME, NAME] and not (tmp_path / "xdg").exists()


def test_as_another_user_nothing_is_cached(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Not root: a ``process``-tier program runs as this very uid and could write it."""
    monkeypatch.setattr(_bytecode.os, "geteuid", lambda: 1000)
    made = _compiles(monkeypatch)
    _bytecode.compiled("_m.py", SOURCE, NAME)
    _bytecode.compiled("_m.py", SOURCE, NAME)
    assert made == [NAME, NAME] and not cache.parent.parent.exists()


def test_no_home_means_compiled_every_time(monkeypatch: pytest.MonkeyPatch) -> None:
    for xdg, home in (("relative/not/a/home", "relative"), ("", "/")):
        monkeypatch.setenv("XDG_CACHE_HOME", xdg)
        monkeypatch.setenv("HOME", home)
        assert _bytecode.cache_folder() is None or _bytecode.cache_folder() == Path(
            "/.cache/codegym/zygote-bytecode"
        )
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/not/a/home")
    monkeypatch.setenv("HOME", "relative")
    assert _bytecode.cache_folder() is None
    made = _compiles(monkeypatch)
    _bytecode.compiled("_m.py", SOURCE, NAME)
    assert made == [NAME]
