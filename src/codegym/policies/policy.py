"""The policy contract: a prompt and sampling parameters in, ``n`` generations out.

``Policy`` is a one-method protocol so that an OpenAI-compatible server, a local model and
a replay file are interchangeable to environments, the rollout engine and the eval runner.
``SamplingParams.digest`` is part of every result key, so it covers every field that can
change what a model writes, in a canonical form.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol, runtime_checkable

from codegym.policies.errors import PolicyConfigError

Message = dict[str, Any]
"""One OpenAI chat message (``{"role": ..., "content": ...}``, tool calls allowed)."""
Prompt = str | Sequence[Message]
"""Raw text for the completions API, or a conversation for the chat API."""


@dataclass(frozen=True)
class SamplingParams:
    """How to sample; validated on construction so a bad value fails before any request."""

    temperature: float = 0.8
    """Softmax temperature; 0 is greedy."""
    top_p: float = 1.0
    """Nucleus sampling mass, in (0, 1]."""
    max_tokens: int = 512
    """Most tokens to generate per sample; a sample cut here finishes with ``"length"``."""
    n: int = 1
    """Samples per prompt; ``generate`` returns exactly this many."""
    seed: int | None = None
    """Sampling seed passed to the server (servers may ignore it); None: unseeded."""
    stop: tuple[str, ...] = field(default=())
    """Stop sequences; generation ends before the first one (finish reason ``"stop"``)."""

    def __post_init__(self) -> None:
        if not (math.isfinite(self.temperature) and self.temperature >= 0):
            raise PolicyConfigError(
                f"SamplingParams.temperature={self.temperature!r}: use a value >= 0"
            )
        if not (0 < self.top_p <= 1):
            raise PolicyConfigError(f"SamplingParams.top_p={self.top_p!r}: use a value in (0, 1]")
        if (
            isinstance(self.max_tokens, bool)
            or not isinstance(self.max_tokens, int)
            or self.max_tokens < 1
        ):
            raise PolicyConfigError(
                f"SamplingParams.max_tokens={self.max_tokens!r}: use an int >= 1"
            )
        if isinstance(self.n, bool) or not isinstance(self.n, int) or self.n < 1:
            raise PolicyConfigError(f"SamplingParams.n={self.n!r}: use an int >= 1")
        if self.seed is not None and (
            isinstance(self.seed, bool) or not isinstance(self.seed, int)
        ):
            raise PolicyConfigError(f"SamplingParams.seed={self.seed!r}: use an int or None")
        if isinstance(self.stop, str) or not all(isinstance(s, str) and s for s in self.stop):
            raise PolicyConfigError(
                f"SamplingParams.stop={self.stop!r}: use a tuple of non-empty strings, "
                "e.g. stop=('\\ndef ',)"
            )

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["stop"] = list(self.stop)
        return d

    def digest(self) -> str:
        """sha256 of the canonical JSON of every field (part of result keys)."""
        body = self.to_dict()
        # floats are written via repr so 0.8 and 0.80000001 differ but 1 and 1.0 agree
        body["temperature"] = repr(float(self.temperature))
        body["top_p"] = repr(float(self.top_p))
        raw = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        return hashlib.sha256(raw.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class Generation:
    """One sample from a policy, with whatever token-level detail the server returned."""

    text: str
    """The generated text (for chat: the assistant message content, '' if none)."""
    finish_reason: str
    """Why generation ended: ``"stop"``, ``"length"``, ``"tool_calls"``, ..."""
    tokens_in: int | None = None
    """Prompt tokens (from the server's usage), when known."""
    tokens_out: int | None = None
    """Generated tokens for this sample, when known."""
    model_s: float = 0.0
    """Wall seconds of the request that produced it (shared by the ``n`` samples of it)."""
    prompt_token_ids: tuple[int, ...] | None = None
    """The prompt exactly as the server tokenized it (vLLM ``return_token_ids``)."""
    token_ids: tuple[int, ...] | None = None
    """The generated tokens exactly as sampled, when the server returns them."""
    logprobs: tuple[float, ...] | None = None
    """Log-probability of each generated token, aligned with ``token_ids``."""
    policy_version: int | None = None
    """Weights version that produced it: set by trainable policies and by servers that
    report one (``codegym serve-model``'s ``policy_version``); None otherwise (vLLM)."""
    tool_calls: tuple[dict[str, Any], ...] = ()
    """Chat tool calls (``{"id", "type", "function": {"name", "arguments"}}``), if any."""


@runtime_checkable
class Policy(Protocol):
    """Anything that samples completions."""

    name: str
    """Shown in summaries and traces (the model name for servers)."""

    async def generate(self, prompt: Prompt, params: SamplingParams) -> list[Generation]:
        """Return exactly ``params.n`` generations.

        Raises:
            PolicyError: the policy cannot produce them (after its own retries).
        """
        ...
