"""The generating policy as the trainer sees it: a weights hook, and an in-process sampler.

The trainer does not care what generates, only that it can push new weights to it:
``PolicyHook.load_weights(state)`` installs weights and returns the new policy version,
``current_version()`` says which version samples now. Anything with those two methods
works: ``LocalPolicy`` below (in this process), a ``TransformersPolicy``, or a client of a
model server's weights-update endpoint.

``LocalPolicy`` is also a ``TokenPolicy`` (``envs.tokens``): ``generate_tokens`` samples
from prompt ids and returns the sampled ids, their logprobs (at the sampling temperature,
the behaviour logprobs GRPO's ratio needs) and the version. Concurrent requests are
batched into one forward pass (up to ``max_batch`` rows, left-padded), because one tiny-model
token costs about the same for 1 row as for 8 on a CPU. Each row samples from its own
``torch.Generator`` seeded by the request's seed, so a sample does not depend on which other
requests shared its batch (up to float rounding of the batched matmul).

A completion ends at EOS (kept: the model must learn to stop), at a ``stop`` string (the
token that completes it is kept, the text is cut before it) or at ``max_tokens``
(``finish_reason="length"``). ``top_p < 1`` is refused rather than ignored.
"""

from __future__ import annotations

import asyncio
import hashlib
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from codegym.policies.errors import PolicyConfigError, PolicyError
from codegym.policies.policy import Generation, Message, SamplingParams

__all__ = ["LocalPolicy", "PolicyHook", "PromptTokenizer", "TrainablePolicy"]


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


@dataclass
class _Request:
    prompt: list[int]
    params: SamplingParams
    future: asyncio.Future[list[Generation]]


def _row_seed(seed: int, j: int) -> int:
    h = hashlib.blake2b(f"{seed}/{j}".encode(), digest_size=8).digest()
    return int.from_bytes(h, "big") >> 1


