"""``Sandbox``: a pool of warm workers behind one async API.

Callers are served first come, first served: a worker is taken from a FIFO queue of idle
workers, so the pool is never oversubscribed and no caller starves. An execution that the
sandbox itself fails (a worker that dies, hangs or breaks protocol) comes back as
``Verdict.INFRA`` with a reason, and the worker is replaced; the pool keeps serving.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import time
import warnings
from collections.abc import Mapping, Sequence
from typing import Any, get_args

from codegym.sandbox import _files, _seccomp
from codegym.sandbox._cgroups import Stats
from codegym.sandbox._verdict import judge
from codegym.sandbox._worker import Worker, WorkerCrashed
from codegym.sandbox.cases import AssertTest as AssertTest
from codegym.sandbox.cases import Compare as Compare
from codegym.sandbox.cases import IOTest as IOTest
from codegym.sandbox.cases import TestCase as TestCase
from codegym.sandbox.cases import Text as Text
from codegym.sandbox.errors import (
    HostUnsupported,
    SandboxClosed,
    SandboxInputError,
)
from codegym.sandbox.images.store import MAX_LAYERS, VENV, Image, ImageStore
from codegym.sandbox.limits import MAX_CODE_BYTES, MAX_INPUT_BYTES, Limits, check_path
from codegym.sandbox.result import ExecResult, Verdict
from codegym.sandbox.tier import Tier, WorkerSpec, sweep_stale
from codegym.sandbox.tiers import TIERS, make_tier
from codegym.sandbox.workspace import Workspace
from codegym.telemetry import metrics as _metrics  # telemetry: metrics and spans
from codegym.telemetry.tracing import set_error, span

log = logging.getLogger("codegym.sandbox")
# Names a pool's workers (and their cgroups and gVisor containers) uniquely in its process;
# ``id(self)`` did not: a later pool could get a freed one's id while gVisor still tore
# down its container, and runsc refused the name ("address already in use").
_POOL_TAGS = itertools.count(1)

GRACE_S = 5.0


WorkspaceRef = str | Image | Workspace
"""Where a run happens: an image (a fresh workspace) or a kept ``Workspace``."""


def _as_bytes(value: Text, what: str, cap: int = MAX_INPUT_BYTES) -> bytes:
    if isinstance(value, str):
        try:
            data = value.encode("utf-8", "surrogateescape")
        except UnicodeEncodeError as e:
            raise SandboxInputError(
                f"{what} holds text that has no UTF-8 form ({e.object[e.start : e.end]!r} "
                f"at {e.start}, a lone surrogate); pass valid text or bytes"
            ) from None
    elif isinstance(value, (bytes, bytearray, memoryview)):
        data = bytes(value)
    else:
        raise SandboxInputError(f"{what} must be str or bytes, got {type(value).__name__}")
    if len(data) > cap:
        raise SandboxInputError(
            f"{what} is {len(data)} bytes; the limit is {cap} bytes — pass less data"
        )
    return data


def _code_bytes(code: Text) -> bytes:
    data = _as_bytes(code, "code", MAX_CODE_BYTES)
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise SandboxInputError(
            f"code is not valid UTF-8 (byte {e.start}: {data[e.start : e.start + 4]!r}); "
            "decode the source to str first or fix its encoding"
        ) from None
    return data


def _assert_wire(t: AssertTest) -> dict[str, Any]:
    if not isinstance(t.code, str) or not isinstance(t.setup, str):
        raise SandboxInputError("AssertTest.code and AssertTest.setup must be str")
    names = tuple(t.program)
    if not all(isinstance(n, str) and n.isidentifier() for n in names):
        raise SandboxInputError(f"AssertTest.program={t.program!r}: give identifiers")
    for what, text in (("code", t.code), ("setup", t.setup)):
        _as_bytes(text, f"AssertTest.{what}", MAX_CODE_BYTES)
    return {"kind": "assert", "code": t.code, "setup": t.setup, "program": list(names)}


class Sandbox:
    """A pool of sandbox workers.

    Args:
        tier: ``"jail"`` (default), ``"gvisor"`` or ``"process"``.
        workers: how many executions run at once (default: the CPU count).
        python: the interpreter to run inside the sandbox (default: system Python).
        recycle_after: restart a worker's zygote after this many executions.
        images: an ``ImageStore`` (or its folder) whose images runs may use as
            copy-on-write workspaces (``workspace=``, ``workspace()``, ``fork()``);
            ``jail`` tier only.

    Raises:
        HostUnsupported: on entry, when the host lacks what the tier needs.
        SandboxInputError: for an unknown tier or a bad worker count.
    """

    _session = False
    _session_disk_mb = 256

    def __init__(
        self,
        tier: str = "jail",
        workers: int | None = None,
        *,
        python: str | None = None,
        recycle_after: int = 2000,
        images: ImageStore | str | os.PathLike[str] | None = None,
    ) -> None:
        if tier not in TIERS:
            raise SandboxInputError(
                f"unknown sandbox tier {tier!r}; choose one of {', '.join(TIERS.names())}"
            )
        n = workers if workers is not None else (os.cpu_count() or 1)
        if not isinstance(n, int) or not 1 <= n <= 512:
            raise SandboxInputError(f"workers={workers!r}: use an integer in 1..512")
        self.tier_name = tier
        self.size = n
        self.recycle_after = recycle_after
        self._python = python
        self._tier: Tier | None = None
        self._workers: list[Worker] = []
        self._idle: asyncio.Queue[Worker] = asyncio.Queue()
        self._closed = False
        self._started = False
        self._bpf = b""
        self.infra_count = 0
        self.recycles = 0
        if images is not None and tier != "jail":
            raise SandboxInputError(
                f"images run in workspaces of the jail tier only, not {tier!r}; "
                "use Sandbox(tier='jail', images=...)"
            )
        self.images = images if isinstance(images, ImageStore | None) else ImageStore(images)
        self._ws_ids = itertools.count(1)

    # -- lifecycle -----------------------------------------------------------

    async def __aenter__(self) -> Sandbox:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def start(self) -> None:
        if self._started:
            return
        try:
            tier = make_tier(self.tier_name, self._python)
        except SandboxInputError as e:  # a named interpreter that is not there
            raise HostUnsupported(self.tier_name, [str(e)], []) from None
        problems = await asyncio.to_thread(tier.problems)
        if problems:
            from codegym.sandbox.tiers import working_tiers

            works = await asyncio.to_thread(working_tiers, self._python)
            raise HostUnsupported(self.tier_name, problems, works)
        if tier.warning:
            warnings.warn(tier.warning, stacklevel=2)
            log.warning(tier.warning)
        self._tier = tier
        if self.images is not None:
            self.images.check_reachable()
            await asyncio.to_thread(self.images.sweep_tmp)  # what killed builds left
        await asyncio.to_thread(sweep_stale)  # what pools of killed owners left behind
        self._bpf = _seccomp.deny_list_bpf()
        tag = f"{os.getpid()}-{next(_POOL_TAGS):x}"
        layers = str(self.images.layers_dir) if self.images is not None else None
        specs = [
            WorkerSpec(
                f"{tag}-w{i}",
                session=self._session,
                session_disk_mb=self._session_disk_mb,
                layers=layers,
            )
            for i in range(self.size)
        ]
        self._workers = [Worker(tier, spec, self._bpf) for spec in specs]
        try:
            async with asyncio.TaskGroup() as tg:
                for w in self._workers:
                    tg.create_task(w.start())
        except BaseException:
            await asyncio.gather(*(w.stop() for w in self._workers), return_exceptions=True)
            raise
        for w in self._workers:
            self._idle.put_nowait(w)
        self._started = True
        _metrics.track_pool(self)  # telemetry: busy/idle worker gauges

    async def close(self) -> None:
        self._closed = True
        await asyncio.gather(*(w.stop() for w in self._workers), return_exceptions=True)

    def pool_usage(self) -> tuple[int, int]:
        """``(busy, idle)`` worker counts, for the telemetry gauges; ``(0, 0)`` when closed."""
        if self._closed or not self._started:
            return 0, 0
        idle = self._idle.qsize()
        return len(self._workers) - idle, idle

    # -- public calls --------------------------------------------------------

    async def run_python(
        self,
        code: Text,
        stdin: Text = "",
        *,
        files: Mapping[str, Text] | None = None,
        limits: Limits | None = None,
        argv: Sequence[str] | None = None,
        workspace: WorkspaceRef | None = None,
    ) -> ExecResult:
        """Run a Python program in a warm, forked interpreter.

        ``workspace``: an image (reference or ``Image``: a fresh copy-on-write workspace of
        it, gone after the run) or a kept ``Workspace``; the program runs in its root with
        the image's environment importable.

        Raises:
            SandboxInputError: non-UTF-8 or oversized code, bad file paths, bad limits, an
                image that is not in the pool's cache.
        """
        blobs = [_code_bytes(code), _as_bytes(stdin, "stdin")]
        req = {"mode": "python", "code": 0, "stdin": 1, "argv": ["main.py", *(argv or [])]}
        return await self._submit(req, blobs, files, limits or Limits(), 0, workspace=workspace)

    async def run(
        self,
        command: str | Sequence[str],
        stdin: Text = "",
        *,
        files: Mapping[str, Text] | None = None,
        limits: Limits | None = None,
        workspace: WorkspaceRef | None = None,
    ) -> ExecResult:
        """Run a command as a fresh process in the same isolation (bash, gcc, node, ...).

        A string runs through ``/bin/sh -c``; a sequence is an argv. ``workspace`` as for
        ``run_python``; the image's environment comes first on ``PATH``.
        """
        argv = _argv(command)
        blobs = [_as_bytes(stdin, "stdin")]
        req = {"mode": "exec", "argv": argv, "stdin": 0}
        return await self._submit(req, blobs, files, limits or Limits(), 0, workspace=workspace)

    async def run_tests(
        self,
        code: Text | None,
        tests: Sequence[TestCase],
        *,
        command: str | Sequence[str] | None = None,
        build: str | Sequence[str] | None = None,
        files: Mapping[str, Text] | None = None,
        limits: Limits | None = None,
        workspace: WorkspaceRef | None = None,
    ) -> ExecResult:
        """Run one program against many test cases in a single round trip.

        Python: pass ``code``. Anything else: pass ``files``, a ``build`` command run once
        (compile), and the ``command`` each ``IOTest`` runs. ``limits`` apply per test.
        ``result.tests`` holds one ``TestResult`` per test, in order.
        """
        if not tests:
            raise SandboxInputError("run_tests needs at least one test case")
        kinds = {type(t) for t in tests}
        if len(kinds) > 1 or not kinds <= {AssertTest, IOTest}:
            raise SandboxInputError(
                "tests must be all AssertTest or all IOTest instances, not a mix"
            )
        if (code is None) == (command is None):
            raise SandboxInputError("pass either code (Python) or command (any program)")
        if AssertTest in kinds and code is None:
            raise SandboxInputError("AssertTest needs Python code; use IOTest with command")
        blobs: list[bytes] = []
        req: dict[str, Any] = {}
        if code is not None:
            blobs.append(_code_bytes(code))
            req.update(mode="python", code=0, argv=["main.py"])
        else:
            req.update(mode="exec", argv=_argv(command or ""))
        if build is not None:
            req["build"] = _argv(build)
        wire: list[dict[str, Any]] = []
        for t in tests:
            if isinstance(t, AssertTest):
                wire.append(_assert_wire(t))
            else:
                if t.compare not in get_args(Compare):
                    raise SandboxInputError(
                        f"IOTest.compare={t.compare!r}: use one of {', '.join(get_args(Compare))}"
                    )
                blobs += [
                    _as_bytes(t.stdin, "IOTest.stdin"),
                    _as_bytes(t.expected, "IOTest.expected"),
                ]
                wire.append(
                    {
                        "kind": "stdio",
                        "stdin": len(blobs) - 2,
                        "expected": len(blobs) - 1,
                        "compare": t.compare,
                        "tolerance": t.tolerance,
                    }
                )
        req["tests"] = wire
        steps = len(tests) + (1 if build is not None else 0)
        lim = limits or Limits()
        return await self._submit(req, blobs, files, lim, len(tests), steps, workspace)

    # -- workspaces ----------------------------------------------------------

    async def workspace(self, image: str | Image, *, disk_mb: int = 256) -> Workspace:
        """A kept copy-on-write workspace of ``image``: its files persist across runs
        (processes do not) until it is closed. It lives in one worker's zygote, next to
        others; its writes go to a private tmpfs of ``disk_mb`` (bytes and inodes capped),
        never to the image.

        Raises:
            SandboxInputError: no image cache, an unknown image, a bad size.
            SandboxInfraError: the worker could not open it.
        """
        if not isinstance(disk_mb, int) or not 1 <= disk_mb <= 1 << 16:
            raise SandboxInputError(f"disk_mb={disk_mb!r}: use an integer in 1..65536")
        if self._closed or not self._started:
            raise SandboxClosed("the Sandbox is closed or not started")
        img = await self._adopted(image)
        # the worker holding the fewest workspaces, those being opened counted (many opened
        # at once would otherwise all see empty workers and land on one); ties: least used
        worker = min(self._workers, key=lambda w: (len(w.kept) + w.opening, w.runs))
        ws = Workspace(self, worker, f"ws{next(self._ws_ids)}", img, disk_mb)
        worker.opening += 1
        try:
            await ws._open()
        finally:
            worker.opening -= 1
        return ws

    async def fork(self, image: str | Image, n: int, *, disk_mb: int = 256) -> list[Workspace]:
        """``n`` independent kept workspaces of one image (a prepared state: see
        ``Workspace.freeze``), opened at once across the pool's workers."""
        if not isinstance(n, int) or not 1 <= n <= 4096:
            raise SandboxInputError(f"n={n!r}: fork 1..4096 workspaces")
        made = await asyncio.gather(
            *(self.workspace(image, disk_mb=disk_mb) for _ in range(n)), return_exceptions=True
        )
        errors = [m for m in made if isinstance(m, BaseException)]
        if errors:
            await asyncio.gather(
                *(m.close() for m in made if isinstance(m, Workspace)), return_exceptions=True
            )
            raise errors[0]
        return [m for m in made if isinstance(m, Workspace)]

    def _image(self, image: str | Image) -> Image:
        if self.images is None:
            raise SandboxInputError(
                "this Sandbox has no image cache: make it with Sandbox(images=ImageStore())"
            )
        img = image if isinstance(image, Image) else self.images.get(image)
        self.images.layer_paths(img)  # every layer is in this cache
        if len(img.layers) > MAX_LAYERS:
            raise SandboxInputError(f"image {img.digest} stacks more than {MAX_LAYERS} layers")
        return img

    async def _adopted(self, image: str | Image) -> Image:
        """``image``, its layers owned by this pool's workspace workers' uid: a layer of
        another owner is adopted (``images.adopt``: a copy, checked, on a thread)."""
        img = self._image(image)
        assert self.images is not None
        if self.images.foreign_layers(img):
            from codegym.sandbox.images.adopt import adopt

            await asyncio.to_thread(adopt, self.images, img)
        return img

    def _place(self, req: dict[str, Any], where: WorkspaceRef) -> None:
        """Point a request at a workspace: the image's layers (and the kept upper)."""
        if isinstance(where, Workspace):
            if where.pool is not self:
                raise SandboxInputError("that workspace belongs to another Sandbox")
            img, keep = where.image, where.id
        else:
            img, keep = self._image(where), None
        hexes = [d.removeprefix("sha256:") for d in img.layers]
        # "built": the judge imports only from these bottom layers, never a frozen one
        req["workspace"] = {"layers": hexes, "keep": keep, "built": img.built_layers}
        if isinstance(where, Workspace):
            req["workspace"]["inodes"] = where.disk_mb * 1024  # its tmpfs's quota
        req["env"] = {**img.env, "HOME": "/tmp"}
        if req.get("mode") == "python":
            major_minor = ".".join(img.python.split(".")[:2])
            req["site"] = f"{VENV}/lib/python{major_minor}/site-packages"

    # -- machinery -----------------------------------------------------------

    async def _submit(
        self,
        req: dict[str, Any],
        blobs: list[bytes],
        files: Mapping[str, Text] | None,
        limits: Limits,
        batch: int,
        steps: int = 1,
        workspace: WorkspaceRef | None = None,
    ) -> ExecResult:
        if not isinstance(limits, Limits):
            raise SandboxInputError(f"limits must be a Limits, got {type(limits).__name__}")
        wire_files = []
        total = 0
        for path, content in (files or {}).items():
            data = _as_bytes(content, f"file {path!r}")
            total += len(data)
            if total > MAX_INPUT_BYTES:
                raise SandboxInputError(
                    f"files add up to more than {MAX_INPUT_BYTES} bytes; pass less data"
                )
            blobs.append(data)
            wire_files.append([check_path(path), len(blobs) - 1, 0o644])
        deadline = limits.wall * max(1, steps)
        req.update(op="run", files=wire_files, limits=limits.to_wire(), wall_s=deadline)
        if self._closed:
            raise SandboxClosed("this Sandbox is closed")
        if not self._started:
            raise SandboxClosed("use 'async with Sandbox(...)' or await start() first")
        kept = workspace if isinstance(workspace, Workspace) else None
        if workspace is not None:
            if not isinstance(workspace, Workspace):
                workspace = await self._adopted(workspace)  # (its manifest read once)
            self._place(req, workspace)
        # telemetry: a `sandbox.exec` span, queue wait, and run latency by verdict.
        op = "tests" if "tests" in req else str(req["mode"])
        with span("sandbox.exec", tier=self.tier_name, op=op, tests=batch or None) as sp:
            start = time.perf_counter()
            if kept is not None:
                result = await kept._execute(req, blobs, limits, batch, deadline)
            else:
                with _metrics.sandbox_waiting(self.tier_name):
                    worker = await self._idle.get()
                start = time.perf_counter()
                try:
                    async with worker.busy:
                        result = await self._execute(worker, req, blobs, limits, batch, deadline)
                finally:
                    self._idle.put_nowait(worker)
            _metrics.observe_sandbox_run(
                self.tier_name, op, result.verdict.value, time.perf_counter() - start
            )
            if sp.is_recording():
                v = result.verdict.value
                sp.set_attributes({"verdict": v, "cpu_s": result.cpu_s, "wall_s": result.wall_s})
                if result.verdict is Verdict.INFRA:
                    set_error(sp, result.reason)
            return result

    async def _execute(
        self,
        worker: Worker,
        req: dict[str, Any],
        blobs: list[bytes],
        limits: Limits,
        batch: int,
        deadline: float,
        pinned: bool = False,
    ) -> ExecResult:
        """One request on ``worker``; ``pinned`` (a kept workspace's run): the worker
        holds the workspace, so it is neither restarted nor swapped for another."""
        reason = ""
        for attempt in range(2):  # a dead worker is replaced and the run tried once more
            if self._session and worker.runs and not worker.alive:
                reason = "the session's worker died; its files are lost"
                break
            # a zygote that holds kept workspaces is not recycled while they are open
            scheduled = worker.runs >= self.recycle_after and not worker.kept
            if pinned and not worker.alive:
                reason = "the workspace's worker died; its files are lost"
                break
            if not pinned and (not worker.alive or scheduled):
                cause = "replaced" if not worker.alive else "scheduled"
                _metrics.count_recycle(self.tier_name, cause)  # telemetry
                try:
                    await self._restart(worker)
                except (WorkerCrashed, OSError) as e:
                    reason = f"could not restart the worker: {e}"
                    continue
            cg = worker.cgroup
            try:
                held = 0
                if cg is not None:
                    # kept workspaces' files stay charged to the run slot that wrote them:
                    # the run gets its whole limit on top of what they hold now
                    held = cg.charged_bytes() if worker.kept else 0
                    cg.prepare(limits.memory_mb + -(-held >> 20), limits.max_processes)
                reply, out = await worker.call(req, blobs, deadline + GRACE_S)
                stats = cg.run_stats() if cg is not None else None
                if stats is not None and held and stats.peak_bytes is not None:
                    stats = Stats(stats.cpu_s, max(0, stats.peak_bytes - held), stats.oom_kills)
            except (WorkerCrashed, OSError) as e:
                reason = str(e)
                log.warning("sandbox worker %s failed: %s", worker.spec.name, reason)
                await worker.stop()
                if not pinned and worker.runs and attempt == 0 and "did not answer" not in reason:
                    continue
                break
            reply["deadline_s"] = deadline
            result = judge(reply, out[0], out[1], limits, stats, batch)
            if result.verdict is Verdict.INFRA:
                await worker.stop()  # a broken run may have left the worker tainted
                self.infra_count += 1
                _metrics.count_sandbox_infra(self.tier_name, result.reason)  # telemetry
            return result
        self.infra_count += 1
        _metrics.count_sandbox_infra(self.tier_name, reason)  # telemetry
        return _infra(reason)

    async def _restart(self, worker: Worker) -> None:
        await worker.stop()
        worker.runs = 0
        self.recycles += 1
        await worker.start()


