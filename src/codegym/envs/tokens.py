"""Token-exact multi-turn: generate from token ids, render observations into token ids.

Training on text that was re-tokenized after sampling drifts from what the model really
sampled (verl #3960). In token mode the rollout engine keeps each episode as one growing
list of ids: the first prompt rendered once, then each turn's *sampled* ids appended as
they came back, then each observation rendered on its own and appended. Text is never
turned back into tokens.

What that needs:

- ``TokenPolicy.generate_tokens(prompt_ids, params)``: generation from a list of ids, with
  ``Generation.token_ids`` (and ``logprobs``) filled. The OpenAI completions API accepts a
  list of ids as ``prompt`` and vLLM returns the sampled ids with ``return_token_ids``.
- ``Tokenizer.render(messages)`` for the first prompt (ending in the assistant header), and
  ``Tokenizer.render_observation(messages)`` for what follows a completion (end of the
  assistant turn, the observation messages, the next assistant header).

``ByteTokenizer`` is a complete, dependency-free implementation (one id per UTF-8 byte,
special ids above 255) for tests and tiny models; a Hugging Face tokenizer fits the same
protocol through its chat template.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from codegym.envs.env import EnvError
from codegym.policies.policy import Generation, Message, SamplingParams


@runtime_checkable
class TokenPolicy(Protocol):
    """A policy that samples from token ids (token-exact multi-turn)."""

    name: str

    async def generate_tokens(
        self, prompt_ids: Sequence[int], params: SamplingParams
    ) -> list[Generation]:
        """Exactly ``params.n`` generations, each with ``token_ids`` set.

        Raises:
            PolicyError: after the policy's own retries.
        """
        ...


class Tokenizer(Protocol):
    """Renders conversations into ids for token mode."""

    def render(self, messages: Sequence[Message]) -> list[int]:
        """The whole prompt for ``messages``, ending where the assistant's reply begins."""
        ...

    def render_observation(self, messages: Sequence[Message]) -> list[int]:
        """Ids to append after a completion: close the turn, ``messages``, next header."""
        ...

    def decode(self, ids: Sequence[int]) -> str: ...


class ByteTokenizer:
    """One id per UTF-8 byte (0..255); ids 256+ mark roles and the end of a turn.

    Template: ``<role:R>`` content ``<end>`` per message, then ``<role:assistant>``.
    """

    ROLES = ("system", "user", "assistant", "tool")
    END = 256
    """End of a message."""

    def role_id(self, role: str) -> int:
        try:
            return 257 + self.ROLES.index(role)
        except ValueError:
            raise EnvError(
                f"ByteTokenizer: unknown role {role!r}; use one of {self.ROLES}"
            ) from None

    @property
    def vocab_size(self) -> int:
        return 257 + len(self.ROLES)

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))

    def decode(self, ids: Sequence[int]) -> str:
        return bytes(i for i in ids if i < 256).decode("utf-8", "replace")

    def _message(self, m: Message) -> list[int]:
        return [self.role_id(str(m["role"])), *self.encode(str(m.get("content") or "")), self.END]

    def render(self, messages: Sequence[Message]) -> list[int]:
        out: list[int] = []
        for m in messages:
            out += self._message(m)
        return [*out, self.role_id("assistant")]

    def render_observation(self, messages: Sequence[Message]) -> list[int]:
        # The sampled completion stops before END (it is the template's, not the model's).
        return [self.END, *self.render(messages)]


class TextTokenPolicy:
    """Adapts a text ``Policy`` to ``TokenPolicy`` by decoding the prompt ids.

    Exact only when the server returns the sampled ``token_ids`` (vLLM) and decoding
    then re-encoding the prompt is lossless for the tokenizer in use; otherwise this raises
    rather than guess. Prefer a policy with a native ``generate_tokens``.
    """

    def __init__(self, policy: object, tokenizer: Tokenizer) -> None:
        from codegym.policies.policy import Policy

        if not isinstance(policy, Policy):
            raise TypeError(f"TextTokenPolicy needs a Policy, got {type(policy).__name__}")
        self._policy = policy
        self._tok = tokenizer
        self.name = policy.name

    async def generate_tokens(
        self, prompt_ids: Sequence[int], params: SamplingParams
    ) -> list[Generation]:
        from codegym.policies.errors import PolicyError

        gens = await self._policy.generate(self._tok.decode(prompt_ids), params)
        for g in gens:
            if g.token_ids is None:
                raise PolicyError(
                    "config",
                    f"{self.name}: token mode needs the sampled token ids; start the policy "
                    "with token_ids=True against a server that returns them (vLLM)",
                )
        return gens
