"""The image cache: layers, manifests and names in one folder.

::

    CACHE/layers/<hex>/        read-only trees, named by digest (see layers.py)
    CACHE/images/<hex>.json    manifests: the layers bottom to top, the Python, the spec
    CACHE/builds/<hex>         build key -> image digest (a rebuild of the same inputs)
    CACHE/names/<name>         the latest image built under a spec's name
    CACHE/downloads/           archives fetched at build time, by sha256
    CACHE/tmp/                 builds in progress; never visible as images

Everything becomes visible by a rename, so a reader never sees half of anything. The
cache defaults to ``$CODEGYM_IMAGE_CACHE`` or ``~/.cache/codegym/images``.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from codegym.sandbox.images import layers as _layers
from codegym.sandbox.images.errors import ImageNotFound

ROOT = "/work"
"""Where a workspace is mounted: the source's root, and the working directory."""
VENV = f"{ROOT}/.venv"
"""The image's Python environment (a virtual environment built at this path)."""
DEBIAN = f"{ROOT}/.debian"
"""Debian packages' files, unpacked under this folder."""
MAX_LAYERS = 32
_HEX = re.compile(r"^(?:sha256:)?([0-9a-f]{6,64})$")


@dataclass(frozen=True)
class Image:
    """A built image: its reference and what a workspace of it stacks."""

    digest: str
    name: str
    python: str
    layers: tuple[str, ...]
    """Layer digests, bottom to top."""
    env: dict[str, str] = field(default_factory=dict)
    parent: str | None = None
    """The image this one was frozen from, if any."""
    created: float = 0.0
    spec: dict[str, Any] = field(default_factory=dict)
    built: int | None = None
    """How many bottom layers an image build made (None: all of them); see built_layers."""

    @property
    def ref(self) -> str:
        return self.digest

    @property
    def built_layers(self) -> int:
        """How many of the bottom layers an image build made. The layers above them are
        frozen workspace states, files programs wrote, which trusted code (an assert
        test's judge) must never import or run. A frozen image from a store written before
        this was recorded counts none as built."""
        if self.built is not None:
            return self.built
        return 0 if self.parent is not None else len(self.layers)

    def manifest(self) -> dict[str, Any]:
        return {
            "digest": self.digest,
            "name": self.name,
            "python": self.python,
            "layers": list(self.layers),
            "env": self.env,
            "parent": self.parent,
            "created": self.created,
            "spec": self.spec,
            **({"built": self.built} if self.built is not None else {}),
        }


def image_digest(python: str, layers: list[str] | tuple[str, ...], env: dict[str, str]) -> str:
    """An image's digest: what its workspaces are made of, nothing about when or where."""
    body = json.dumps(
        {"kind": "codegym-image/1", "python": python, "layers": list(layers), "env": env},
        sort_keys=True,
    )
    return "sha256:" + hashlib.sha256(body.encode()).hexdigest()


def default_cache() -> Path:
    """``$CODEGYM_IMAGE_CACHE``, else ``~/.cache/codegym/images`` (``/var/cache/codegym/
    images`` as root: the workers' uid must walk to it, and root's home is closed)."""
    env = os.environ.get("CODEGYM_IMAGE_CACHE")
    if env:
        return Path(env)
    if os.geteuid() == 0:
        return Path("/var/cache/codegym/images")
    return Path.home() / ".cache" / "codegym" / "images"