def _argv(command: str | Sequence[str]) -> list[str]:
    if isinstance(command, str):
        if not command.strip():
            raise SandboxInputError("command is empty")
        return ["/bin/sh", "-c", command]
    argv = list(command)
    if not argv or not all(isinstance(a, str) and "\0" not in a for a in argv):
        raise SandboxInputError("command must be a non-empty list of strings without NUL")
    return argv


def _infra(reason: str) -> ExecResult:
    return ExecResult.infra(reason)


class Session(Sandbox):
    """A workspace whose files persist across commands; processes do not.

    Each command runs like a plain execution (fresh process tree, fresh /tmp) with the
    workspace as its working directory. Close it (or use ``async with``) to free it.

    Args:
        tier: as for ``Sandbox``.
        disk_mb: size of the workspace.
    """

    _session = True

    def __init__(
        self, tier: str = "jail", *, disk_mb: int = 256, python: str | None = None
    ) -> None:
        super().__init__(tier, 1, python=python, recycle_after=1 << 62)
        if not isinstance(disk_mb, int) or not 1 <= disk_mb <= 1 << 16:
            raise SandboxInputError(f"disk_mb={disk_mb!r}: use an integer in 1..65536")
        self._session_disk_mb = disk_mb

    async def write_file(self, path: str, content: Text) -> None:
        """Write a file into the workspace (parents are created; symlinks never followed).

        Raises:
            SandboxInputError: a bad path or oversized content.
            WorkspaceError: the workspace refused it (a folder on the path is a file or a
                symlink, the disk is full, ...).
            SandboxInfraError: the sandbox failed.
        """
        await _files.write_file(self.run, path, content)

    async def read_file(self, path: str, max_bytes: int = 16 << 20) -> bytes:
        """Read a file from the workspace.

        Raises:
            FileNotFoundError: no such file in the workspace.
            FileTooLarge: the file is larger than ``max_bytes``.
            WorkspaceError: the file could not be read (a folder, no permission, ...).
            SandboxInfraError: the sandbox failed.
        """
        return await _files.read_file(self.run, path, max_bytes)
