"""Test and benchmark helpers that are real components, not mocks.

``FakeOpenAIServer`` is an OpenAI-compatible HTTP server on loopback whose latency and
faults the caller controls (see ``codegym.testing.fake_openai``). The names load on first
use, so ``python -m codegym.testing.fake_openai`` does not import the module twice.
"""

from typing import TYPE_CHECKING

from codegym._lazy import lazy_exports

if TYPE_CHECKING:
    from codegym.testing.fake_openai import FakeOpenAIServer, FakeReply, Fault, default_responder

__all__ = ["FakeOpenAIServer", "FakeReply", "Fault", "default_responder"]
__getattr__ = lazy_exports(__name__, dict.fromkeys(__all__, "codegym.testing.fake_openai"))
