"""Adopting image layers another uid owns (as root), before a workspace mounts them.

Overlayfs in a jail's user namespace shows a layer of any owner but the one uid the jail
maps (``layers.layer_owner``) as ``nobody``'s, and a program that writes one of its files
gets ``EACCES``: scored as the program's error, though the cache is at fault (built under
another ``CODEGYM_SANDBOX_UID``, or under the default before 2026-12-06).

The old owner is a uid programs ran as, so its tree is never changed in place (two
reviews' probes made an in-place ``chown`` walk give away a host file through a hard link,
hang on a FIFO, overflow the stack, and fail a live pool's runs midway). Instead, every
foreign layer is copied into a folder of root's alone, given the owner and checked against
its digest; then, with span registrations held off (``_uids.spans_held``) and no live
process of the old owner's span left, the copies are swapped in. Refused, with the fix:
a cache another user could write (it could swap root's work folder), an owner that is an
account or a live process's, a read-only cache, a layer that no longer matches its digest
or cannot be copied.
"""

from __future__ import annotations

import errno
import logging
import os
import pwd
import stat
import time
from pathlib import Path
from typing import TYPE_CHECKING

from codegym.sandbox import _uids
from codegym.sandbox.errors import SandboxInputError
from codegym.sandbox.images import layers as _layers
from codegym.sandbox.images.errors import ImageOwnerError

if TYPE_CHECKING:
    from codegym.sandbox.images.store import Image, ImageStore

log = logging.getLogger("codegym.sandbox")

RESERVE = 1 << 30
"""Free bytes an adoption leaves on the cache's file system (or 5% of it, if less)."""
RESERVE_INODES = 100_000
"""Free inodes an adoption leaves (or 5% of them, if less)."""
RETRY_S = 600.0
"""How long a copy that failed for want of room (or any other error of the moment) is not
tried again: each try may copy up to the free space."""
_failed: dict[tuple[str, str, int], tuple[str, float]] = {}  # (cache, image, owner) -> why, until


def adopt(store: ImageStore, image: Image) -> None:
    """Make every layer of ``image`` the uid's that workspace workers run as.

    Raises:
        ImageOwnerError: see the module docstring.
        SandboxInputError: this process's own span cannot be used (``uid_problem``).
    """
    uid = _layers.layer_owner()
    foreign = _foreign(store, image, uid)
    if not foreign:
        return
    if os.geteuid() != 0:
        raise ImageOwnerError(
            f"image {image.digest}: its layers in {store.layers_dir} belong to another "
            f"user, not to you (uid {uid}), and a workspace's program could not change "
            "their files; use an image cache of your own (CODEGYM_IMAGE_CACHE) and build "
            "the image there"
        )
    if problem := _uids.uid_problem():
        raise SandboxInputError(problem)
    _uids.register_span()  # the owner the layers get is this live span's
    _root_s_alone(store, image)
    if not all(
        os.access(d, os.W_OK) for d in (store.layers_dir, store.root / "tmp", store.root / "locks")
    ):
        owner = _foreign(store, image, uid)[0][2]
        raise ImageOwnerError(
            f"image {image.digest}: its layers in {store.layers_dir} belong to uid {owner}, "
            f"not to this pool's layer owner {uid}, and the cache is read-only, so they "
            f"cannot be adopted; use a cache of this pool's own{_hint(owner)}"
        )
    with store.lock("owner"):
        foreign = _foreign(store, image, uid)
        for _, _, owner in foreign:
            _refuse(store, image, owner, uid)
        work = store.scratch("adopt")
        os.chmod(work, 0o700)
        try:
            copies = [
                _copy(store, image, d, p, owner, uid, work / str(i))
                for i, (d, p, owner) in enumerate(foreign)
            ]
            with _uids.spans_held() as folder:
                for _, _, owner in foreign:
                    _refuse(store, image, owner, uid, held=folder)
                for copy, (d, p, owner) in zip(copies, foreign, strict=True):
                    try:
                        exchange(copy, p)  # the old tree is now at ``copy``
                    except OSError as e:
                        raise _cannot(
                            store, image, d, owner, f"swapped in ({e.strerror})"
                        ) from None
                    log.info("image layer %s adopted from uid %d by %d", p.name, owner, uid)
        finally:
            _layers.remove_tree(work)


def _foreign(store: ImageStore, image: Image, uid: int) -> list[tuple[str, Path, int]]:
    """(digest, path, owner) of every layer of ``image`` another uid than ``uid`` owns."""
    out = []
    for d, p in zip(image.layers, store.layer_paths(image), strict=True):
        owner = os.lstat(p).st_uid
        if owner != uid:
            out.append((d, p, owner))
    return out