class LocalPolicy:
    """A Hugging Face causal LM sampled in this process, with a weights hook."""

    def __init__(
        self, model_dir: str | Path, *, max_batch: int = 64, name: str = "local", seed: int = 0
    ) -> None:
        self.name = name
        self.model = AutoModelForCausalLM.from_pretrained(model_dir)
        self.model.eval()  # type: ignore[no-untyped-call]
        self.tokenizer = AutoTokenizer.from_pretrained(model_dir)
        self.eos_id: int = int(self.tokenizer.eos_token_id)
        self.pad_id: int = int(self.tokenizer.pad_token_id)
        self.max_batch = max_batch
        config = self.model.config
        self.context_length: int = int(
            getattr(config, "max_position_embeddings", None)
            or getattr(config, "n_positions", None)
            or 1 << 30
        )
        """Prompt and generated tokens together never pass it (the position table's size)."""
        self._version = 0
        self._lock = threading.Lock()
        """Held by a batch and by ``load_weights``: weights never change mid-batch."""
        self._pending: list[_Request] = []
        self._worker: asyncio.Task[None] | None = None
        self._unseeded = seed
        self.tokens_generated = 0
        self.generate_s = 0.0

    # -- PolicyHook --------------------------------------------------------------------
    def current_version(self) -> int:
        return self._version

    def load_weights(self, weights: Mapping[str, torch.Tensor]) -> int:
        with self._lock, torch.no_grad():
            self.model.load_state_dict(dict(weights))
            self._version += 1
            return self._version

    # -- TokenPolicy -------------------------------------------------------------------
    async def generate_tokens(
        self, prompt_ids: Sequence[int], params: SamplingParams
    ) -> list[Generation]:
        if params.top_p < 1.0:
            raise PolicyConfigError(f"LocalPolicy: top_p={params.top_p} is not supported; use 1.0")
        if not prompt_ids:
            raise PolicyConfigError("LocalPolicy: empty prompt")
        if len(prompt_ids) >= self.context_length:
            # refused alone, before batching: one long prompt must not fail its batch-mates
            raise PolicyError(
                "config",
                f"LocalPolicy: the prompt has {len(prompt_ids)} tokens; the model's context "
                f"is {self.context_length}; shorten the prompt or use a model with a longer "
                "context",
            )
        fut: asyncio.Future[list[Generation]] = asyncio.get_running_loop().create_future()
        self._pending.append(_Request(list(prompt_ids), params, fut))
        if self._worker is None or self._worker.done():
            self._worker = asyncio.create_task(self._drain())
        return await fut

    async def _drain(self) -> None:
        while self._pending:
            # Yield a few times so the episodes started in the same tick join this batch.
            for _ in range(3):
                await asyncio.sleep(0)
            batch: list[_Request] = []
            rows = 0
            while self._pending and (
                not batch or rows + self._pending[0].params.n <= self.max_batch
            ):
                r = self._pending.pop(0)
                batch.append(r)
                rows += r.params.n
            try:
                out = await asyncio.to_thread(self._run, batch)
            except Exception as e:  # noqa: BLE001 -- every waiter hears about it, none hangs
                for r in batch:
                    if not r.future.done():
                        r.future.set_exception(e)
                continue
            for r, gens in zip(batch, out, strict=True):
                if not r.future.done():
                    r.future.set_result(gens)

    def _run(self, batch: list[_Request]) -> list[list[Generation]]:
        rows: list[tuple[list[int], SamplingParams, torch.Generator]] = []
        for r in batch:
            seed = r.params.seed
            if seed is None:
                seed = self._unseeded = self._unseeded + 1
            for j in range(r.params.n):
                rows.append((r.prompt, r.params, torch.Generator().manual_seed(_row_seed(seed, j))))
        t0 = time.perf_counter()
        with self._lock:
            version = self._version
            ids, lps, reasons, texts = self._sample(rows)
        dt = time.perf_counter() - t0
        self.generate_s += dt
        self.tokens_generated += sum(len(i) for i in ids)
        out: list[list[Generation]] = []
        k = 0
        for r in batch:
            gens = []
            for _ in range(r.params.n):
                gens.append(
                    Generation(
                        text=texts[k],
                        finish_reason=reasons[k],
                        tokens_in=len(r.prompt),
                        tokens_out=len(ids[k]),
                        model_s=dt,
                        prompt_token_ids=tuple(r.prompt),
                        token_ids=tuple(ids[k]),
                        logprobs=tuple(lps[k]),
                        policy_version=version,
                    )
                )
                k += 1
            out.append(gens)
        return out

    def _decode(self, ids: list[int]) -> str:
        return str(self.tokenizer.decode(ids, skip_special_tokens=True))

    @torch.inference_mode()
    def _sample(
        self, rows: list[tuple[list[int], SamplingParams, torch.Generator]]
    ) -> tuple[list[list[int]], list[list[float]], list[str], list[str]]:
        b = len(rows)
        width = max(len(p) for p, _, _ in rows)
        inp = torch.full((b, width), self.pad_id, dtype=torch.long)
        attn = torch.zeros((b, width), dtype=torch.long)
        for i, (p, _, _) in enumerate(rows):
            inp[i, width - len(p) :] = torch.tensor(p)  # left padding: every row ends together
            attn[i, width - len(p) :] = 1
        pos = (attn.cumsum(-1) - 1).clamp(min=0)
        temps = torch.tensor([max(pr.temperature, 1e-6) for _, pr, _ in rows]).unsqueeze(-1)
        greedy = [pr.temperature == 0 for _, pr, _ in rows]
        # a row stops at the context's end too ("length"), never past the position table
        limit = [min(pr.max_tokens, self.context_length - len(p)) for p, pr, _ in rows]
        out_ids: list[list[int]] = [[] for _ in rows]
        out_lp: list[list[float]] = [[] for _ in rows]
        reasons = ["length"] * b
        texts = [""] * b
        done = [False] * b
        res = self.model(input_ids=inp, attention_mask=attn, position_ids=pos, use_cache=True)
        for _ in range(max(limit)):
            logp = torch.log_softmax(res.logits[:, -1].float() / temps, dim=-1)
            nxt = torch.full((b, 1), self.pad_id, dtype=torch.long)
            for i, (_, pr, gen) in enumerate(rows):
                if done[i]:
                    continue
                if greedy[i]:
                    tok = int(logp[i].argmax())
                else:
                    tok = int(torch.multinomial(logp[i].exp(), 1, generator=gen))
                nxt[i, 0] = tok
                out_ids[i].append(tok)
                out_lp[i].append(float(logp[i, tok]))
                if tok == self.eos_id:
                    done[i], reasons[i] = True, "stop"
                else:
                    text = self._decode(out_ids[i])
                    cut = min((c for c in (text.find(s) for s in pr.stop) if c >= 0), default=-1)
                    if cut >= 0:
                        done[i], reasons[i], texts[i] = True, "stop", text[:cut]
                    elif len(out_ids[i]) >= limit[i]:
                        done[i] = True
                if done[i] and not texts[i]:
                    texts[i] = self._decode(out_ids[i])
            if all(done):
                break
            attn = torch.cat([attn, torch.ones((b, 1), dtype=torch.long)], dim=-1)
            # rows already done keep stepping with the batch: hold them inside the table
            pos = (pos[:, -1:] + 1).clamp(max=self.context_length - 1)
            res = self.model(
                input_ids=nxt,
                attention_mask=attn,
                position_ids=pos,
                cache=res.cache,
                use_cache=True,
            )
        return out_ids, out_lp, reasons, texts