class ImageStore:
    """The image cache folder (see the module docstring)."""

    def __init__(self, root: str | os.PathLike[str] | None = None) -> None:
        self.root = Path(root) if root is not None else default_cache()
        self.root = self.root.expanduser().resolve()
        for sub in (
            "layers",
            "images",
            "builds",
            "names",
            "downloads",
            "tmp",
            "locks",
            "pip-cache",
        ):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(OSError):
            os.chmod(self.layers_dir, 0o755)

    def check_reachable(self) -> None:
        """Raise unless the workers' uid (``layer_owner``) can walk to the layers.

        Raises:
            SandboxInputError: a folder on the way is closed to that uid; says which.
        """
        from codegym.sandbox.errors import SandboxInputError

        uid = _layers.layer_owner()
        if os.geteuid() != 0 or uid == os.geteuid():
            return
        for folder in [*reversed(self.layers_dir.parents), self.layers_dir]:
            st = folder.stat()
            if not (st.st_mode & 0o001 or (st.st_uid == uid and st.st_mode & 0o100)):
                raise SandboxInputError(
                    f"the image cache {self.root} is under {folder}, which the sandbox uid "
                    f"{uid} cannot enter: put the cache elsewhere (CODEGYM_IMAGE_CACHE, "
                    f"e.g. /var/cache/codegym/images) or `chmod o+x {folder}`"
                )

    @property
    def layers_dir(self) -> Path:
        return self.root / "layers"

    # -- reading ---------------------------------------------------------------

    def images(self) -> list[Image]:
        out = []
        for p in sorted((self.root / "images").glob("*.json")):
            with contextlib.suppress(OSError, ValueError, TypeError):
                out.append(_from_manifest(json.loads(p.read_text())))
        return sorted(out, key=lambda i: i.created)

    def get(self, ref: str) -> Image:
        """The image a reference names: a digest (``sha256:…`` or a unique prefix of at
        least 6 hex digits) or a name (the latest build under it).

        Raises:
            ImageNotFound: nothing matches, or a prefix matches more than one image.
        """
        if not isinstance(ref, str) or not ref:
            raise ImageNotFound(f"image reference {ref!r}: give a digest or a name")
        m = _HEX.match(ref)
        if m:
            hexes = [p.stem for p in (self.root / "images").glob(f"{m.group(1)}*.json")]
            if len(hexes) == 1:
                return self._load(hexes[0])
            if len(hexes) > 1:
                raise ImageNotFound(f"image reference {ref!r} is ambiguous; give more digits")
        named = self.root / "names" / ref
        if re.fullmatch(r"[a-z0-9][a-z0-9._-]{0,63}", ref) and named.is_file():
            return self._load(named.read_text().strip().removeprefix("sha256:"))
        known = ", ".join(sorted({i.name for i in self.images()})) or "none built yet"
        raise ImageNotFound(
            f"no image {ref!r} in {self.root} (names: {known}); "
            "build one with `codegym image build SPEC` or list them with `codegym image ls`"
        )

    def _load(self, hex_: str) -> Image:
        try:
            return _from_manifest(json.loads((self.root / "images" / f"{hex_}.json").read_text()))
        except (OSError, ValueError) as e:
            raise ImageNotFound(f"image sha256:{hex_} cannot be read: {e}") from None

    def layer_paths(self, image: Image) -> list[Path]:
        paths = [_layers.layer_path(self.layers_dir, d) for d in image.layers]
        missing = [str(p) for p in paths if not p.is_dir()]
        if missing:
            raise ImageNotFound(
                f"image {image.digest} is missing layers ({', '.join(missing)}); "
                "rebuild it with `codegym image build SPEC`"
            )
        return paths

    def foreign_layers(self, image: Image) -> bool:
        """Whether a layer of ``image`` belongs to another uid than ``layer_owner()``."""
        uid = _layers.layer_owner()
        return any(os.lstat(p).st_uid != uid for p in self.layer_paths(image))

    def layer_paths_of(self, digest: str) -> Path:
        return _layers.layer_path(self.layers_dir, digest)

    def size(self, image: Image) -> int:
        return sum(_layers.size_on_disk(p)[0] for p in self.layer_paths(image))

    # -- writing ---------------------------------------------------------------

    def add(self, image: Image, build_key: str | None = None, tag: bool = True) -> Image:
        """Record a manifest whose layers are in place (a rename makes it visible);
        ``tag``: the image's name now means this image."""
        self._atomic_write(
            self.root / "images" / f"{image.digest.removeprefix('sha256:')}.json",
            json.dumps(image.manifest(), indent=1, sort_keys=True),
        )
        if build_key:
            self._atomic_write(self.root / "builds" / build_key, image.digest)
        if tag:
            self._atomic_write(self.root / "names" / image.name, image.digest)
        return image

    def built(self, build_key: str) -> Image | None:
        p = self.root / "builds" / build_key
        if not p.is_file():
            return None
        try:
            img = self.get(p.read_text().strip())
            self.layer_paths(img)
            return img
        except ImageNotFound:
            return None

    def remove(self, ref: str) -> Image:
        """Forget an image (its layers go at the next ``gc``)."""
        img = self.get(ref)
        (self.root / "images" / f"{img.digest.removeprefix('sha256:')}.json").unlink()
        for d in ("names", "builds"):
            for p in (self.root / d).iterdir():
                with contextlib.suppress(OSError):
                    if p.read_text().strip() == img.digest:
                        p.unlink()
        return img

    def gc(self, stale_s: float = 3600.0) -> tuple[int, int]:
        """Remove layers no image uses and builds abandoned (a killed build's folders,
        older than ``stale_s`` and not locked). Returns (layers, bytes) freed."""
        used = {d.removeprefix("sha256:") for i in self.images() for d in i.layers}
        freed = count = 0
        with self.lock("gc"):
            for p in self.layers_dir.iterdir():
                if p.name not in used:
                    freed += _layers.size_on_disk(p)[0]
                    _layers.remove_tree(p)
                    count += 1
        self.sweep_tmp(stale_s)
        return count, freed

    def sweep_tmp(self, stale_s: float = 3600.0) -> int:
        """Remove build folders that no live build holds (``tmp/<pid>-…`` of dead pids)."""
        from codegym.sandbox._cgroups import pid_alive

        removed = 0
        for p in (self.root / "tmp").iterdir():
            pid = p.name.split("-", 1)[0]
            dead = pid.isdigit() and not pid_alive(int(pid))
            old = time.time() - p.lstat().st_mtime > stale_s
            if dead or (old and not pid.isdigit()):
                _layers.remove_tree(p) if p.is_dir() else p.unlink(missing_ok=True)
                removed += 1
        return removed

    def scratch(self, what: str) -> Path:
        """A fresh build folder under ``tmp/``, named for this process (see sweep_tmp)."""
        p = self.root / "tmp" / f"{os.getpid()}-{what}-{os.urandom(4).hex()}"
        p.mkdir()
        return p

    @contextlib.contextmanager
    def lock(self, key: str) -> Iterator[None]:
        """An exclusive lock on ``key`` across processes (a build, a gc)."""
        flags = os.O_CREAT | os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(self.root / "locks" / key, flags, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def _atomic_write(self, path: Path, text: str) -> None:
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(text)
        os.replace(tmp, path)


_LAYER = re.compile(r"sha256:[0-9a-f]{64}")


def _from_manifest(m: dict[str, Any]) -> Image:
    if not all(isinstance(d, str) and _LAYER.fullmatch(d) for d in m["layers"]):
        raise ValueError("a layer that is not a sha256 digest")  # (it names a folder)
    return Image(
        digest=m["digest"],
        name=m["name"],
        python=m["python"],
        layers=tuple(m["layers"]),
        env=dict(m.get("env") or {}),
        parent=m.get("parent"),
        created=float(m.get("created") or 0.0),
        spec=dict(m.get("spec") or {}),
        built=int(m["built"]) if m.get("built") is not None else None,
    )
