"""What a workspace changed: its overlay upper, as a patch or as a new layer.

A kept workspace's upper holds exactly what its runs wrote: new and modified files,
overlayfs whiteouts for deletions (a rename is a deletion and a new file: in a user
namespace overlayfs copies a renamed folder rather than redirecting it), and opaque
folders (a folder deleted and made anew). ``Changes`` carries that tree out of the worker
(``_zygote._export``); here it becomes a git-style patch against the image's layers, or a
layer of its own that a new image stacks on its parent's (``freeze``).
"""

from __future__ import annotations

import base64
import difflib
import hashlib
import os
import stat
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from codegym.sandbox.images import layers as _layers
from codegym.sandbox.images.errors import ImageBuildError

PATCH_EXCLUDES = (".venv", ".debian")
"""Top-level folders that are the image's environment, not the project: left out of patches."""


@dataclass(frozen=True)
class Changes:
    """A workspace's upper: ``entries`` are ``[path, kind, mode, extra]`` with kind ``d``
    (extra: opaque), ``f`` (extra: index into ``blobs``), ``l`` (extra: the target) or
    ``w`` (a deletion), a folder before what it holds."""

    entries: list[list[Any]]
    blobs: list[bytes]

    def paths(self) -> list[str]:
        return [e[0] for e in self.entries]


def _checked(rel: object) -> str:
    if not isinstance(rel, str) or not rel or rel.startswith("/") or "\0" in rel:
        raise ImageBuildError(f"workspace entry {rel!r} is not a relative path")
    if any(p in ("", ".", "..") for p in rel.split("/")):
        raise ImageBuildError(f"workspace entry {rel!r} is not a plain relative path")
    return rel


def write_layer(changes: Changes, tree: Path) -> None:
    """Materialise ``changes`` as a layer tree in the empty folder ``tree``.

    Every entry's parent must be a folder an earlier entry made here: nothing is written
    through a link, whatever the workspace held.
    """
    made = {""}
    for entry in changes.entries:
        rel, kind, mode, extra = _checked(entry[0]), entry[1], int(entry[2]), entry[3]
        parent = rel.rpartition("/")[0]
        if parent not in made:
            raise ImageBuildError(f"workspace entry {rel!r} comes before its folder")
        p = tree / rel
        if kind == "d":
            p.mkdir()
            made.add(rel)
            if extra:
                os.setxattr(p, _layers.OPAQUE, b"y", follow_symlinks=False)
        elif kind == "f":
            fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
            try:
                os.write(fd, changes.blobs[int(extra)])
            finally:
                os.close(fd)
            os.chmod(p, 0o755 if mode & 0o111 else 0o644)
        elif kind == "l":
            os.symlink(str(extra), p)
        elif kind == "w":
            os.mknod(p, stat.S_IFCHR | 0o600, 0)
        else:
            raise ImageBuildError(f"workspace entry {rel!r} has unknown kind {kind!r}")


class LowerView:
    """The merged, read-only view of an image's layers (top layer first), as the kernel's
    overlayfs shows it: whiteouts hide, opaque folders stop the search downwards."""

    def __init__(self, layers_top_first: list[Path]) -> None:
        self.layers = layers_top_first

    def lookup(self, rel: str) -> os.stat_result | None:
        parts = rel.split("/")
        for layer in self.layers:
            blocked = False
            found_all = True
            for i in range(1, len(parts)):
                anc = layer.joinpath(*parts[:i])
                try:
                    st = os.lstat(anc)
                except FileNotFoundError:
                    found_all = False
                    break
                if not stat.S_ISDIR(st.st_mode):
                    return None  # a whiteout or a file where the path needs a folder
                blocked = blocked or _layers.is_opaque(anc)
            if found_all:
                try:
                    here = os.lstat(layer / rel)
                except FileNotFoundError:
                    pass
                else:
                    return None if _layers.is_whiteout(here) else here
            if blocked:
                return None
        return None

    def path(self, rel: str) -> Path | None:
        for layer in self.layers:
            p = layer / rel
            if os.path.lexists(p):
                return p
        return None

    def read(self, rel: str) -> bytes:
        p = self.path(rel)
        assert p is not None
        return p.read_bytes()

    def files_under(self, rel: str) -> list[str]:
        """Every non-folder path below ``rel`` in the merged view."""
        names: set[str] = set()
        for layer in self.layers:
            d = layer / rel
            if d.is_dir() and not d.is_symlink():
                names.update(os.listdir(d))
                if _layers.is_opaque(d):
                    break
        out = []
        for name in sorted(names):
            sub = f"{rel}/{name}"
            st = self.lookup(sub)
            if st is None:
                continue
            out.extend(self.files_under(sub) if stat.S_ISDIR(st.st_mode) else [sub])
        return out


