"""The wire of vLLM-style weight transfer, shared by the trainer's end
(``codegym.train.weights_collective``) and the server's (``codegym.serving.
weight_transfer``): the gloo group, its rendezvous store, and the packed layout.

It sits below both (the trainer may not import the server's package) and needs only
``torch.distributed``.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterator, Sequence
from typing import Any

import torch
import torch.distributed as dist

DEFAULT_BUCKET_BYTES = 64 << 20
GROUP_HEADER = "x-codegym-transfer-group"
"""Names the group a start or update is meant for (``ADDRESS:PORT`` of its store); vLLM
ignores it, this server refuses a stale one (``group_changed``)."""

_c10d: Any = dist
"""torch's stubs export neither the gloo group's class nor the store's."""
Group = Any
"""A ``torch.distributed.ProcessGroupGloo``."""


def new_store(address: str, port: int, world_size: int, *, master: bool, timeout_s: float) -> Any:
    """The group's rendezvous: a ``TCPStore`` that rank 0 hosts (``port`` 0: any free
    port, read back from ``.port``) and the other ranks connect to."""
    return _c10d.TCPStore(
        address,
        port,
        world_size,
        is_master=master,
        timeout=datetime.timedelta(seconds=timeout_s),
        wait_for_workers=False,
    )


def gloo_group(store: Any, rank: int, world_size: int, address: str, timeout_s: float) -> Group:
    """A gloo group over ``store`` whose sockets bind to ``address`` (an interface the
    other ranks reach; never a guess from the host name). Blocks until every rank joined."""
    gloo = _c10d.ProcessGroupGloo
    options = gloo._Options()
    options._devices = [gloo.create_device(hostname=address)]
    options._timeout = datetime.timedelta(seconds=timeout_s)
    return gloo(store, rank, world_size, options)


def buckets(sizes: Sequence[int], limit: int) -> list[list[int]]:
    """Indices of tensors grouped, in order, into buckets of at most ``limit`` bytes (a
    bigger tensor gets a bucket of its own). Sender and receiver compute the same."""
    out: list[list[int]] = []
    used = limit
    for i, size in enumerate(sizes):
        if used + size > limit or not out:
            out.append([])
            used = 0
        out[-1].append(i)
        used += size
    return out


def pack(tensors: Sequence[torch.Tensor]) -> torch.Tensor:
    """The tensors' bytes end to end, as one uint8 tensor."""
    return torch.cat([t.contiguous().view(-1).view(torch.uint8) for t in tensors])


def unpack(
    flat: torch.Tensor, dtypes: Sequence[torch.dtype], shapes: Sequence[Sequence[int]]
) -> Iterator[torch.Tensor]:
    at = 0
    for dtype, shape in zip(dtypes, shapes, strict=True):
        n = nbytes(dtype, shape)
        # A copy: a slice's byte offset need not suit the dtype's alignment (a bf16 tensor
        # of odd length before an fp32 one).
        yield flat[at : at + n].clone().view(dtype).view(*shape)
        at += n


def nbytes(dtype: torch.dtype, shape: Sequence[int]) -> int:
    n = dtype.itemsize
    for d in shape:
        n *= d
    return n


JOIN_TIMEOUT_S = 30.0
"""How long joining a trainer's group may take (its store answers at once when it is up)."""
