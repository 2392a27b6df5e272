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

from codegym._lazy import lazy_exports
from codegym.policies.errors import PolicyError
from codegym.policies.extract import extract_code, outcome_for_generation

if TYPE_CHECKING:
    from codegym.policies.openai_policy import OpenAIPolicy
from codegym.policies.policy import Generation, Message, Policy, Prompt, SamplingParams
from codegym.policies.replay import ReplayPolicy
from codegym.policies.retry import Hedge, Retry

__all__ = [
    "Generation",
    "Hedge",
    "Message",
    "OpenAIPolicy",
    "Policy",
    "PolicyError",
    "Prompt",
    "ReplayPolicy",
    "Retry",
    "SamplingParams",
    "extract_code",
    "outcome_for_generation",
]


__getattr__ = lazy_exports(__name__, {"OpenAIPolicy": "codegym.policies.openai_policy"})
