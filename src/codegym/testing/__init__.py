"""Test and benchmark helpers that are real components, not mocks.

``FakeOpenAIServer`` is an OpenAI-compatible HTTP server on loopback whose latency and
faults the caller controls (see ``codegym.testing.fake_openai``).
"""

from codegym.testing.fake_openai import FakeOpenAIServer, FakeReply, Fault, default_responder

__all__ = ["FakeOpenAIServer", "FakeReply", "Fault", "default_responder"]
