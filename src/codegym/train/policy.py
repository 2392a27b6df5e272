"""The generating policy as the trainer sees it: a weights hook, and an in-process sampler.

The trainer does not care what generates, only that it can push new weights to it:
``PolicyHook.load_weights(state)`` installs weights and returns the new policy version,
``current_version()`` says which version samples now. Anything with those two methods
works: ``local_policy`` below (a ``TransformersPolicy`` in this process, the same sampler
``codegym serve-model`` serves) or ``ServerPolicy`` (a model server's client).

The in-process sampler is a ``TokenPolicy`` (``envs.tokens``): ``generate_tokens`` samples
from prompt ids and returns the sampled ids, their logprobs at the sampling temperature
(the behaviour logprobs GRPO's ratio needs) and the version; concurrent requests share
forward passes (``codegym.policies.transformers_policy`` says how it batches and seeds).
``PromptTokenizer`` renders prompts for it, with token healing for a trailing newline.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import torch

from codegym.policies.policy import Generation, Message, SamplingParams
from codegym.policies.transformers_policy import TransformersPolicy

__all__ = ["PolicyHook", "PromptTokenizer", "TrainablePolicy", "local_policy"]


@runtime_checkable
class PolicyHook(Protocol):
    """Where the trainer sends new weights."""

    def load_weights(self, weights: Mapping[str, torch.Tensor]) -> int:
        """Install ``weights`` (a state dict); return the new policy version."""
        ...

    def current_version(self) -> int:
        """The version new samples come from."""
        ...


@runtime_checkable
class TrainablePolicy(PolicyHook, Protocol):
    """What ``Trainer`` drives in-process: a weights hook that samples from token ids.

    ``generate_tokens`` must fill ``token_ids``, ``logprobs`` (at the sampling temperature,
    what the trainer recomputes) and ``policy_version``; ``tokenizer`` is the model's
    Hugging Face tokenizer (prompts are rendered with it, it is saved with the model).
    Optional counters ``generate_s`` and ``tokens_generated`` feed the throughput metrics.
    """

    name: str
    tokenizer: Any

    async def generate_tokens(
        self, prompt_ids: Sequence[int], params: SamplingParams
    ) -> list[Generation]: ...


class PromptTokenizer:
    """``envs.tokens.Tokenizer`` for a base (non-chat) model: the prompt is the plain text.

    ``render`` concatenates the messages' contents (a continuation-style ``CodeEnv`` sends
    one user message: the task's code prompt); observations are appended as plain text.

    ``heal=True`` drops the prompt's trailing newlines before encoding (token healing): a
    byte-level BPE merges ``"\n"`` with the next line's indent (``"\n   "``), so a prompt
    ending in a bare ``"\n"`` token is one the model never saw before a body, and the tiny
    model answers it with EOS ~80% of the time. Without the newline the model writes it
    back as part of its first token; the completion then starts with ``"\n"``, which the
    code extraction accepts (a blank line after the docstring).
    """

    def __init__(self, hf_tokenizer: Any, *, heal: bool = True) -> None:
        self._tok = hf_tokenizer
        self._heal = heal

    def render(self, messages: Sequence[Message]) -> list[int]:
        text = "".join(str(m.get("content") or "") for m in messages)
        if self._heal:
            text = text.rstrip("\n")
        return list(self._tok(text)["input_ids"])

    def render_observation(self, messages: Sequence[Message]) -> list[int]:
        return self.render(messages)

    def decode(self, ids: Sequence[int]) -> str:
        return str(self._tok.decode(list(ids), skip_special_tokens=True))


def local_policy(
    model_dir: str | Path, *, max_batch: int = 64, seed: int = 0
) -> TransformersPolicy:
    """The in-process sampler training uses: a ``TransformersPolicy`` that reports tempered
    logprobs (``log_softmax(logits / T)``, what the trainer recomputes for GRPO's ratio)
    and decodes up to ``max_batch`` rows per forward pass. Its batches are formed on the
    event loop, not by the clock, so which requests share one (and so the rounding of
    their logprobs) is the same in every run with the same seed."""
    return TransformersPolicy(
        model_dir,
        batch_size=max_batch,
        seed=seed,
        logprobs_mode="tempered",
        name="local",
        batch_wait_s=None,  # tick batching: a seeded sync run gives the same weights
    )
