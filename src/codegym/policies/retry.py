"""When and how long to wait before retrying a request (no I/O here).

Retried: 408, 409, 429 and 5xx answers, timeouts, refused or dropped connections, and
answers that are not the OpenAI shape (a proxy that garbles a body is usually transient).
Never retried: any other 4xx, since the same request would fail the same way.

The wait before attempt ``k + 1`` is "full jitter" exponential backoff,
``uniform(0, min(max_s, base_s × 2**k))`` (AWS architecture blog), which spreads a burst of
clients that failed together; without jitter it is the cap itself. A ``Retry-After`` header
from the server wins over the backoff (it knows when it will have capacity), still capped at
``max_s`` so that one misconfigured server cannot stall a run for hours.

A *fast* failure (a 5xx without ``Retry-After``, a dropped connection, a garbled body: the
server answered, just badly) gets its first retry at once when ``Retry.at_once`` is set and
the caller judges the server otherwise healthy (``OpenAIPolicy``: most recent attempts
succeeded); backoff still spaces the second and later retries, so a server that keeps
failing is not hammered. A timeout, a 429 or 408, or any answer with ``Retry-After`` is
never fast: the server is busy or asked us to wait.
"""

from __future__ import annotations

import email.utils
import random
import time
from dataclasses import dataclass

from codegym.policies.errors import PolicyConfigError

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
    at_once: bool = True
    """Send the first retry of a fast failure on a healthy server without waiting."""

    def __post_init__(self) -> None:
        if (
            isinstance(self.attempts, bool)
            or not isinstance(self.attempts, int)
            or self.attempts < 1
        ):
            raise PolicyConfigError(
                f"Retry.attempts={self.attempts!r}: use an int >= 1 (1 = no retries)"
            )
        if self.base_s < 0 or self.max_s < 0:
            raise PolicyConfigError(
                f"Retry(base_s={self.base_s}, max_s={self.max_s}): use values >= 0"
            )

    def delay(
        self,
        retry_index: int,
        retry_after_s: float | None = None,
        rng: random.Random | None = None,
        *,
        fast: bool = False,
    ) -> float:
        """Seconds to wait before retry number ``retry_index`` (0 for the first retry);
        ``fast``: the failure was fast and the server otherwise healthy (module doc)."""
        if retry_after_s is not None:
            return max(0.0, min(self.max_s, retry_after_s))
        if fast and self.at_once and retry_index == 0:
            return 0.0
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


@dataclass(frozen=True)
class Hedge:
    """When to send more copies of a request: when it is slow, and at the end of a run.

    *Hedging*: a request still unanswered ``factor`` times the ``quantile`` of the recent
    answers' latencies (the "usual latency"; at least ``min_s``) is sent once more. A hang
    then costs about one usual latency more instead of the whole ``timeout_s`` plus a
    retry. At most ``budget`` × the policy's concurrency hedges are in flight at once.

    *Tail copies*: at the end of a run the last requests leave most of the concurrency idle,
    and a run ends on its slowest retried request. Once no first attempt has been sent for
    ``tail_quiet`` × the usual latency, and fewer copies are in flight (originals included)
    than the most requests in flight since the policy was last idle (at most its
    concurrency), that idle room is filled with copies of the requests in flight (fewest
    copies first, at most ``tail`` copies of one attempt in all), so a request that fails in one
    copy is answered by another instead of waiting one more latency for its retry. A copy
    never takes room a request is waiting for: none is sent while a request waits for a
    slot, copies never delay first attempts, and a caller that sends one request at a time
    gets none.

    For both, the first good answer wins and the other copies are cancelled; when every
    copy fails, the original's failure is the outcome, as it would be without copies.
    Neither is used before ``warmup`` answers have been seen (until then "usual" is
    unknown).
    """

    factor: float = 2.0
    quantile: float = 0.95
    min_s: float = 0.05
    budget: float = 0.1
    warmup: int = 32
    window: int = 512
    """How many recent latencies "usual" is taken over."""
    tail: int = 1
    """Most copies of one request attempt (the original included) that tail filling
    sends, in all; 1 (the default) turns it off. Opt in where a copy costs nothing and
    latency is not set by the answer's length: a review measured +93–136% requests on
    fault-free runs whose latency follows output length, with no copy winning (a copy of
    a long answer starts later and takes as long)."""
    tail_quiet: float = 0.25
    """Tail filling starts after no first attempt for this many usual latencies."""
    seeded: bool = False
    """Copy seeded requests too, not only greedy ones. A copy of a sampled request is the
    same sample only where the server honours the seed exactly (serve-model; vLLM nearly);
    elsewhere (OpenAI's seeds are best effort) keeping whichever copy answers first
    favours short completions, a biased sample."""

    def __post_init__(self) -> None:
        if not (self.factor >= 1 and 0 < self.quantile <= 1 and self.min_s >= 0):
            raise PolicyConfigError(
                f"Hedge(factor={self.factor}, quantile={self.quantile}, min_s={self.min_s}): "
                "use factor >= 1, a quantile in (0, 1], min_s >= 0"
            )
        if not 0 <= self.budget <= 1 or self.warmup < 1 or self.window < self.warmup:
            raise PolicyConfigError(
                f"Hedge(budget={self.budget}, warmup={self.warmup}, window={self.window}): "
                "use a budget in [0, 1] and 1 <= warmup <= window"
            )
        if isinstance(self.tail, bool) or not isinstance(self.tail, int) or self.tail < 1:
            raise PolicyConfigError(
                f"Hedge(tail={self.tail!r}): use an int >= 1 (1 = no tail copies)"
            )
        if not self.tail_quiet >= 0:
            raise PolicyConfigError(f"Hedge(tail_quiet={self.tail_quiet!r}): use a value >= 0")


class Latencies:
    """The last ``Hedge.window`` answer latencies, and the hedge delay they give."""

    def __init__(self, hedge: Hedge) -> None:
        self.hedge = hedge
        self._ring: list[float] = []
        self._next = 0
        self._count = 0
        self._delay: float | None = None
        self._usual: float | None = None

    def add(self, seconds: float) -> None:
        self._count += 1
        if len(self._ring) < self.hedge.window:
            self._ring.append(seconds)
        else:
            self._ring[self._next] = seconds
            self._next = (self._next + 1) % self.hedge.window
        # recomputed every 16 answers: sorting 512 floats per answer would cost more
        # than the request
        if len(self._ring) >= self.hedge.warmup and (self._delay is None or self._count % 16 == 0):
            ordered = sorted(self._ring)
            q = ordered[min(len(ordered) - 1, int(self.hedge.quantile * len(ordered)))]
            self._usual = q
            self._delay = max(self.hedge.min_s, self.hedge.factor * q)

    def delay(self) -> float | None:
        """Seconds after which to hedge a request; None before ``warmup`` answers."""
        return self._delay

    def usual(self) -> float | None:
        """The usual latency (the ``quantile`` of recent answers); None before ``warmup``."""
        return self._usual
