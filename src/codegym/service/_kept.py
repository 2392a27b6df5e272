"""Routes of the service's kept objects: sessions and kept workspaces of images.

Both are held by a ``SessionManager`` (cap, idle TTL) and answer the same calls: run in
it, put and get a file, close it. Kept workspaces add what images give: open one of an
image, fork N at once, the diff against the image, and freezing it into a new image.
"""

# No ``from __future__ import annotations``: FastAPI must see the route parameters'
# annotations as objects (``Id`` is local to the function that makes the routes).
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import APIRouter, FastAPI, HTTPException, Path, Request, Response
from pydantic import BaseModel

from codegym.sandbox import (
    ExecResult,
    FileTooLarge,
    Sandbox,
    SandboxError,
    SandboxInfraError,
    SandboxInputError,
    Session,
    WorkspaceError,
)
from codegym.sandbox.images.store import ImageStore
from codegym.sandbox.limits import check_path
from codegym.sandbox.workspace import Workspace
from codegym.service import _metrics as m
from codegym.service.models import (
    FileWritten,
    FreezeRequest,
    Frozen,
    ImageInfo,
    RunRequest,
    WorkspaceCreate,
    WorkspaceFork,
    WorkspaceForked,
    WorkspaceInfo,
)
from codegym.service.sessions import SessionLimit, SessionManager, UnknownSession

Error = Callable[..., HTTPException]
Once = Callable[[Request, BaseModel, Callable[[], Awaitable[ExecResult]]], Awaitable[Response]]
Kept = Session | Workspace
"""What a manager holds: a session (a pool of one worker) or a kept workspace of an image."""
Runner = Sandbox | Workspace
"""Where a request runs: the service's pool, a session (a ``Sandbox`` too) or a workspace."""
Execute = Callable[[Runner, RunRequest], Awaitable[ExecResult]]
OCTETS = {"application/octet-stream": {"schema": {"type": "string"}}}


@dataclass(frozen=True)
class Deps:
    """What the routes take from the app: its decorator for execution routes, its
    admission (``once``), how a request runs in an object, and how errors answer."""

    executes: Callable[..., Callable[[Callable[..., Any]], Callable[..., Any]]]
    once: Once
    execute: Execute
    error: Error
    errors: dict[int | str, dict[str, Any]]
    max_file_bytes: int


def add_kept_routes(
    app: FastAPI | APIRouter,
    *,
    prefix: str,
    param: str,
    noun: str,
    manager: SessionManager,
    names: dict[str, str],
    deps: Deps,
) -> Callable[[str], contextlib.AbstractAsyncContextManager[Kept]]:
    """exec, files and close under ``{prefix}/{<param>}``; returns the ``held`` context
    that other routes use to reach one object by id (404 when it is gone)."""
    error, errors, max_file_bytes = deps.error, deps.errors, deps.max_file_bytes
    Id = Annotated[str, Path(alias=param)]

    @contextlib.asynccontextmanager
    async def held(oid: str) -> AsyncIterator[Kept]:
        try:
            async with manager.use(oid) as obj:
                assert isinstance(obj, Kept)  # what the managers hold; typed Any there
                yield obj
        except UnknownSession:
            raise error(404, f"no open {noun} {oid!r}: it was closed or expired") from None

    def valid_path(path: str) -> None:
        try:
            check_path(path)
        except SandboxInputError as e:
            raise error(400, str(e)) from None

    async def run_in(oid: Id, req: RunRequest, request: Request) -> Response:
        async def work() -> ExecResult:
            async with held(oid) as obj:
                return await deps.execute(obj, req)

        return await deps.once(request, req, work)

    run_in.__doc__ = f"Run a program or command with the {noun}'s workspace as working directory."
    deps.executes(f"{prefix}/{{{param}}}/exec", name=names["exec"])(run_in)

    async def put_file(oid: Id, path: str, request: Request) -> FileWritten:
        """Write the request body (raw bytes) to ``path`` in the workspace."""
        valid_path(path)
        data = await request.body()
        if len(data) > max_file_bytes:
            raise error(413, f"file is {len(data)} bytes; the limit is {max_file_bytes}")
        async with held(oid) as obj:
            try:
                await obj.write_file(path, data)
            except SandboxInputError as e:
                raise error(400, str(e)) from None
            except WorkspaceError as e:  # the workspace's state refused it: the caller's
                raise error(409, str(e)) from None
            except SandboxError as e:
                raise error(503, str(e), retry_after=1) from None
        return FileWritten(path=path, size=len(data))

    app.put(
        f"{prefix}/{{{param}}}/files/{{path:path}}",
        response_model=FileWritten,
        responses=errors,
        name=names["put"],
        openapi_extra={"requestBody": {"required": True, "content": OCTETS}},
    )(put_file)

    async def get_file(oid: Id, path: str) -> Response:
        """Read a file of the workspace as raw bytes."""
        valid_path(path)
        async with held(oid) as obj:
            try:
                data = await obj.read_file(path, max_bytes=max_file_bytes)
            except SandboxInputError as e:
                raise error(400, str(e)) from None
            except FileNotFoundError:
                raise error(404, f"no file {path!r} in {noun} {oid!r}") from None
            except FileTooLarge as e:
                raise error(413, str(e)) from None
            except WorkspaceError as e:
                raise error(409, str(e)) from None
            except SandboxError as e:
                raise error(503, str(e)) from None
        return Response(data, media_type="application/octet-stream")

    app.get(
        f"{prefix}/{{{param}}}/files/{{path:path}}",
        responses={200: {"content": OCTETS}, **errors},
        name=names["get"],
    )(get_file)

    async def close(oid: Id) -> Response:
        try:
            await manager.close(oid)
        except UnknownSession:
            raise error(404, f"no open {noun} {oid!r}") from None
        return Response(status_code=204)

    close.__doc__ = f"Close a {noun} and free its workspace."
    app.delete(f"{prefix}/{{{param}}}", status_code=204, responses=errors, name=names["close"])(
        close
    )
    return held


