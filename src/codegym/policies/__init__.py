"""Policies: what samples completions for environments, rollouts and evals.

``Policy`` is the one-method contract (``generate(prompt, params) -> list[Generation]``,
exactly ``params.n`` of them, or ``PolicyError``). Implementations: ``OpenAIPolicy`` (any
OpenAI-compatible server) and ``ReplayPolicy`` (completions from a samples file).
``extract_code`` / ``outcome_for_generation`` turn a generation into code to score, or into
the model outcomes ``no_code`` / ``truncated``. ``OpenAIPolicy`` loads on first use: aiohttp
takes about 0.2 s to import, which commands that never call a server
should not pay.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from codegym._lazy import lazy_package
from codegym.policies.errors import PolicyError
from codegym.policies.extract import extract_code, outcome_for_generation
from codegym.policies.policy import Generation, Message, Policy, Prompt, SamplingParams
from codegym.policies.replay import ReplayPolicy
from codegym.policies.retry import Hedge, Retry

if TYPE_CHECKING:  # what type checkers see; held to _LAZY by tests/test_exported_members.py
    from codegym.policies.openai_policy import OpenAIPolicy as OpenAIPolicy

_LAZY = {"OpenAIPolicy": "codegym.policies.openai_policy"}

# the eager names are listed for type checkers (an explicit re-export); the lazy ones follow
__all__ = [
    "Generation",
    "Hedge",
    "Message",
    "Policy",
    "PolicyError",
    "Prompt",
    "ReplayPolicy",
    "Retry",
    "SamplingParams",
    "extract_code",
    "outcome_for_generation",
]
__getattr__, __dir__, _lazy_names = lazy_package(__name__, _LAZY)
__all__ += _lazy_names
