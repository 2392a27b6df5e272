"""The receiving side of vLLM's weight-transfer routes, over a gloo process group.

vLLM's RL API moves weights trainer to server without a file: the trainer drives four HTTP
routes (the control plane) while the tensors travel over a collective group (the data
plane; NCCL or CUDA IPC in vLLM, gloo here, since this is a CPU server)::

    GET  /get_world_size                 {"world_size": 1}: this server's ranks
    POST /init_weight_transfer_engine    {"init_info": {master_address, master_port,
                                          rank_offset, world_size}}: join the trainer's
                                          group (the trainer is rank 0 and hosts its store)
    POST /start_weight_update            {"is_checkpoint_format": true}
    POST /update_weights                 {"update_info": {names, dtype_names, shapes,
                                          packed}}: receive the tensors rank 0 broadcasts
    POST /finish_weight_update           {}: load what was received; a new policy_version
    POST /pause, /resume, GET /is_paused  hold new generation requests meanwhile

The routes and bodies are vLLM's, so a trainer's HTTP calls are the same for either
server (``codegym.train.weights_collective`` makes them); only the broadcast differs.
Tensors are broadcast in ``names`` order, one broadcast each, or ``packed``: their bytes
laid end to end in buckets of at most ``packed_buffer_size_bytes`` (default 64 MiB, a
codegym field; vLLM's NCCL engine packs its own way, so a packed client for vLLM is
vLLM's own ``NCCLWeightTransferEngine``).

Nothing is loaded until ``finish``, and then all at once, under the lock a decoding batch
holds: a batch never sees half an update. An update that is refused (names or shapes
that do not fit the model) drops the group, so the trainer's broadcast fails at once
instead of waiting out its timeout; the trainer joins again for the next push.
"""

from __future__ import annotations

import datetime
import logging
import socket
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch

from codegym.policies.transformers_policy import TransformersPolicy
from codegym.policies.weight_wire import (
    JOIN_TIMEOUT_S,
    Group,
    buckets,
    gloo_group,
    nbytes,
    new_store,
    unpack,
)
from codegym.serving.engine import RequestError

log = logging.getLogger("codegym.serving")

CARRIED = (torch.float32, torch.bfloat16, torch.float16, torch.float64)
"""The dtypes a weight may travel as (gloo carries these; the model's own cast on load)."""


def parse_dtype(name: str, tensor: str) -> torch.dtype:
    dtype = getattr(torch, name, None)
    if not isinstance(dtype, torch.dtype) or dtype not in CARRIED:
        raise RequestError(
            f"update_info: {tensor} as {name!r}: weights travel as one of "
            f"{', '.join(str(d).removeprefix('torch.') for d in CARRIED)}",
            "update_info",
        )
    return dtype