def add_workspace_routes(
    app: FastAPI | APIRouter,
    *,
    sandbox: Sandbox,
    manager: SessionManager,
    ttl_s: float,
    draining: Callable[[], bool],
    deps: Deps,
) -> None:
    """Images and kept workspaces (``/v1/images``, ``/v1/workspaces``)."""
    error, errors = deps.error, deps.errors
    kept = add_kept_routes(
        app,
        prefix="/v1/workspaces",
        param="wid",
        noun="workspace",
        manager=manager,
        names={
            "exec": "workspace_exec",
            "put": "put_workspace_file",
            "get": "get_workspace_file",
            "close": "close_workspace",
        },
        deps=deps,
    )

    @contextlib.asynccontextmanager
    async def held(wid: str) -> AsyncIterator[Workspace]:
        async with kept(wid) as ws:
            assert isinstance(ws, Workspace)  # this manager holds what ``sandbox.fork`` made
            yield ws

    def store() -> ImageStore:
        if sandbox.images is None:
            raise error(400, "this service has no image cache: start it with --image-cache DIR")
        return sandbox.images

    @app.get("/v1/images", response_model=list[ImageInfo], responses=errors)
    async def list_images() -> list[ImageInfo]:
        """The images in the service's cache, oldest first."""
        return [
            ImageInfo(
                digest=i.digest,
                name=i.name,
                python=i.python,
                layers=len(i.layers),
                parent=i.parent,
            )
            for i in store().images()
        ]

    async def open_n(req: WorkspaceCreate, n: int) -> list[WorkspaceInfo]:
        store()
        if draining():
            raise error(503, "the sandbox service is draining", retry_after=1)

        async def make() -> list[Workspace]:
            return list(await sandbox.fork(req.image, n, disk_mb=req.disk_mb))

        try:
            ids = await manager.add(make, n)
        except SessionLimit as e:
            m.REJECTED.labels("workspaces").inc()
            raise error(429, str(e), retry_after=max(1, int(ttl_s))) from None
        except SandboxInputError as e:  # an unknown image, say
            raise error(400, str(e)) from None
        except SandboxError as e:
            raise error(503, str(e), retry_after=1) from None
        image = sandbox._image(req.image).digest
        return [WorkspaceInfo(id=i, image=image, idle_ttl_s=ttl_s) for i in ids]

    @app.post("/v1/workspaces", response_model=WorkspaceInfo, status_code=201, responses=errors)
    async def open_workspace(req: WorkspaceCreate) -> WorkspaceInfo:
        """Open a kept copy-on-write workspace of an image: its files persist across
        commands until it is closed or idle past the TTL; the image is never written."""
        return (await open_n(req, 1))[0]

    @app.post(
        "/v1/workspaces/fork", response_model=WorkspaceForked, status_code=201, responses=errors
    )
    async def fork_workspaces(req: WorkspaceFork) -> WorkspaceForked:
        """Open ``n`` kept workspaces of one image at once (e.g. a frozen, prepared state)."""
        return WorkspaceForked(workspaces=await open_n(req, req.n))

    @app.get(
        "/v1/workspaces/{wid}/diff",
        responses={200: {"content": {"text/x-diff": {"schema": {"type": "string"}}}}, **errors},
    )
    async def workspace_diff(wid: str) -> Response:
        """The git-style patch from the image to the workspace (``git apply``)."""
        async with held(wid) as ws:
            try:
                patch = await ws.diff()
            except WorkspaceError as e:
                raise error(409, str(e)) from None
            except SandboxInfraError as e:
                raise error(503, str(e), retry_after=1) from None
        return Response(patch, media_type="text/x-diff")

    @app.post("/v1/workspaces/{wid}/freeze", response_model=Frozen, responses=errors)
    async def freeze_workspace(wid: str, req: FreezeRequest | None = None) -> Frozen:
        """Make the workspace's state a new image (its changes as one more layer)."""
        async with held(wid) as ws:
            try:
                img = await ws.freeze((req or FreezeRequest()).name)
            except WorkspaceError as e:
                raise error(409, str(e)) from None
            except SandboxError as e:
                raise error(503, str(e), retry_after=1) from None
        return Frozen(image=img.digest, parent=img.parent or "", layers=len(img.layers))
