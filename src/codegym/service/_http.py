"""The service's HTTP connections: a cap on how many, and a deadline for each request head.

uvicorn arms no timer on a connection until its first request has been answered, so a
client that connects and sends nothing (or half a header) holds a connection, and its
file descriptor, forever: about a thousand such connections exhaust a default 1,024-fd
limit and lock out every caller with the token. ``GuardedProtocol`` closes a connection
whose request head (request line and headers) is not complete ``header_timeout_s`` after
it began, and answers 503 at once to a connection beyond ``max_connections``.

This bounds what one host can hold, not who may connect: in production put the service
behind a reverse proxy that limits connections per client and header time (nginx:
``limit_conn``, ``client_header_timeout``, ``client_body_timeout``; see deploy/README.md).
"""

from __future__ import annotations

import asyncio
import resource
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

_BODY = b'{"detail":"too many open connections; retry later"}'
BUSY = (
    b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n"
    b"retry-after: 1\r\nconnection: close\r\ncontent-length: %d\r\n\r\n%s" % (len(_BODY), _BODY)
)


def fd_headroom(reserve: int = 128) -> int:
    """Connections this process can hold: its open-file limit, raised to the hard limit
    where allowed, minus ``reserve`` for the sandbox's own pipes and files."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard > soft:
        want = 65536 if hard == resource.RLIM_INFINITY else min(hard, 65536)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
            soft = want
        except (ValueError, OSError):
            pass
    return max(16, soft - reserve)


def guarded(header_timeout_s: float, max_connections: int) -> type[HttpToolsProtocol]:
    """uvicorn's httptools protocol with a request-head deadline and a connection cap."""

    class GuardedProtocol(HttpToolsProtocol):
        _head_timer: asyncio.TimerHandle | None = None

        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            if len(self.connections) > max_connections:
                transport.write(BUSY)
                transport.close()
                return
            self._arm()

        def on_message_begin(self) -> None:
            super().on_message_begin()
            self._arm()

        def on_headers_complete(self) -> None:
            self._disarm()
            super().on_headers_complete()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def _arm(self) -> None:
            if self._head_timer is None:
                self._head_timer = self.loop.call_later(header_timeout_s, self._too_slow)

        def _disarm(self) -> None:
            if self._head_timer is not None:
                self._head_timer.cancel()
                self._head_timer = None

        def _too_slow(self) -> None:
            self._head_timer = None
            if not self.transport.is_closing():
                self.transport.close()

    return GuardedProtocol