class WeightReceiver:
    """This server's end of the weight-transfer group (module doc).

    No lock is held across a network wait: joining a group and receiving tensors happen
    outside ``_lock``, which guards only the state. Each join starts a new *epoch*; an
    update or finish from an older one is refused (``group_changed``), so one trainer's
    slow or hung transfer never blocks another's join, and never lands in its update.
    ``on_abandon`` is called when a transfer is given up (a broadcast failed, the group
    was dropped or replaced): the server resumes generation then, so a trainer that died
    between ``/pause`` and ``/resume`` does not leave it paused.
    """

    def __init__(
        self,
        policy: TransformersPolicy,
        timeout_s: float = 300.0,
        on_abandon: Callable[[], None] | None = None,
    ) -> None:
        self.policy = policy
        self.timeout_s = timeout_s
        self.on_abandon = on_abandon
        self._group: Group | None = None
        self._joined: str | None = None
        """``ADDRESS:PORT`` of the trainer's store the group was made on."""
        self._epoch = 0
        self._pending: dict[str, torch.Tensor] | None = None
        self._lock = threading.Lock()

    def init(
        self, master_address: str, master_port: int, rank_offset: int, world_size: int
    ) -> dict[str, Any]:
        """Join the trainer's group as ``rank_offset`` (blocks until every rank joined, at
        most ``JOIN_TIMEOUT_S``). A new init replaces the old group: a trainer that
        restarted, or another one, joins afresh.

        Raises:
            RequestError: the ranks do not fit (400), or the trainer's store cannot be
                reached or the group did not form in time (502).
        """
        if not 1 <= rank_offset < world_size:
            raise RequestError(
                f"init_info: rank_offset {rank_offset} with world_size {world_size}: this "
                "server takes one rank, in 1..world_size-1 (the trainer is rank 0)",
                "init_info",
            )
        with self._lock:
            self._drop()  # the old group goes now: its trainer's next call is refused
        try:
            local = _local_address(master_address, master_port)
            wait = min(self.timeout_s, JOIN_TIMEOUT_S)
            store = new_store(master_address, master_port, world_size, master=False, timeout_s=wait)
            group = gloo_group(store, rank_offset, world_size, local, self.timeout_s)
        except (OSError, RuntimeError, ValueError) as e:
            raise RequestError(
                f"init_info: cannot join the trainer's group at {master_address}:"
                f"{master_port}: {type(e).__name__}: {str(e)[:300]}",
                "init_info",
                status=502,
            ) from e
        with self._lock:
            self._drop()  # a join that finished first meanwhile is replaced too
            self._group, self._joined = group, f"{master_address}:{master_port}"
        log.info(
            "weight transfer: joined %s:%s as rank %s", master_address, master_port, rank_offset
        )
        return {"status": "ok", "rank": rank_offset, "world_size": world_size}

    def start(self, is_checkpoint_format: bool, group: str | None = None) -> dict[str, Any]:
        """Begin an update. ``group`` (the ``x-codegym-transfer-group`` header, optional)
        names the group the caller joined, ``ADDRESS:PORT``; another one is refused with
        ``group_changed`` (409), so a trainer whose group was replaced by another
        trainer's joins again instead of announcing tensors nobody will broadcast."""
        if not is_checkpoint_format:
            raise RequestError(
                "is_checkpoint_format false: this server takes the model's own (checkpoint) "
                "parameter names only; send those",
                "is_checkpoint_format",
            )
        with self._lock:
            self._need_group(group)
            self._pending = {}
        return {"status": "ok"}

    def update(
        self,
        names: Sequence[str],
        dtype_names: Sequence[str],
        shapes: Sequence[Sequence[int]],
        *,
        packed: bool,
        bucket_bytes: int,
        group: str | None = None,
    ) -> dict[str, Any]:
        """Receive the tensors named (blocks while rank 0 broadcasts them); ``group`` as
        in ``start``.

        Raises:
            RequestError: no update was started, or the names, dtypes or shapes do not fit
                the model (400; the group is dropped so the trainer's broadcast fails at
                once); the broadcast failed (502: the trainer died or timed out); the group
                was replaced meanwhile (409).
        """
        with self._lock:
            pg = self._need_group(group)
            epoch = self._epoch
            if self._pending is None:
                raise RequestError(
                    "update_weights before start_weight_update: start an update first",
                    "update_info",
                    code="not_started",
                )
            try:
                dtypes = [parse_dtype(d, n) for d, n in zip(dtype_names, names, strict=True)]
                meta = {
                    n: torch.empty(s, dtype=d, device="meta")
                    for n, d, s in zip(names, dtypes, shapes, strict=True)
                }
                self.policy.check_weights(meta, partial=True, where="update_info")
            except Exception as e:  # any refusal (overflowing shapes raise TypeError too)
                self._drop()
                if isinstance(e, RequestError):
                    raise
                raise RequestError(f"update_info: {e}", "update_info") from e
        try:
            received = dict(self._receive(pg, names, dtypes, shapes, packed, bucket_bytes))
        except RuntimeError as e:
            with self._lock:
                if self._epoch == epoch:
                    self._drop()
            raise RequestError(
                f"the broadcast of the weights failed: {str(e)[:300]}; the trainer "
                "must join again (init_weight_transfer_engine)",
                "update_info",
                status=502,
            ) from e
        with self._lock:
            if self._epoch != epoch or self._pending is None:
                raise _replaced()
            self._pending.update(received)
        return {"status": "ok", "received": len(received)}

    def finish(self, group: str | None = None) -> dict[str, Any]:
        """Load every tensor received since ``start``; the new ``policy_version``.

        Raises:
            RequestError: no update was started, the group was replaced (409), or what
                was received leaves model weights out or is not finite (nothing is
                loaded then).
        """
        with self._lock:
            self._need_group(group)
            if self._pending is None:
                raise RequestError(
                    "finish_weight_update before start_weight_update", None, code="not_started"
                )
            state, self._pending = self._pending, None
        if not state:
            raise RequestError("finish_weight_update: no weights were received", None)
        try:
            version = self.policy.load_weights(state)
        except ValueError as e:
            raise RequestError(str(e), None) from e
        log.info("weight transfer: %d tensors loaded, policy_version %s", len(state), version)
        return {"status": "ok", "policy_version": version}

    def abandon(self) -> None:
        """Drop the group (a request that can never be followed by its broadcast)."""
        with self._lock:
            self._drop()

    def close(self) -> None:
        self.abandon()

    def _need_group(self, named: str | None = None) -> Group:
        if self._group is None:
            raise RequestError(
                "no weight-transfer group: call init_weight_transfer_engine first (a server "
                "that restarted has none)",
                None,
                code="not_initialized",
            )
        if named is not None and named != self._joined:
            raise RequestError(
                f"the weight-transfer group is now {self._joined}, not {named}: another "
                "trainer joined since; join again (init_weight_transfer_engine)",
                None,
                status=409,
                code="group_changed",
            )
        return self._group

    def _drop(self) -> None:
        """Forget the group (its sockets close with it: the peers' pending ops fail) and
        any update in progress; a new epoch. Caller holds ``_lock``."""
        had = self._group is not None or self._pending is not None
        self._group = None
        self._joined = None
        self._pending = None
        self._epoch += 1
        if had and self.on_abandon is not None:
            self.on_abandon()

    def _receive(
        self,
        group: Group,
        names: Sequence[str],
        dtypes: Sequence[torch.dtype],
        shapes: Sequence[Sequence[int]],
        packed: bool,
        bucket_bytes: int,
    ) -> Iterator[tuple[str, torch.Tensor]]:
        timeout = datetime.timedelta(seconds=self.timeout_s)
        if not packed:
            for name, dtype, shape in zip(names, dtypes, shapes, strict=True):
                t = torch.empty(shape, dtype=dtype)
                group.broadcast(t, 0).wait(timeout)
                yield name, t
            return
        sizes = [nbytes(d, s) for d, s in zip(dtypes, shapes, strict=True)]
        for bucket in buckets(sizes, bucket_bytes):
            flat = torch.empty(sum(sizes[i] for i in bucket), dtype=torch.uint8)
            group.broadcast(flat, 0).wait(timeout)
            parts = unpack(flat, [dtypes[i] for i in bucket], [shapes[i] for i in bucket])
            yield from zip((names[i] for i in bucket), parts, strict=True)


def _replaced() -> RequestError:
    return RequestError(
        "the weight-transfer group was replaced during this update (another trainer "
        "joined); join again",
        None,
        status=409,
        code="group_changed",
    )


def _local_address(host: str, port: int) -> str:
    """The address of this machine's interface that reaches ``host`` (a UDP connect picks
    the route and sends nothing)."""
    family, kind, proto, _, addr = socket.getaddrinfo(host, port, type=socket.SOCK_DGRAM)[0]
    with socket.socket(family, kind, proto) as s:
        s.connect(addr)
        return str(s.getsockname()[0])
