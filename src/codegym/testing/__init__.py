"""Test and benchmark helpers that are real components, not mocks.

``FakeOpenAIServer`` is an OpenAI-compatible HTTP server on loopback whose latency and
faults the caller controls (see ``codegym.testing.fake_openai``); ``wait_until`` and
``await_until`` wait on state with a bound instead of sleeping (``codegym.testing.waits``).
The names load on first use, so ``python -m codegym.testing.fake_openai`` does not import
the module twice.
"""

from typing import TYPE_CHECKING

from codegym._lazy import lazy_exports

if TYPE_CHECKING:
    from codegym.testing.fake_openai import FakeOpenAIServer, FakeReply, Fault, default_responder
    from codegym.testing.waits import await_until, wait_until

__all__ = [
    "FakeOpenAIServer",
    "FakeReply",
    "Fault",
    "await_until",
    "default_responder",
    "wait_until",
]
__getattr__ = lazy_exports(
    __name__,
    {
        **dict.fromkeys(("FakeOpenAIServer", "FakeReply", "Fault", "default_responder"),
                        "codegym.testing.fake_openai"),
        "await_until": "codegym.testing.waits",
        "wait_until": "codegym.testing.waits",
    },
)  # fmt: skip