def _root_s_alone(store: ImageStore, image: Image) -> None:
    """Refuse a cache whose folders (or the folders above it) another user could change:
    it could swap root's work folder for its own mid-copy (found by review)."""
    here = store.root
    inner = [store.layers_dir, *(store.root / d for d in ("tmp", "locks", "images"))]
    checks = [*inner, here, *here.parents]
    for folder in checks:
        st = os.lstat(folder)
        sticky = st.st_mode & stat.S_ISVTX and folder not in (*inner, here)
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != 0 or (st.st_mode & 0o022 and not sticky):
            raise ImageOwnerError(
                f"image {image.digest}: its layers belong to another uid than this pool's "
                f"layer owner ({_layers.layer_owner()}), and {folder} is not root's alone "
                f"(owner {st.st_uid}, mode {stat.S_IMODE(st.st_mode):o}), so root will not "
                "adopt them there; use the CODEGYM_SANDBOX_UID the cache was built with, "
                "or a cache of root's own (CODEGYM_IMAGE_CACHE)"
            )


def _refuse(store: ImageStore, image: Image, owner: int, uid: int, held: int | None = None) -> None:
    """Raise unless the layers of ``owner`` may be taken from it: no account has that uid,
    and no live process runs as a uid of its span (registered, or an older codegym's)."""
    why, until = _failed.get((str(store.root), image.digest, owner), ("", 0.0))
    if time.monotonic() < until:
        raise ImageOwnerError(why)
    base = owner - _uids.UID_SPAN if owner - _uids.UID_SPAN >= 1000 else owner
    mine = _uids.sandbox_uid()
    if mine <= owner < mine + _uids.UIDS_NEEDED:
        whose = f"one of this pool's own uids (CODEGYM_SANDBOX_UID={mine})"
    elif (account := _account(owner)) is not None:
        whose = f"the account {account!r}"
    elif (live := _uids.live_span_of(owner, held=held)) is not None:
        whose = f"a uid of a live process's span (CODEGYM_SANDBOX_UID={live})"
    elif (seen := _uids.running_as(base, base + _uids.UIDS_NEEDED, _is_account)) is not None:
        pid, comm, as_uid = seen
        whose = (
            f"in the span of a live process ({pid}, {comm!r}, uid {as_uid}, an account of "
            "no one's: an older codegym's worker?)"
        )
    else:
        return
    raise ImageOwnerError(
        f"image {image.digest}: its layers in {store.layers_dir} belong to uid {owner}, "
        f"{whose}, not to this pool's layer owner {uid}; pools with different "
        f"CODEGYM_SANDBOX_UIDs, and different users, need image caches of their own "
        f"(CODEGYM_IMAGE_CACHE){_hint(owner)}"
    )


def _is_account(uid: int) -> bool:
    return _account(uid) is not None


def _account(uid: int) -> str | None:
    taken = _uids._local_account(uid, uid + 1)
    if taken is not None:
        return taken[1]
    try:
        return pwd.getpwuid(uid).pw_name  # one NSS lookup: directory and systemd users
    except KeyError:
        return None


def _hint(owner: int) -> str:
    base = owner - _uids.UID_SPAN
    return f", or the span it was built with (CODEGYM_SANDBOX_UID={base}?)" if base >= 1000 else ""


def _copy(
    store: ImageStore, image: Image, digest_: str, path: Path, owner: int, uid: int, copy: Path
) -> Path:
    """A checked copy of the layer at ``path``, owned by ``uid``."""
    try:
        copy_tree(path, copy)
        _layers.normalise(copy, uid)
    except OSError as e:
        raise _cannot(store, image, digest_, owner, f"copied ({e.strerror})", keep=False) from None
    if _layers.digest(copy) != digest_:
        raise _cannot(store, image, digest_, owner, "adopted: it no longer matches its digest")
    return copy


def _cannot(
    store: ImageStore, image: Image, digest_: str, owner: int, what: str, keep: bool = True
) -> ImageOwnerError:
    """The error for a layer that cannot be adopted, kept so later runs fail at once: for
    good where the cause lasts (``keep``: a changed layer, a file system that cannot swap
    folders), else for ``RETRY_S``."""
    why = (
        f"image {image.digest}: layer {digest_} (owner uid {owner}) could not be {what}; "
        "remove the image (`codegym image rm`, then `codegym image gc`) and build it again, "
        f"or use a cache of this pool's own (CODEGYM_IMAGE_CACHE){_hint(owner)}"
    )
    until = float("inf") if keep else time.monotonic() + RETRY_S
    _failed[str(store.root), image.digest, owner] = (why, until)
    return ImageOwnerError(why)


