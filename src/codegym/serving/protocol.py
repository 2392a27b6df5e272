"""Request bodies of the model server, validated with pydantic (the OpenAI API subset).

Fields follow the OpenAI API plus vLLM's extensions (``return_token_ids``,
``return_tokens_as_token_ids``). Unknown fields are ignored, as OpenAI-compatible servers
do, so clients that send extras (``user``, ``frequency_penalty=0``) keep working; fields
that would silently change the meaning of an answer but are not implemented (``stream``,
``echo``, ``best_of``, ``logit_bias``, ``tools``) are rejected by the engine with a 400.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

MAX_N = 128


class _Sampling(BaseModel):
    model_config = ConfigDict(extra="allow")

    model: str
    """The served model's name (``GET /v1/models``)."""
    max_tokens: int | None = Field(default=None, ge=1)
    """Most tokens per sample; clipped to the model's context (finish ``length``)."""
    temperature: float = Field(default=1.0, ge=0.0, le=100.0)
    """0 is greedy."""
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    n: int = Field(default=1, ge=1, le=MAX_N)
    seed: int | None = None
    """Same seed, same request: same samples."""
    stop: str | list[str] | None = None
    """Stop strings: the text ends before the first; ``token_ids`` keep the token that hit it."""
    stream: bool = False
    return_token_ids: bool = False
    """vLLM extension: add ``prompt_token_ids`` and ``token_ids``."""
    return_tokens_as_token_ids: bool = False
    """vLLM extension: logprob tokens read ``token_id:<id>``."""

    def stop_tuple(self) -> tuple[str, ...]:
        if self.stop is None:
            return ()
        return (self.stop,) if isinstance(self.stop, str) else tuple(self.stop)

    def extras(self) -> dict[str, Any]:
        return dict(self.model_extra or {})


class CompletionRequest(_Sampling):
    """``POST /v1/completions``."""

    prompt: str | list[int] | list[str] | list[list[int]]
    """Text, token ids, or a batch of either (choices are prompt-major)."""
    logprobs: int | None = Field(default=None, ge=0, le=20)
    """Report logprobs, with this many alternatives per position."""
    echo: bool = False


class ChatRequest(_Sampling):
    """``POST /v1/chat/completions``."""

    messages: list[dict[str, Any]] = Field(min_length=1)
    logprobs: bool = False
    top_logprobs: int | None = Field(default=None, ge=0, le=20)
    max_completion_tokens: int | None = Field(default=None, ge=1)


class WeightsRequest(BaseModel):
    """``POST /v1/weights``: load new weights from the server's disk."""

    model_config = ConfigDict(extra="forbid")

    path: str = Field(min_length=1)
    """A ``save_pretrained`` folder or a ``.safetensors`` file readable by the server."""


class ReloadRequest(BaseModel):
    """``POST /v1/reload``: reload the weights from the served model folder (or ``path``)."""

    model_config = ConfigDict(extra="forbid")

    path: str | None = None
