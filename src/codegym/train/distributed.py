"""Data-parallel training with ``torch.distributed``: DDP, over gloo on CPU (NCCL on GPUs).

    torchrun --standalone --nproc-per-node 2 -m codegym.cli train CONFIG
    codegym train CONFIG --nproc-per-node 2          # the same, launched for you

Each process (rank) holds the whole model, runs its share of every step's tasks
(``World.shard``: rank r takes tasks r, r+size, ...; no task runs twice, none is left out),
and trains on its own trajectories. ``DistributedDataParallel`` averages the gradients, and
the trainer weights every rank's loss by the global token (or sequence) count, so the
update equals one process training on the whole global batch, up to floating-point
rounding (``tests/train/test_distributed.py`` checks 2 processes against 1). Rank 0 alone
writes metrics, checkpoints and the final model; every rank resumes from the same
checkpoint.

Beyond one device per replica (a model that does not fit): FSDP (``torch.distributed.fsdp``
``fully_shard``) would shard parameters, gradients and optimizer state across ranks. The
trainer would then wrap the model with it instead of DDP, gather a full state dict for
checkpoints and for the weight push (``get_model_state_dict`` with full, CPU-offloaded
options, on rank 0), and rebuild the optimizer after wrapping; the loss weighting here
stays as it is. Not done: nothing here needs it, and this machine has no GPU to test it on.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import torch
import torch.distributed as dist

T = TypeVar("T")

__all__ = ["World", "current_world"]


@dataclass(frozen=True)
class World:
    """Which process this is among how many (1 of 1 when not launched distributed)."""

    rank: int = 0
    size: int = 1

    @property
    def leader(self) -> bool:
        """The rank that writes files (metrics, checkpoints, the final model)."""
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.size > 1

    def shard(self, items: Sequence[T]) -> list[T]:
        """This rank's share: every ``size``-th item from position ``rank``."""
        return list(items[self.rank :: self.size])

    def sum(self, values: Sequence[float]) -> list[float]:
        """Element-wise sum over ranks (float64, so counts stay exact)."""
        if not self.distributed:
            return list(values)
        t = torch.tensor(list(values), dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.SUM)
        return [float(x) for x in t]

    def max(self, value: int) -> int:
        if not self.distributed:
            return value
        t = torch.tensor([value], dtype=torch.int64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return int(t.item())

    def gather(self, obj: Any) -> list[Any]:
        """Every rank's ``obj``, in rank order (picklable objects)."""
        if not self.distributed:
            return [obj]
        out: list[Any] = [None] * self.size
        dist.all_gather_object(out, obj)
        return out

    def barrier(self) -> None:
        if self.distributed:
            dist.barrier()

    def store(self) -> Any:
        """The process group's key-value store (``torch.distributed.Store``; set, get and
        check by any rank at any time, no collective), or None in a single process."""
        if not self.distributed:
            return None
        return dist.distributed_c10d._get_default_store()


def current_world() -> World:
    """The world this process was launched into; joins the process group on first use.

    ``torchrun`` sets ``WORLD_SIZE``, ``RANK`` and the rendezvous variables; without them
    this is a single process. The backend is gloo (CPU tensors), which is what the trainer
    all-reduces here.
    """
    size = int(os.environ.get("WORLD_SIZE", "1"))
    if size <= 1:
        return World()
    if not dist.is_initialized():
        dist.init_process_group("gloo")
    return World(rank=dist.get_rank(), size=dist.get_world_size())
