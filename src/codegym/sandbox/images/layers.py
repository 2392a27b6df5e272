"""Layers: read-only, content-addressed directory trees that a workspace stacks.

A layer is a folder under the cache's ``layers/`` named by its digest. Before it is
published, its tree is *normalised*: one owner (the uid the workers that mount it run
as), modes 0755/0644 (0755 for anything executable), a fixed mtime. The digest covers
what a program can observe of the tree — paths, kinds, modes, contents, link targets,
overlay whiteouts and opaque folders — and never the owner or the host's paths, so the
same inputs give the same digest on any host.

Overlay metadata follows what the kernel's overlayfs writes in a user namespace (the
``userxattr`` mount option): a whiteout is a character device 0/0 and an opaque folder
carries the ``user.overlay.opaque`` attribute.
"""

from __future__ import annotations

import hashlib
import os
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path

MTIME = 315532800  # 1980-01-01: the zip epoch, what reproducible builds settle on
OPAQUE = "user.overlay.opaque"


def layer_owner() -> int:
    """The host uid that owns every layer, and that workspace workers run as.

    Overlayfs mounted in a user namespace can copy a file up only when its owner is
    mapped there; a jail maps one uid, so layers and workers must share it. As root that
    is a dedicated sandbox uid outside the span ``claim_uid`` hands out; otherwise the
    caller's own uid.
    """
    if os.geteuid() != 0:
        return os.geteuid()
    from codegym.sandbox._uids import UID_SPAN, sandbox_uid

    return sandbox_uid() + UID_SPAN


def is_whiteout(st: os.stat_result) -> bool:
    return stat.S_ISCHR(st.st_mode) and st.st_rdev == 0


def is_opaque(path: str | Path) -> bool:
    try:
        return os.getxattr(path, OPAQUE, follow_symlinks=False) == b"y"
    except OSError:
        return False


def walk(root: Path) -> Iterator[tuple[str, os.stat_result]]:
    """Every entry under ``root`` (relative path, lstat), a folder before what it holds,
    in an order that depends only on the tree; symlinks are never followed."""
    stack = [""]
    while stack:
        rel = stack.pop()
        base = root / rel if rel else root
        with os.scandir(base) as it:
            names = sorted(e.name for e in it)
        for name in names:
            sub = f"{rel}/{name}" if rel else name
            st = os.lstat(root / sub)
            yield sub, st
            if stat.S_ISDIR(st.st_mode):
                stack.append(sub)
        stack.sort(reverse=True)


def normalise(root: Path, owner: int | None = None) -> None:
    """Give the tree at ``root`` one owner, canonical modes and a fixed mtime.

    Anything that is not a folder, a regular file, a symlink or a whiteout (a fifo, a
    socket, a device) is removed: none belongs in an image.
    """
    uid = layer_owner() if owner is None else owner
    for rel, st in list(walk(root)):
        p = root / rel
        mode = st.st_mode
        if stat.S_ISDIR(mode):
            os.chmod(p, 0o755)
        elif stat.S_ISREG(mode):
            os.chmod(p, 0o755 if mode & 0o111 else 0o644)
        elif not (stat.S_ISLNK(mode) or is_whiteout(st)):
            os.unlink(p)
            continue
        if os.geteuid() == 0:
            os.lchown(p, uid, uid)
        os.utime(p, (MTIME, MTIME), follow_symlinks=False)
    os.chmod(root, 0o755)
    if os.geteuid() == 0:
        os.chown(root, uid, uid)
    os.utime(root, (MTIME, MTIME))


def digest(root: Path) -> str:
    """The layer's content digest, ``sha256:<hex>``."""
    h = hashlib.sha256(b"codegym-layer-1\n")
    if is_opaque(root):
        h.update(b"\0opaque\n")
    for rel, st in walk(root):
        p = root / rel
        if stat.S_ISDIR(st.st_mode):
            line = f"d {oct(st.st_mode & 0o7777)}{' opaque' if is_opaque(p) else ''}"
        elif stat.S_ISREG(st.st_mode):
            line = f"f {oct(st.st_mode & 0o7777)} {file_sha256(p)}"
        elif stat.S_ISLNK(st.st_mode):
            line = f"l {os.readlink(p)}"
        elif is_whiteout(st):
            line = "w"
        else:
            line = f"? {stat.S_IFMT(st.st_mode)}"
        line_b = line.encode("utf-8", "surrogateescape")  # link targets need not be UTF-8
        h.update(rel.encode("utf-8", "surrogateescape") + b"\0" + line_b + b"\n")
    return "sha256:" + h.hexdigest()


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb", buffering=0) as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def size_on_disk(root: Path) -> tuple[int, int]:
    """(bytes, entries) of the tree; a file's blocks are counted once per inode."""
    seen: set[int] = set()
    total = count = 0
    for _, st in walk(root):
        count += 1
        if st.st_ino not in seen:
            seen.add(st.st_ino)
            total += st.st_blocks * 512
    return total, count


def publish(tree: Path, layers_dir: Path) -> str:
    """Normalise ``tree`` (a folder beside ``layers_dir``), name it by its digest and
    move it into place in one rename; an identical layer already there wins and the
    tree is removed. Returns the digest."""
    normalise(tree)
    d = digest(tree)
    final = layers_dir / d.removeprefix("sha256:")
    try:
        os.rename(tree, final)
    except OSError:
        if not final.is_dir():
            raise
        remove_tree(tree)
    return d


def layer_path(layers_dir: Path, digest_: str) -> Path:
    return layers_dir / digest_.removeprefix("sha256:")


def remove_tree(path: Path) -> None:
    """Remove a layer or build folder, whatever modes its tree was left with and however
    deep it goes: coreutils' ``rm`` walks without recursion (Python 3.11's ``os.walk`` and
    ``shutil.rmtree`` recurse once per level, and a program can nest folders past the
    interpreter's limit), stays on the tree's file system and follows no link."""
    if not os.path.lexists(path):
        return
    if os.path.islink(path):  # (``chmod -R`` would follow it)
        os.unlink(path)
        return
    if os.geteuid() != 0:  # root needs no write permission on the folders to empty them
        subprocess.run(["chmod", "-R", "u+rwx", "--", str(path)], stderr=subprocess.DEVNULL)
    subprocess.run(["rm", "-rf", "--one-file-system", "--", str(path)], stderr=subprocess.DEVNULL)