def patch(changes: Changes, lower: LowerView, excludes: tuple[str, ...] = PATCH_EXCLUDES) -> str:
    """A git-style patch that turns the image's tree into the workspace's (``git apply``
    in the source root; ``patch -p1`` takes it too when it holds no binary files).
    Bytecode (``__pycache__``) and the environment folders are left out."""
    new: dict[str, tuple[int, bytes]] = {}
    gone: set[str] = set()  # paths of the image's tree the workspace no longer has
    for rel, kind, mode, extra in changes.entries:
        if rel.split("/")[0] in excludes:
            continue
        old = lower.lookup(rel)
        was_dir = old is not None and stat.S_ISDIR(old.st_mode)
        if was_dir and (kind != "d" or extra):  # replaced, deleted, or emptied (opaque)
            gone.update(lower.files_under(rel))
        elif old is not None and not was_dir and kind in ("d", "w"):
            gone.add(rel)
        if kind == "f":
            new[rel] = (0o100755 if int(mode) & 0o111 else 0o100644, changes.blobs[int(extra)])
        elif kind == "l":
            new[rel] = (0o120000, str(extra).encode("utf-8", "surrogateescape"))
    out = []
    for rel in sorted(gone | set(new)):
        if "__pycache__" in rel.split("/"):
            continue  # bytecode (the image's own, compiled at build time) is not the source
        before, after = _old(lower, rel), new.get(rel)
        if before and after and (before[0] == 0o120000) != (after[0] == 0o120000):
            # a file became a link or the other way: git writes a deletion and a new file
            out += [file_patch(rel, before, None), file_patch(rel, None, after)]
        else:
            out.append(file_patch(rel, before, after))
    return "".join(out)


def _old(lower: LowerView, rel: str) -> tuple[int, bytes] | None:
    st = lower.lookup(rel)
    if st is None or stat.S_ISDIR(st.st_mode):
        return None
    if stat.S_ISLNK(st.st_mode):
        p = lower.path(rel)
        assert p is not None
        return 0o120000, os.readlink(p).encode("utf-8", "surrogateescape")
    return (0o100755 if st.st_mode & 0o111 else 0o100644), lower.read(rel)


def _text(data: bytes) -> list[str] | None:
    if b"\0" in data:
        return None
    try:
        return data.decode("utf-8").splitlines(keepends=True)
    except UnicodeDecodeError:
        return None


_ESCAPES = {7: "a", 8: "b", 9: "t", 10: "n", 11: "v", 12: "f", 13: "r", 34: '"', 92: "\\"}


def _quoted(prefix: str, rel: str) -> str:
    """A path as git writes it in a patch: C-quoted when it holds a control character, a
    quote, a backslash or a non-ASCII byte (so a name cannot inject patch lines)."""
    raw = (prefix + rel).encode("utf-8", "surrogateescape")
    if all(32 <= b < 127 and b not in (34, 92) for b in raw):
        return raw.decode()
    out = []
    for b in raw:
        if b in _ESCAPES:
            out.append("\\" + _ESCAPES[b])
        elif 32 <= b < 127:
            out.append(chr(b))
        else:
            out.append(f"\\{b:03o}")
    return '"' + "".join(out) + '"'


def _blob_id(data: bytes | None) -> str:
    if data is None:
        return "0" * 40
    return hashlib.sha1(b"blob %d\0" % len(data) + data, usedforsecurity=False).hexdigest()


def _binary(data: bytes) -> list[str]:
    """One side of a git binary patch: the data, zlib-deflated, base85 in 52-byte lines."""
    packed = zlib.compress(data, 9)
    lines = [f"literal {len(data)}\n"]
    for i in range(0, len(packed), 52):
        chunk = packed[i : i + 52]
        n = len(chunk)
        mark = chr(ord("A") + n - 1) if n <= 26 else chr(ord("a") + n - 27)
        lines.append(mark + base64.b85encode(chunk, pad=True).decode() + "\n")
    return [*lines, "\n"]


def file_patch(rel: str, before: tuple[int, bytes] | None, after: tuple[int, bytes] | None) -> str:
    """One file's part of a git patch: ``before`` and ``after`` are (git mode, content),
    None for a file that does not exist on that side."""
    if before is None and after is None:
        return ""
    if before is not None and before == after:
        return ""
    head = [f"diff --git {_quoted('a/', rel)} {_quoted('b/', rel)}\n"]
    if before is None:
        assert after is not None
        head.append(f"new file mode {after[0]:o}\n")
    elif after is None:
        head.append(f"deleted file mode {before[0]:o}\n")
    elif before[0] != after[0]:
        head += [f"old mode {before[0]:o}\n", f"new mode {after[0]:o}\n"]
        if before[1] == after[1]:
            return "".join(head)
    a = _text(before[1]) if before else []
    b = _text(after[1]) if after else []
    if a is None or b is None:
        # git's own binary form, with the full index line `git apply` asks for
        old, new = (before[1] if before else None), (after[1] if after else None)
        head.append(f"index {_blob_id(old)}..{_blob_id(new)}\n")
        body = ["GIT binary patch\n", *_binary(new or b""), *_binary(old or b"")]
        return "".join(head + body)
    src = _quoted("a/", rel) if before else "/dev/null"
    dst = _quoted("b/", rel) if after else "/dev/null"
    body = [f"--- {src}\n", f"+++ {dst}\n"]
    for line in list(difflib.unified_diff(a, b, n=3))[2:]:
        body.append(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n")
    return "".join(head + body)
