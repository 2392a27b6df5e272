"""Test and benchmark helpers that are real components, not mocks.

``FakeOpenAIServer`` is an OpenAI-compatible HTTP server on loopback whose latency and
faults the caller controls (see ``codegym.testing.fake_openai``); ``wait_until`` and
``await_until`` wait on state with a bound instead of sleeping (``codegym.testing.waits``).
The names load on first use, so ``python -m codegym.testing.fake_openai`` does not import
the module twice.
"""

from typing import TYPE_CHECKING

from codegym._lazy import lazy_package

if TYPE_CHECKING:  # what type checkers see; held to _LAZY by tests/test_exported_members.py
    from codegym.testing.fake_openai import FakeOpenAIServer as FakeOpenAIServer
    from codegym.testing.fake_openai import FakeReply as FakeReply
    from codegym.testing.fake_openai import Fault as Fault
    from codegym.testing.fake_openai import default_responder as default_responder
    from codegym.testing.waits import await_until as await_until
    from codegym.testing.waits import wait_until as wait_until

_LAZY = {
    "FakeOpenAIServer": "codegym.testing.fake_openai",
    "FakeReply": "codegym.testing.fake_openai",
    "Fault": "codegym.testing.fake_openai",
    "await_until": "codegym.testing.waits",
    "default_responder": "codegym.testing.fake_openai",
    "wait_until": "codegym.testing.waits",
}

__getattr__, __dir__, __all__ = lazy_package(__name__, _LAZY)
