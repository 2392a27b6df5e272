"""When and how long to wait before retrying a request (no I/O here).

Retried: 408, 409, 429 and 5xx answers, timeouts, refused or dropped connections, and
answers that are not the OpenAI shape (a proxy that garbles a body is usually transient).
Never retried: any other 4xx, since the same request would fail the same way.

The wait before attempt ``k + 1`` is "full jitter" exponential backoff,
``uniform(0, min(max_s, base_s × 2**k))`` (AWS architecture blog), which spreads a burst of
clients that failed together; without jitter it is the cap itself. A ``Retry-After`` header
from the server wins over the backoff (it knows when it will have capacity), still capped at
``max_s`` so that one misconfigured server cannot stall a run for hours.
"""

from __future__ import annotations

import email.utils
import random
import time
from dataclasses import dataclass

RETRYABLE_STATUS: frozenset[int] = frozenset({408, 409, 429})


def is_retryable_status(status: int) -> bool:
    """True for statuses where the same request may succeed later."""
    return status in RETRYABLE_STATUS or 500 <= status <= 599


@dataclass(frozen=True)
class Retry:
    """Retry budget and backoff for one policy request."""

    attempts: int = 5
    """Total tries including the first; 1 disables retrying."""
    base_s: float = 0.5
    """Backoff scale: the k-th retry waits up to ``base_s × 2**k``."""
    max_s: float = 20.0
    """Longest single wait, also the cap on a server's Retry-After."""
    jitter: bool = True
    """Randomize each wait in [0, cap] (full jitter); False waits the cap exactly."""

    def __post_init__(self) -> None:
        if (
            isinstance(self.attempts, bool)
            or not isinstance(self.attempts, int)
            or self.attempts < 1
        ):
            raise ValueError(f"Retry.attempts={self.attempts!r}: use an int >= 1 (1 = no retries)")
        if self.base_s < 0 or self.max_s < 0:
            raise ValueError(f"Retry(base_s={self.base_s}, max_s={self.max_s}): use values >= 0")

    def delay(
        self, retry_index: int, retry_after_s: float | None = None, rng: random.Random | None = None
    ) -> float:
        """Seconds to wait before retry number ``retry_index`` (0 for the first retry)."""
        if retry_after_s is not None:
            return max(0.0, min(self.max_s, retry_after_s))
        cap = min(self.max_s, self.base_s * (2.0**retry_index))
        if not self.jitter:
            return cap
        return (rng or random).uniform(0.0, cap)


def parse_retry_after(value: str | None, now: float | None = None) -> float | None:
    """Seconds from a ``Retry-After`` header (delta-seconds or an HTTP date); None if absent/bad."""
    if value is None:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))
