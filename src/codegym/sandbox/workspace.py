"""Kept workspaces: a copy-on-write view of an image whose files outlive each run.

A ``Workspace`` lives in one worker's zygote as a tmpfs upper (size and inodes capped) of
its own; each run in it is a fresh E that mounts the image's layers under that upper
(``_zygote._mount_workspace``), so its processes end with the run while its files stay.
Many workspaces share a worker: opening one is a mkdir and a mount, not a new jail,
which is what makes forking a prepared state into a GRPO group cheap. Runs in one
workspace are serialised on its worker; the image's layers are never written.

``diff()`` is the patch from the image to the workspace; ``freeze()`` turns the
workspace's changes into a new layer and returns the image that stacks it, which
``Sandbox.fork`` opens N times.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import time
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from codegym.sandbox import _files
from codegym.sandbox._worker import Worker, WorkerCrashed
from codegym.sandbox.cases import TestCase, Text
from codegym.sandbox.errors import SandboxClosed, SandboxInfraError, WorkspaceError
from codegym.sandbox.images import layers as _layers
from codegym.sandbox.images.changes import Changes, LowerView, patch, write_layer
from codegym.sandbox.images.errors import ImageBuildError
from codegym.sandbox.images.store import Image, ImageStore, image_digest
from codegym.sandbox.limits import Limits
from codegym.sandbox.result import ExecResult

OP_TIMEOUT_S = 60.0
EXPORT_MAX_BYTES = 240 << 20  # below the worker channel's frame cap


class Pool(Protocol):
    """What a workspace needs of the ``Sandbox`` that opened it (mypy checks ``Sandbox``
    against it where the sandbox opens one), so this module need not import it."""

    images: ImageStore | None

    async def run(
        self,
        command: str | Sequence[str],
        stdin: Text = "",
        *,
        files: Mapping[str, Text] | None = None,
        limits: Limits | None = None,
        workspace: Workspace | None = None,
    ) -> ExecResult: ...

    async def run_python(
        self,
        code: Text,
        stdin: Text = "",
        *,
        files: Mapping[str, Text] | None = None,
        limits: Limits | None = None,
        argv: Sequence[str] | None = None,
        workspace: Workspace | None = None,
    ) -> ExecResult: ...

    async def run_tests(
        self,
        code: Text | None,
        tests: Sequence[TestCase],
        *,
        command: str | Sequence[str] | None = None,
        build: str | Sequence[str] | None = None,
        files: Mapping[str, Text] | None = None,
        limits: Limits | None = None,
        workspace: Workspace | None = None,
    ) -> ExecResult: ...

    async def _execute(
        self,
        worker: Worker,
        req: dict[str, Any],
        blobs: list[bytes],
        limits: Limits,
        batch: int,
        deadline: float,
        pinned: bool = False,
    ) -> ExecResult: ...

    async def _restart(self, worker: Worker) -> None: ...


class Workspace:
    """A kept copy-on-write workspace (make one with ``Sandbox.workspace``)."""

    def __init__(self, pool: Pool, worker: Worker, wid: str, image: Image, disk_mb: int):
        self.pool = pool
        self.worker = worker
        self.id = wid
        self.image = image
        self.disk_mb = disk_mb
        self.generation = -1
        self.closed = False

    async def __aenter__(self) -> Workspace:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- runs ------------------------------------------------------------------

    async def run(
        self,
        command: str | Sequence[str],
        stdin: str | bytes = "",
        *,
        files: Mapping[str, str | bytes] | None = None,
        limits: Limits | None = None,
    ) -> ExecResult:
        """``Sandbox.run`` in this workspace (its root is the working directory)."""
        return await self.pool.run(command, stdin, files=files, limits=limits, workspace=self)

    async def run_python(
        self,
        code: str | bytes,
        stdin: str | bytes = "",
        *,
        files: Mapping[str, str | bytes] | None = None,
        limits: Limits | None = None,
        argv: Sequence[str] | None = None,
    ) -> ExecResult:
        """``Sandbox.run_python`` in this workspace, the image's environment importable."""
        return await self.pool.run_python(
            code, stdin, files=files, limits=limits, argv=argv, workspace=self
        )

    async def run_tests(
        self, code: str | bytes | None, tests: Sequence[TestCase], **kw: Any
    ) -> ExecResult:
        """``Sandbox.run_tests`` in this workspace."""
        return await self.pool.run_tests(code, tests, workspace=self, **kw)

    async def write_file(self, path: str, content: str | bytes) -> None:
        """As ``Session.write_file``."""
        await _files.write_file(self.run, path, content)

    async def read_file(self, path: str, max_bytes: int = 16 << 20) -> bytes:
        """As ``Session.read_file``."""
        return await _files.read_file(self.run, path, max_bytes)

    # -- what it changed -------------------------------------------------------

    async def changes(self) -> Changes:
        """The workspace's upper: every file it added or changed, and every deletion.

        Raises:
            WorkspaceError: it holds more than can be carried out (240 MiB).
            SandboxInfraError: its worker died (the workspace is lost).
        """
        reply, blobs = await self._ask({"op": "ws_export", "max_bytes": EXPORT_MAX_BYTES})
        return Changes(reply["entries"], blobs)

    async def diff(self) -> str:
        """A git-style patch from the image to this workspace (``git apply``/``patch -p1``
        in the source root); the environment folders (``.venv``) are left out."""
        changes = await self.changes()
        store = self._store()
        lower = LowerView(list(reversed(store.layer_paths(self.image))))
        return await asyncio.to_thread(patch, changes, lower)

    async def freeze(self, name: str | None = None) -> Image:
        """Make the workspace's current state an image: its changes become one new layer
        on top of the image's. ``Sandbox.fork`` then opens copies of it. The workspace
        itself goes on as it was."""
        changes = await self.changes()
        store = self._store()

        def build() -> Image:
            tree = store.scratch("frozen")
            try:
                write_layer(changes, tree)
                layer = _layers.publish(tree, store.layers_dir)
            except OSError as e:
                _layers.remove_tree(tree)
                if e.errno in (errno.ENOSPC, errno.EDQUOT):
                    raise ImageBuildError(
                        f"the disk under {store.root} filled while freezing workspace "
                        f"{self.id}: free space (`codegym image gc`) and freeze again"
                    ) from None
                raise WorkspaceError(f"workspace {self.id} cannot be frozen: {e}") from None
            except BaseException:
                _layers.remove_tree(tree)
                raise
            stack = (*self.image.layers, layer)
            img = Image(
                digest=image_digest(self.image.python, stack, self.image.env),
                name=name or self.image.name,
                python=self.image.python,
                layers=stack,
                env=dict(self.image.env),
                parent=self.image.digest,
                created=time.time(),
                spec=self.image.spec,
                built=self.image.built_layers,  # the new layer is the programs' work
            )
            return store.add(img, tag=name is not None)

        return await asyncio.to_thread(build)

    # -- lifetime --------------------------------------------------------------

    async def close(self) -> None:
        """Free the workspace (its files are gone); closing twice is fine."""
        if self.closed:
            return
        self.closed = True
        if self.worker.alive and self.worker.generation == self.generation:
            with contextlib.suppress(SandboxInfraError, WorkspaceError):
                await self._ask({"op": "ws_close"}, allow_closed=True)
        self.worker.kept.pop(self.id, None)

    async def _open(self) -> None:
        async with self.worker.busy:
            if not self.worker.alive:
                try:
                    await self.pool._restart(self.worker)
                except (WorkerCrashed, OSError) as e:
                    raise SandboxInfraError(f"no worker for a workspace: {e}") from None
            self.generation = self.worker.generation
            await self._ask_locked({"op": "ws_open", "disk_mb": self.disk_mb})
            self.worker.kept[self.id] = self.disk_mb

    async def _execute(
        self,
        req: dict[str, Any],
        blobs: list[bytes],
        limits: Limits,
        batch: int,
        deadline: float,
    ) -> ExecResult:
        async with self.worker.busy:
            if self.closed:
                raise SandboxClosed(f"workspace {self.id} is closed")
            if not self._alive():
                return _lost()
            return await self.pool._execute(
                self.worker, req, blobs, limits, batch, deadline, pinned=True
            )

    def _alive(self) -> bool:
        return self.worker.alive and self.worker.generation == self.generation

    async def _ask(
        self, header: dict[str, Any], allow_closed: bool = False
    ) -> tuple[dict[str, Any], list[bytes]]:
        async with self.worker.busy:
            if self.closed and not allow_closed:
                raise SandboxClosed(f"workspace {self.id} is closed")
            return await self._ask_locked(header)

    async def _ask_locked(self, header: dict[str, Any]) -> tuple[dict[str, Any], list[bytes]]:
        if not self._alive():
            raise SandboxInfraError(_lost().reason)
        try:
            reply, blobs = await self.worker.ask({**header, "id": self.id}, [], OP_TIMEOUT_S)
        except (WorkerCrashed, OSError) as e:
            await self.worker.stop()
            raise SandboxInfraError(f"workspace {self.id}: {e}") from None
        if reply.get("refused") is not None:  # what the workspace holds: the program's doing
            raise WorkspaceError(f"workspace {self.id}: {reply['refused']}")
        if reply.get("error") is not None:
            raise SandboxInfraError(f"workspace {self.id}: {reply['error']}")
        return reply, blobs

    def _store(self) -> ImageStore:
        assert self.pool.images is not None
        return self.pool.images


def _lost() -> ExecResult:
    return ExecResult.infra("the workspace's worker died; its files are lost")