def exchange(a: Path, b: Path) -> None:
    """Swap the folders at ``a`` and ``b`` in one step (``renameat2(RENAME_EXCHANGE)``), so
    a reader of either path never finds it missing."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    at_fdcwd, rename_exchange = -100, 2
    if libc.renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange):
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def copy_tree(src: Path, dst: Path) -> None:
    """Copy the layer ``src`` to the new folder ``dst`` (in a folder of root's alone):
    folders, regular files (holes kept, hard links kept as links, each at most the size it
    had when opened), symlinks as links, whiteouts and opaque marks; nothing else.

    ``src`` may belong to a uid programs ran as and change while it is read: its folders
    are entered and its files opened only through descriptors, never following a link and
    never blocking (a FIFO put in a file's place is not waited on), and the walk is a loop,
    so no depth exhausts the stack. The copy leaves its file system a reserve of space and
    inodes, and stops where its digest would read far more than it holds (``_Budget``).
    What the copy holds is checked by its digest afterwards.
    """
    into = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    read = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    budget = _Budget(dst.parent)
    budget.entry()
    os.mkdir(dst, 0o700)
    linked: dict[tuple[int, int], Path] = {}
    stack = [(os.open(src, into), dst)]
    try:
        while stack:
            fd, out = stack.pop()
            try:
                if _opaque(fd):
                    os.setxattr(out, _layers.OPAQUE, b"y")
                with os.scandir(fd) as it:
                    names = [e.name for e in it]
                for name in names:
                    st = os.stat(name, dir_fd=fd, follow_symlinks=False)
                    to = out / name
                    if stat.S_ISDIR(st.st_mode):
                        budget.entry()
                        os.mkdir(to, 0o700)
                        stack.append((os.open(name, into, dir_fd=fd), to))
                    elif stat.S_ISREG(st.st_mode):
                        _copy_file(os.open(name, read, dir_fd=fd), to, budget, linked)
                    elif stat.S_ISLNK(st.st_mode):
                        target = os.readlink(name, dir_fd=fd)
                        budget.entry(len(os.fsencode(target)))
                        os.symlink(target, to)
                    elif _layers.is_whiteout(st):
                        budget.entry()
                        os.mknod(to, stat.S_IFCHR, os.makedev(0, 0))
            finally:
                os.close(fd)
    finally:
        for fd, _ in stack:
            os.close(fd)


class _Budget:
    """What a copy may take of its file system, and what its digest will read.

    Room: the free space less ``RESERVE`` (or 5% of the file system), each entry charged
    at least a block (a review's 11,000 empty folders took a file system to 0 bytes free
    when only file data counted), and the free inodes less ``RESERVE_INODES`` (or 5%).
    Reading: a sparse file or one linked many times makes the digest read far more than
    the copy holds (hours of hashing for a review's probe); a layer as built has neither,
    so a copy whose files' sizes pass twice the bytes written plus 16 MiB is refused.
    """

    def __init__(self, folder: Path) -> None:
        fs = os.statvfs(folder)
        self.block = fs.f_frsize or 4096
        self.room = fs.f_bavail * fs.f_frsize - min(RESERVE, fs.f_blocks * fs.f_frsize // 20)
        # a file system that reports no inode count (btrfs) has no such limit
        self.inodes = fs.f_favail - min(RESERVE_INODES, fs.f_files // 20) if fs.f_files else 1 << 62
        self.read = self.written = 0

    def entry(self, size: int = 0) -> None:
        """Charge one entry (an inode) of ``size`` bytes (at least a block)."""
        self.take(max(self.block, -(-size // self.block) * self.block))
        self.inodes -= 1
        if self.inodes < 0:
            raise OSError(errno.ENOSPC, "the copy would leave too few inodes free")

    def take(self, n: int) -> None:
        self.room -= n
        if self.room < 0:
            raise OSError(errno.ENOSPC, "the copy would leave the disk too full")

    def file(self, size: int, written: int) -> None:
        """A file whose digest reads ``size`` bytes, of which the copy wrote ``written``."""
        self.read += size
        self.written += written
        if self.read > 2 * self.written + (16 << 20):
            raise OSError(errno.EFBIG, "sparse or many-times-linked files")


def _opaque(fd: int) -> bool:
    try:
        return os.getxattr(fd, _layers.OPAQUE) == b"y"
    except OSError:
        return False


def _copy_file(fd: int, to: Path, budget: _Budget, linked: dict[tuple[int, int], Path]) -> None:
    """Copy the open file ``fd`` (closed here) to the new file ``to``."""
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return  # swapped for something else since it was listed
        if st.st_nlink > 1 and (st.st_dev, st.st_ino) in linked:
            os.link(linked[st.st_dev, st.st_ino], to)
            budget.file(st.st_size, 0)
            return
        budget.entry()
        written = 0
        out = os.open(to, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        try:
            os.ftruncate(out, st.st_size)
            pos = 0
            while pos < st.st_size:
                try:
                    start = os.lseek(fd, pos, os.SEEK_DATA)
                except OSError as e:
                    if e.errno == errno.ENXIO:
                        break  # only a hole from here
                    raise
                end = min(os.lseek(fd, start, os.SEEK_HOLE), st.st_size)
                while start < end:
                    chunk = os.pread(fd, min(1 << 20, end - start), start)
                    if not chunk:
                        end = start  # it shrank meanwhile: the digest will say
                        break
                    if written + len(chunk) > budget.block:  # the entry's first block is paid
                        budget.take(len(chunk))
                    written += len(chunk)
                    os.pwrite(out, chunk, start)
                    start += len(chunk)
                pos = max(end, pos + 1)
        finally:
            os.close(out)
        os.chmod(to, 0o755 if st.st_mode & 0o111 else 0o644)
        budget.file(st.st_size, written)
        if st.st_nlink > 1:
            linked[st.st_dev, st.st_ino] = to
    finally:
        os.close(fd)
