"""The zygote's bytecode, compiled once and kept where no program can write.

Compiling the zygote's ~3,500 lines takes 50–80 ms, and every process that starts a pool
paid it (a tenth of ``codegym score``'s wait for its first run). Every worker runs what
this returns, so a cache of it is trusted code: whoever can write it forges every later
verdict. So the cache is kept only when codegym runs as root, whose sandboxed programs
run as other uids in every tier (``sandbox_uid`` refuses system uids; as another user, a
``process``-tier program runs as that user and could write it: a review planted code so).
It lives in ``$XDG_CACHE_HOME/codegym/zygote-bytecode`` (else ``~/.cache/...``), reached from ``/``
one folder at a time without following links, every folder on the way root's and not
writable by others (as OpenSSH's StrictModes: so not under ``/tmp``), the last ``0700``; its
files are opened through that folder's descriptor, must be root's regular files writable
by no one else, and carry a sha256 of their contents, checked before anything is
unmarshalled. Any doubt and the code is compiled here, as before.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import marshal
import os
import stat
import types
from pathlib import Path

_OPEN_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_DIGEST = 32  # a sha256 of what comes before it ends every entry
_MAX_ENTRY = 1 << 24


def compiled(name: str, source: bytes, filename: str) -> bytes:
    """``source``'s checked-hash ``.pyc`` (PEP 552; asserts kept whatever ``-O`` says):
    the cached one when it is sound, else compiled here and cached for the next process."""
    head = importlib.util.MAGIC_NUMBER + (0b11).to_bytes(4, "little")  # hash-based, checked
    head += importlib.util.source_hash(source)
    key = hashlib.sha256(head + filename.encode() + b"\0" + source).hexdigest()[:32]
    entry = f"{name.removesuffix('.py')}.{key}.pyc"
    folder = _folder()
    try:
        if folder is not None:
            data = _read(folder, entry)
            if data is not None and _sound(data, head, filename):
                return data
        code = compile(source, filename, "exec", dont_inherit=True, optimize=0)
        data = head + marshal.dumps(code)
        if folder is not None:
            _write(folder, entry, data + hashlib.sha256(data).digest())
        return data
    finally:
        if folder is not None:
            os.close(folder)


def cache_folder() -> Path | None:
    """Where the cache is (it may not exist yet); None without an absolute home."""
    with contextlib.suppress(KeyError, RuntimeError):
        base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
        if os.path.isabs(base) and os.path.normpath(base) != "/":
            return Path(os.path.normpath(base)) / "codegym" / "zygote-bytecode"
    return None


def _folder() -> int | None:
    """A descriptor of the cache folder, or None: not root, or a folder on the way that
    someone else could change. Only the cache's parent and its two folders are made (each
    ``0700``), never a home."""
    path = cache_folder()
    if path is None or os.geteuid() != 0:
        return None
    parts = path.parts[1:]
    fd = os.open("/", _OPEN_DIR)
    try:
        for depth, part in enumerate(parts):
            try:
                child = os.open(part, _OPEN_DIR, dir_fd=fd)
            except FileNotFoundError:
                if depth < len(parts) - 3:
                    raise
                with contextlib.suppress(FileExistsError):
                    os.mkdir(part, 0o700, dir_fd=fd)
                child = os.open(part, _OPEN_DIR, dir_fd=fd)
            os.close(fd)
            fd = child
            st = os.fstat(fd)
            last = depth == len(parts) - 1
            # no exception for sticky folders (/tmp): another user may mount FUSE there
            if st.st_uid != 0 or stat.S_IMODE(st.st_mode) & (0o077 if last else 0o022):
                raise PermissionError(f"{path}: {part} is not root's alone")
        return fd
    except OSError:
        os.close(fd)
        return None


def _read(folder: int, entry: str) -> bytes | None:
    """The entry's contents less their digest, when it is root's regular file, writable by
    no one else, and whole (its digest matches)."""
    with contextlib.suppress(OSError):
        # O_NONBLOCK: a FIFO there would block the open before the checks
        fd = os.open(
            entry, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, dir_fd=folder
        )
        with open(fd, "rb") as f:
            st = os.fstat(f.fileno())
            if not stat.S_ISREG(st.st_mode) or st.st_uid != 0 or st.st_mode & 0o022:
                return None
            if not _DIGEST < st.st_size <= _MAX_ENTRY:
                return None
            raw = f.read(st.st_size + 1)
        data, digest = raw[:-_DIGEST], raw[-_DIGEST:]
        if len(raw) == st.st_size and hashlib.sha256(data).digest() == digest:
            return data
    return None


def _sound(data: bytes, head: bytes, filename: str) -> bool:
    """The expected header and a code object of this file's name."""
    if not data.startswith(head):
        return False
    try:
        code = marshal.loads(data[len(head) :])
    except (EOFError, ValueError, TypeError, SystemError, MemoryError, RecursionError):
        return False
    return isinstance(code, types.CodeType) and code.co_filename == filename


def _write(folder: int, entry: str, data: bytes) -> None:
    """Written under a temporary name and renamed, so a reader sees all of it or none;
    older versions of the same file go (each source change makes a new entry)."""
    part = f".{entry}.{os.getpid()}.part"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    with contextlib.suppress(OSError):
        with open(os.open(part, flags, 0o600, dir_fd=folder), "wb") as f:
            f.write(data)
        os.replace(part, entry, src_dir_fd=folder, dst_dir_fd=folder)
        stem = entry.split(".", 1)[0] + "."
        for old in os.listdir(folder):
            if old.startswith(stem) and old != entry:
                os.unlink(old, dir_fd=folder)
    with contextlib.suppress(OSError):
        os.unlink(part, dir_fd=folder)
