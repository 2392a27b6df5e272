"""What ``RemoteSandbox`` (``client``) and its ``Batcher`` (``_batch``) share: the client's
policies, its view of one instance of the pool, and the part of the client a batcher uses.
Both import this module and neither imports the other back (``client`` imports ``_batch``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import aiohttp

from codegym.sandbox import ExecResult, SandboxInputError
from codegym.service.models import MAX_BATCH


@dataclass(frozen=True)
class ServiceRetry:
    """How hard a call tries before it reports ``INFRA``."""

    attempts: int = 8
    """Failed requests per call (connection errors, timeouts, 5xx), over all instances."""
    patience_s: float = 300.0
    """How long a call keeps coming back after 429/503 (busy or draining) answers."""
    backoff_s: float = 0.1
    """First back-off of an instance that failed; doubles per failure."""
    max_backoff_s: float = 5.0
    """Cap on one back-off, and on a ``Retry-After`` honoured."""
    slack_s: float = 30.0
    """Added to a run's wall limit for its request timeout (queueing, transfer)."""
    connect_s: float = 2.0
    """Connect timeout."""


@dataclass(frozen=True)
class Batching:
    """When concurrent ``run``/``run_python`` calls share one ``/v1/batch`` request (see
    ``codegym.service._batch``): once this client has ``per_worker`` runs per worker of
    the pool on the wire, further calls wait and leave together when it is below that
    again, at most ``max_size`` to a request; after ``wait_s`` they leave anyway, as far
    as the instances admit them."""

    per_worker: float = 2.0
    max_size: int = 32
    wait_s: float = 0.5

    def __post_init__(self) -> None:
        if self.per_worker < 1 or not 1 <= self.max_size <= MAX_BATCH or self.wait_s < 0:
            raise SandboxInputError(
                f"Batching(per_worker={self.per_worker}, max_size={self.max_size}, "
                f"wait_s={self.wait_s}): need per_worker >= 1, 1 <= max_size <= "
                f"{MAX_BATCH} and wait_s >= 0"
            )


@dataclass
class Instance:
    """One service URL of the pool, as this client sees it."""

    url: str
    in_flight: int = 0
    """Runs this client has on the wire to it."""
    failures: int = 0
    unavailable_until: float = 0.0
    workers: int = 0
    """As its last answer said (0: not known yet)."""
    admits: int = 0
    """Runs it admits before answering 429, as its last answer said."""


class Pool(Protocol):
    """The client a ``Batcher`` batches for (``RemoteSandbox``, checked by mypy where it
    makes its batcher): its pool, its HTTP session, and its one-run-per-request path."""

    @property
    def retry(self) -> ServiceRetry: ...

    @property
    def _instances(self) -> Sequence[Instance]: ...

    def _session(self) -> aiohttp.ClientSession: ...

    def _down(self, inst: Instance) -> None: ...

    async def _single(
        self,
        path: str,
        body: bytes,
        wall_s: float,
        pin: Instance | None = None,
        key: str | None = None,
    ) -> ExecResult: ...
