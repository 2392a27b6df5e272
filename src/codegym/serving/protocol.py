"""Request bodies of the model server, validated with pydantic (the OpenAI API subset).

Fields follow the OpenAI API plus vLLM's extensions (``return_token_ids``,
``return_tokens_as_token_ids``). Fields not declared here are kept (``extra="allow"``) so
that the engine can judge them by name rather than pydantic dropping them unseen: the
bookkeeping fields OpenAI clients send (``user``, ``store``, ``metadata``, … ,
``codegym.serving.engine.IGNORED``) are ignored because they change nothing in an answer;
vLLM's sampling extras (``top_k``, ``min_p``, ``repetition_penalty``) and
``parallel_tool_calls`` pass only at their "off" value; every other unknown field, and
declared ones that are not implemented (non-zero penalties, a ``response_format`` other
than text, a forced ``tool_choice``), is refused with a 400 (code ``unsupported``) that
names it. Tools' ``strict`` flag (sent by default by some clients) is not enforced: call
arguments are parsed from what the model wrote, never constrained to the schema.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

MAX_N = 128


class _Sampling(BaseModel):
    model_config = ConfigDict(extra="allow")

    model: str
    """The served model's name (``GET /v1/models``)."""
    max_tokens: int | None = Field(default=None, ge=1)
    """Most tokens per sample (finish ``length``). A prompt plus ``max_tokens`` past the
    model's context is refused (``context_length_exceeded``), never clipped; unset, chat
    samples up to the context and completions 16 tokens."""
    temperature: float = Field(default=1.0, ge=0.0, le=100.0)
    """0 is greedy."""
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    n: int = Field(default=1, ge=1, le=MAX_N)
    seed: int | None = None
    """Same seed, same request: same samples."""
    stop: str | list[str] | None = None
    """Stop strings: the text ends before the first; ``token_ids`` keep the token that hit it."""
    stream: bool = False
    stream_options: dict[str, Any] | None = None
    """``{"include_usage": true}``: a last chunk with the usage (other keys are refused)."""
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    response_format: dict[str, Any] | None = None
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
    max_tokens: int | None = Field(default=None, ge=0)
    """0 (with ``echo``): score the prompt, sample nothing."""
    logprobs: int | None = Field(default=None, ge=0, le=20)
    """Report logprobs, with this many alternatives per position."""
    echo: bool = False
    """Prepend the prompt to each choice (its logprobs too: likelihood evals)."""


class ChatRequest(_Sampling):
    """``POST /v1/chat/completions``."""

    messages: list[dict[str, Any]] = Field(min_length=1)
    logprobs: bool = False
    top_logprobs: int | None = Field(default=None, ge=0, le=20)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    tools: list[dict[str, Any]] | None = None
    """Function tools; calls come back as ``tool_calls`` (``codegym.serving.tools``)."""
    tool_choice: str | dict[str, Any] | None = None
    """``auto`` (the default with tools) or ``none``; a forced call is refused."""


class WeightsRequest(BaseModel):
    """``POST /v1/weights``: load new weights from the server's disk."""

    model_config = ConfigDict(extra="forbid")

    path: str = Field(min_length=1)
    """A ``save_pretrained`` folder or a ``.safetensors`` file readable by the server."""


class ReloadRequest(BaseModel):
    """``POST /v1/reload``: reload the weights from the served model folder (or ``path``)."""

    model_config = ConfigDict(extra="forbid")

    path: str | None = None


class TransferInit(BaseModel):
    """``init_info`` of ``POST /init_weight_transfer_engine`` (vLLM's fields)."""

    model_config = ConfigDict(extra="forbid")

    master_address: str = Field(min_length=1)
    """Where the trainer (rank 0) hosts the group's store."""
    master_port: int = Field(ge=1, le=65535)
    rank_offset: int = Field(default=1, ge=1)
    """This server's rank."""
    world_size: int = Field(ge=2)


class InitTransferRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    init_info: TransferInit


class StartUpdateRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    is_checkpoint_format: bool = True


class TransferUpdate(BaseModel):
    """``update_info`` of ``POST /update_weights``: the tensors rank 0 broadcasts next."""

    model_config = ConfigDict(extra="forbid")

    names: list[str] = Field(min_length=1)
    dtype_names: list[str]
    shapes: list[list[int]]
    packed: bool = False
    packed_buffer_size_bytes: int = Field(default=64 << 20, ge=1 << 10)
    """Bucket size of a packed broadcast (a codegym field; the sender must use the same)."""

    @model_validator(mode="after")
    def _aligned(self) -> TransferUpdate:
        if not len(self.names) == len(self.dtype_names) == len(self.shapes):
            raise ValueError(
                f"names ({len(self.names)}), dtype_names ({len(self.dtype_names)}) and "
                f"shapes ({len(self.shapes)}) must have one entry per tensor"
            )
        if len(set(self.names)) != len(self.names):
            raise ValueError("names: a tensor is named twice")
        if any(d < 0 for s in self.shapes for d in s):
            raise ValueError("shapes: a dimension is negative")
        return self


class UpdateWeightsRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    update_info: TransferUpdate


class ResponsesRequest(BaseModel):
    """``POST /v1/responses``: the Responses API, answered by the chat engine."""

    model_config = ConfigDict(extra="allow")

    model: str
    input: str | list[dict[str, Any]]
    """A user message, or a list of items: messages, ``function_call``, ``function_call_output``."""
    instructions: str | None = None
    """A system message before the input."""
    max_output_tokens: int | None = Field(default=None, ge=1)
    temperature: float = Field(default=1.0, ge=0.0, le=100.0)
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    tools: list[dict[str, Any]] | None = None
    """Function tools (``{"type": "function", "name", "parameters"}``); no built-in tools."""
    tool_choice: str | dict[str, Any] | None = None
    stream: bool = False
    previous_response_id: str | None = None
    """Refused: this server keeps no responses (send the whole input)."""
    text: dict[str, Any] | None = None
    """Only ``{"format": {"type": "text"}}`` is honoured (other formats, ``verbosity``:
    refused)."""
