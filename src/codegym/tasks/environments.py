"""The environments tasks run in: pinned images whose packages a suite's tests need.

A task names one in its record's ``image`` field: the name of a spec codegym ships
(``numpy``, in ``codegym/tasks/images``), or the path of an image spec (``codegym
image build``'s TOML; relative to the dataset file). The program and its tests then run in
a fresh copy-on-write workspace of that image (jail tier), so ``import numpy`` works in
both; without one they run on the sandbox's own Python, which has the standard library
only.

What decides a verdict is the environment's content, not where its spec lies: a task's
digest covers the bytes of the spec and of its lock (``spec_key``), so results scored in
another environment are never reused, and moving a dataset does not invalidate them.

Images are built from hash-pinned wheels by the set-up (``scripts/setup.sh`` builds the
shipped ones) or by ``prepare`` before a run; a run on a host where one can be neither
found nor built stops before its first sample, naming the spec.
"""

from __future__ import annotations

import asyncio
import hashlib
import weakref
from collections.abc import Iterable
from functools import cache
from pathlib import Path
from typing import Any

from codegym.errors import CodegymError

SHIPPED = Path(__file__).resolve().parent / "images"
"""The specs codegym ships, by name (``numpy.toml``: the ``numpy`` environment)."""


class TaskEnvironmentError(CodegymError, ValueError):
    """A task names an environment that is not there, or scores where none can run; the
    message names it and the fix."""


class EnvironmentUnavailable(CodegymError):
    """An environment's image could not be built here (no network for its wheels, a full
    disk, a bad lock): the fault is the host's, so samples scored in it are ``infra``."""


def shipped() -> list[str]:
    return sorted(p.stem for p in SHIPPED.glob("*.toml"))


def resolve(ref: str, base: Path | None = None) -> str:
    """``ref`` as a task keeps it: a shipped name as it is, a spec path made absolute
    (relative to ``base``, the dataset file's folder).

    Raises:
        TaskEnvironmentError: neither a shipped name nor a spec file that exists.
    """
    if not isinstance(ref, str) or not ref.strip():
        raise TaskEnvironmentError(
            f"image {ref!r}: name a shipped environment ({', '.join(shipped())}) "
            "or the path of an image spec (TOML)"
        )
    if (SHIPPED / f"{ref}.toml").is_file():
        return ref
    p = Path(ref).expanduser()
    if not p.is_absolute() and base is not None:
        p = base / p
    if p.suffix == ".toml" and p.is_file():
        return str(p.resolve())
    raise TaskEnvironmentError(
        f"image {ref!r}: no such shipped environment ({', '.join(shipped())}) and no image "
        f"spec at {p}; name one of those or give the path of a spec TOML (docs/scoring.md, "
        "'Suites that need packages')"
    )


def spec_path(ref: str) -> Path:
    """The spec file of a resolved reference."""
    shipped_spec = SHIPPED / f"{ref}.toml"
    return shipped_spec if shipped_spec.is_file() else Path(ref)


@cache
def spec_key(ref: str) -> str:
    """sha256 over the spec's bytes and its lock's: what the environment is made of.

    Raises:
        TaskEnvironmentError: the spec cannot be read or is not a valid image spec.
    """
    from codegym.sandbox.images import ImageSpec, ImageSpecError

    path = spec_path(ref)
    try:
        spec = ImageSpec.load(path)
        h = hashlib.sha256(path.read_bytes())
        if spec.environment.lock:
            h.update(b"\0lock\0" + spec.resolve(spec.environment.lock).read_bytes())
    except (ImageSpecError, OSError) as e:
        raise TaskEnvironmentError(f"image {ref!r}: {e}") from None
    return h.hexdigest()


def needed(tasks: Iterable[Any]) -> list[str]:
    """The distinct environments ``tasks`` run in."""
    return sorted({t.image for t in tasks if getattr(t, "image", "")})


def store_for(tasks: Iterable[Any]) -> Any:
    """The image cache a Sandbox for ``tasks`` needs (``Sandbox(images=...)``), or None
    when none of them runs in an environment."""
    if not needed(tasks):
        return None
    from codegym.sandbox.images import ImageStore

    return ImageStore()


class Environments:
    """Images for tasks' environments, built once per spec and looked up by digest.

    Args:
        store: the ``ImageStore`` the sandbox runs workspaces from.
    """

    def __init__(self, store: Any) -> None:
        self.store = store
        self._digests: dict[str, str] = {}
        self._failed: dict[str, str] = {}  # tried once: every later sample is told at once
        self._locks: dict[str, asyncio.Lock] = {}

    def prepare(self, refs: Iterable[str], log: Any = None) -> dict[str, str]:
        """Build (or find built) each environment; its digest by reference.

        Raises:
            EnvironmentUnavailable: a spec is invalid or its image cannot be built (the
                message names the spec and why).
        """
        from codegym.sandbox.images import ImageError, build_image

        for ref in refs:
            if ref in self._digests:
                continue
            if ref in self._failed:
                raise EnvironmentUnavailable(self._failed[ref])
            try:
                image = build_image(spec_path(ref), self.store, log)
            except ImageError as e:
                self._failed[ref] = (
                    f"the environment {ref!r} the tests run in could not be built: {e}"
                )
                raise EnvironmentUnavailable(self._failed[ref]) from None
            self._digests[ref] = image.digest
        return dict(self._digests)

    async def digest(self, ref: str) -> str:
        """The image of ``ref``, built in a thread the first time it is asked for."""
        known = self._digests.get(ref)
        if known is not None:
            return known
        lock = self._locks.setdefault(ref, asyncio.Lock())
        async with lock:
            if ref not in self._digests:
                await asyncio.to_thread(self.prepare, [ref])
        return self._digests[ref]


def of(sandbox: Any) -> Environments:
    """The sandbox's ``Environments`` (made on first use from its image store).

    Raises:
        TaskEnvironmentError: the sandbox runs no images (not a local jail pool with ``images=``).
    """
    envs = _BY_SANDBOX.get(sandbox)
    if envs is not None:
        return envs
    store = getattr(sandbox, "images", None)
    if store is None:
        raise TaskEnvironmentError(
            "these tasks run in an image (their 'image' field): score them on a local "
            "jail-tier Sandbox opened with images=ImageStore() (the CLI does this for you); "
            "the process tier and the sandbox service run no images"
        )
    envs = _BY_SANDBOX[sandbox] = Environments(store)
    return envs


_BY_SANDBOX: weakref.WeakKeyDictionary[Any, Environments] = weakref.WeakKeyDictionary()
