"""One worker: a tier-launched process running the zygote, spoken to over pipes."""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import json
import os
import shutil
import signal
import struct
from typing import Any

from codegym.errors import CodegymError
from codegym.sandbox import _uids
from codegym.sandbox.tier import Launch, Tier, WorkerSpec

_HDR = struct.Struct(">I")
_LIBC = ctypes.CDLL(None, use_errno=True)
_PR_SET_PDEATHSIG = 1
_MAX_FRAME = 256 << 20
START_TIMEOUT_S = 30.0


class WorkerCrashed(CodegymError):
    """The worker died, hung or broke protocol: our fault, never the program's."""

    exit_code = 3


def encode(header: dict[str, Any], blobs: list[bytes]) -> bytes:
    head = json.dumps({**header, "_blobs": [len(b) for b in blobs]}, separators=(",", ":")).encode()
    return _HDR.pack(len(head)) + head + b"".join(blobs)


async def read_frame(reader: asyncio.StreamReader) -> tuple[dict[str, Any], list[bytes]]:
    (n,) = _HDR.unpack(await reader.readexactly(4))
    if n > _MAX_FRAME:
        raise WorkerCrashed(f"protocol error: frame of {n} bytes")
    header = json.loads(await reader.readexactly(n))
    blobs = [await reader.readexactly(k) for k in header.pop("_blobs", [])]
    return header, blobs


class Worker:
    def __init__(self, tier: Tier, spec: WorkerSpec, seccomp_bpf: bytes) -> None:
        self.tier = tier
        self.spec = spec
        self.bpf = seccomp_bpf
        self.runs = 0
        self.launch: Launch | None = None
        self.proc: asyncio.subprocess.Process | None = None
        self._stderr_tail = bytearray()
        self._drain: asyncio.Task[None] | None = None
        self.busy = asyncio.Lock()  # one request at a time (a kept workspace's runs wait here)
        self.generation = 0  # bumped at each start: kept workspaces die with their zygote
        self.kept: dict[str, int] = {}  # the kept workspaces this zygote holds: id -> MB
        self.opening = 0  # kept workspaces being opened here (not in ``kept`` yet)

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.returncode is None

    @property
    def cgroup(self):  # type: ignore[no-untyped-def]
        return self.launch.cgroup if self.launch else None

    async def start(self) -> None:
        self.generation += 1
        self.kept.clear()
        launch = self.launch = self.tier.launch(self.spec)
        if not await self._sweep():  # what a worker of a pool killed with -9 left as uid
            await self.stop()
            raise WorkerCrashed(f"uid {launch.uid} could not be cleared of earlier processes")
        procs = [str(p) for p in launch.cgroup.procs()] if launch.cgroup else []
        uid = launch.uid

        def preexec() -> None:  # runs in the child, before exec
            pid = str(os.getpid())
            for path in procs:
                with open(path, "w") as f:
                    f.write(pid)
            if uid is not None and os.geteuid() == 0:
                os.setgroups([])
                os.setgid(uid)
                os.setuid(uid)
            # the worker dies with us, even by SIGKILL (bwrap has --die-with-parent; runsc
            # needs this); set after the uid change, which clears it
            _LIBC.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)

        try:
            self.proc = await asyncio.create_subprocess_exec(
                *launch.argv,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                env=launch.env,
                preexec_fn=preexec,
                limit=_MAX_FRAME,
                pass_fds=launch.pass_fds,
            )
        finally:
            for fd in launch.pass_fds:
                os.close(fd)
        self._drain = asyncio.create_task(self._drain_stderr())
        try:
            header, _ = await self._roundtrip(
                {k: v for k, v in launch.config.items()}, [self.bpf], START_TIMEOUT_S
            )
        except WorkerCrashed:
            await self.stop()
            raise
        if not header.get("ready"):
            await self.stop()
            raise WorkerCrashed(f"worker did not start: {header}")

    async def _sweep(self) -> bool:
        """Kill every process of the worker's uid, where its tier asks for that
        (``Launch.sweep``) and the uid is still ours; False if that failed, and then the
        uid stays claimed until this process exits (``_uids.quarantine``)."""
        launch = self.launch
        if launch is None or not launch.sweep or launch.uid is None or launch.uid_lock is None:
            return True
        try:
            await asyncio.to_thread(_uids.sweep_uid, launch.uid)
        except _uids.SweepFailed as e:
            _uids.quarantine(launch.uid, launch.uid_lock, str(e))
            launch.uid_lock = None
            return False
        return True

    async def _drain_stderr(self) -> None:
        assert self.proc and self.proc.stderr
        while chunk := await self.proc.stderr.read(4096):
            self._stderr_tail += chunk
            del self._stderr_tail[:-4096]

    def stderr_tail(self) -> str:
        return self._stderr_tail.decode("utf-8", "replace").strip()[-1000:]

    async def _roundtrip(
        self, header: dict[str, Any], blobs: list[bytes], timeout: float
    ) -> tuple[dict[str, Any], list[bytes]]:
        proc = self.proc
        if proc is None or proc.stdin is None or proc.stdout is None or not self.alive:
            raise WorkerCrashed("worker is not running")
        try:
            proc.stdin.write(encode(header, blobs))
            async with asyncio.timeout(timeout):
                await proc.stdin.drain()
                return await read_frame(proc.stdout)
        except TimeoutError:
            raise WorkerCrashed(f"worker did not answer within {timeout:.1f}s") from None
        except (asyncio.IncompleteReadError, ConnectionError, BrokenPipeError) as e:
            await asyncio.sleep(0.05)  # let the exit status and stderr arrive
            raise WorkerCrashed(
                f"worker died ({type(e).__name__}, exit {proc.returncode}): "
                f"{self.stderr_tail() or 'no output'}"
            ) from None
        except (ValueError, UnicodeDecodeError) as e:
            raise WorkerCrashed(f"protocol error: {e}") from None

    async def call(
        self, header: dict[str, Any], blobs: list[bytes], timeout: float
    ) -> tuple[dict[str, Any], list[bytes]]:
        self.runs += 1
        reply, out = await self._roundtrip(header, blobs, timeout)
        if "error" in reply:
            raise WorkerCrashed(f"zygote error: {reply['error']}")
        return reply, out

    async def ask(
        self, header: dict[str, Any], blobs: list[bytes], timeout: float
    ) -> tuple[dict[str, Any], list[bytes]]:
        """A request other than a run; its ``error`` (if any) is the caller's to read."""
        return await self._roundtrip(header, blobs, timeout)

    async def stop(self) -> None:
        proc = self.proc
        if proc is not None and proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(5):
                    await proc.wait()
        if self._drain is not None:
            self._drain.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._drain
        if self.launch is not None:
            if self.launch.cgroup is not None:
                await asyncio.to_thread(self.launch.cgroup.remove)
            await self._sweep()  # before its folders go and another worker may claim it
            for path in self.launch.cleanup:
                shutil.rmtree(path, ignore_errors=True)
            if self.launch.uid_lock is not None:
                os.close(self.launch.uid_lock)  # the uid is free for another worker
                self.launch.uid_lock = None
        self.proc = None
