"""Wait on state, never on a sleep: poll a predicate until it holds or a bound passes.

A test that sleeps and then asserts either waits too long on a fast machine or fails on a
busy one; ``wait_until`` returns as soon as the state is there and fails with what it was
waiting for when it never comes.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")


def wait_until(check: Callable[[], T], *, timeout: float = 30.0, what: str = "the condition") -> T:
    """``check()``'s first truthy result, polled every few milliseconds (up to 0.2 s).

    Raises:
        TimeoutError: ``check`` stayed falsy for ``timeout`` seconds (names ``what``).
    """
    deadline = time.monotonic() + timeout
    pause = 0.005
    while True:
        got = check()
        if got:
            return got
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not within {timeout:g} s")
        time.sleep(pause)
        pause = min(0.2, pause * 2)


async def await_until(
    check: Callable[[], T | Awaitable[T]], *, timeout: float = 30.0, what: str = "the condition"
) -> T:
    """``wait_until`` for the event loop: ``check`` may be a coroutine function.

    Raises:
        TimeoutError: ``check`` stayed falsy for ``timeout`` seconds (names ``what``).
    """
    deadline = time.monotonic() + timeout
    pause = 0.005
    while True:
        got = check()
        if isinstance(got, Awaitable):
            got = await got
        if got:
            return got
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not within {timeout:g} s")
        await asyncio.sleep(pause)
        pause = min(0.2, pause * 2)
