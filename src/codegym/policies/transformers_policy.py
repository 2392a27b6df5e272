"""``TransformersPolicy``: seeded, batched sampling from a local Hugging Face causal LM.

Contract: ``generate(prompt, params)`` / ``generate_tokens(prompt_ids, params)`` return
exactly ``params.n`` generations, each with ``prompt_token_ids``, ``token_ids`` (the ids as
sampled, EOS and the token that completed a stop string included), ``logprobs`` aligned
with ``token_ids`` and ``policy_version``. ``text`` is the decoded completion without
special tokens, cut before the first stop string.

Concurrency: the model runs in one worker thread, never on the event loop. Requests that
arrive within ``batch_wait_s`` of each other are decoded together (left-padded, one KV
cache, rows of ``batch_size`` at most per forward pass), so many concurrent rollouts share
the forward passes. ``load_weights`` takes the same lock as a batch: a batch sees one set
of weights, and every generation records the version that produced it.

Reproducibility: each sample row owns a ``torch.Generator``, seeded from
(``params.seed``, row index) when a seed is given, else from the policy's own seeded RNG
(so a fixed sequence of calls is reproducible too). The same request gives the same tokens
when it is decoded in the same batch composition; across compositions the logits differ
only by float rounding of the padded matmuls, which very rarely flips a sample.

Logprobs (a decision GRPO depends on): ``logprobs_mode="raw"`` (default, like vLLM's
``raw_logprobs``) reports ``log_softmax(logits)`` of the sampled token: the untempered,
untruncated model distribution. It depends only on the weights and the tokens, so a
trainer reproduces it with one plain forward pass (temperature 1), which is what the
importance ratio compares against. ``"tempered"`` reports ``log_softmax(logits / T)`` (no
top-p truncation), matching trainers that divide logits by the sampling temperature (TRL,
verl). Sampling at temperature 1 and top-p 1 makes both equal the true behaviour
distribution. Greedy rows (temperature 0) always report raw logprobs.

Context: a prompt must leave room for one token in the model's context
(``max_position_embeddings``); ``max_tokens`` beyond the context is clipped and the sample
finishes with ``"length"``.

Chat prompts use the tokenizer's chat template when it has one; otherwise the simple
template ``<|{role}|>\\n{content}\\n`` per message followed by ``<|assistant|>\\n``.
"""

from __future__ import annotations

import asyncio
import inspect
import queue
import random
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, cast

import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM, AutoTokenizer

from codegym.policies.errors import PolicyConfigError, PolicyError
from codegym.policies.policy import Generation, Message, Prompt, SamplingParams

LogprobsMode = Literal["raw", "tempered"]
WeightsSource = Mapping[str, torch.Tensor] | str | Path
MAX_TOP_LOGPROBS = 20


@dataclass(frozen=True)
class Sample:
    """One sampled continuation with the token-level detail a server reports."""

    prompt_token_ids: tuple[int, ...]
    token_ids: tuple[int, ...]
    """Sampled ids, EOS and the stop-string token included."""
    logprobs: tuple[float, ...]
    """Log-probability of each sampled id (see the module doc for which distribution)."""
    top_logprobs: tuple[tuple[tuple[int, float], ...], ...]
    """Per position, the ``top_logprobs`` most likely (id, logprob); empty when not asked."""
    text: str
    finish_reason: str
    """``"stop"`` (EOS or a stop string) or ``"length"`` (max_tokens or the context)."""
    policy_version: int
    model_s: float
    """Wall seconds of the batch that produced it (queue wait excluded)."""


@dataclass
class _Row:
    """One sample being decoded (mutable state of the worker thread)."""

    prompt: list[int]
    params: SamplingParams
    seed: int
    top_k: int
    budget: int
    out: list[int] = field(default_factory=list)
    lps: list[float] = field(default_factory=list)
    tops: list[tuple[tuple[int, float], ...]] = field(default_factory=list)
    finish: str | None = None
    text: str | None = None
    notify: Callable[[int], None] | None = None
    """Called (on the worker thread) with each sampled id: streaming."""


@dataclass
class _Job:
    prompt_ids: list[int]
    params: SamplingParams
    top_k: int
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future[list[Sample]]
    on_token: Callable[[int, int], None] | None = None
    """Called on ``loop`` with (sample index, id) as each id is sampled."""


def simple_chat_template(messages: Sequence[Message]) -> str:
    """The fallback chat rendering (module doc), ending with the assistant header."""
    parts = [f"<|{m.get('role', 'user')}|>\n{m.get('content') or ''}\n" for m in messages]
    return "".join(parts) + "<|assistant|>\n"


def _fail(result: BaseException, fut: asyncio.Future[list[Sample]]) -> None:
    if not fut.done():
        fut.set_exception(result)


def _succeed(result: list[Sample], fut: asyncio.Future[list[Sample]]) -> None:
    if not fut.done():  # a cancelled caller left; drop its samples
        fut.set_result(result)


class TransformersPolicy:
    """A ``Policy`` and ``TokenPolicy`` over a local Hugging Face causal LM (module doc)."""

    def __init__(
        self,
        model_dir: str | Path,
        *,
        device: str = "cpu",
        batch_size: int = 32,
        seed: int = 0,
        batch_wait_s: float | None = 0.005,
        logprobs_mode: LogprobsMode = "raw",
        name: str | None = None,
        torch_threads: int | None = None,
    ) -> None:
        """
        Args:
            model_dir: a Hugging Face model folder (``config.json``, weights, tokenizer).
            device: torch device for the model (``"cpu"``, ``"cuda"``, ``"cuda:1"``).
            batch_size: most sample rows per forward pass.
            seed: seeds the row seeds of unseeded requests.
            batch_wait_s: how long the worker waits for more requests to batch together.
                None: *tick batching*, for reproducible runs (the trainer's sampler): the
                requests made while the event loop runs a few ticks are decoded together,
                one group at a time, so which requests share a batch (and so the float
                rounding of their logits) does not depend on the clock.
            logprobs_mode: ``"raw"`` or ``"tempered"`` (module doc).
            name: shown in summaries (default: the folder's name).
            torch_threads: if given, ``torch.set_num_threads`` (process-wide). On a few
                shared cores 1 is much faster for small models: measured 24x per token on
                2 loaded vCPUs, where intra-op threads spin against other processes.

        Raises:
            PolicyError(kind="config"): a bad argument or a folder that is not a model.
        """
        path = Path(model_dir)
        if not (path / "config.json").is_file():
            raise PolicyError(
                "config",
                f"TransformersPolicy(model_dir={str(model_dir)!r}): no config.json there; give "
                "a Hugging Face model folder (e.g. codegym.models.ensure_tiny_model())",
            )
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise PolicyError("config", f"TransformersPolicy(batch_size={batch_size!r}): use >= 1")
        if logprobs_mode not in ("raw", "tempered"):
            raise PolicyError(
                "config",
                f"TransformersPolicy(logprobs_mode={logprobs_mode!r}): use 'raw' or 'tempered'",
            )
        if batch_wait_s is not None and not batch_wait_s >= 0:
            raise PolicyError(
                "config", f"TransformersPolicy(batch_wait_s={batch_wait_s!r}): use seconds >= 0"
            )
        if torch_threads is not None:
            if (
                isinstance(torch_threads, bool)
                or not isinstance(torch_threads, int)
                or torch_threads < 1
            ):
                raise PolicyError(
                    "config", f"TransformersPolicy(torch_threads={torch_threads!r}): use >= 1"
                )
            torch.set_num_threads(torch_threads)
        self.model_dir = path
        self.name = name or path.resolve().name
        self.device = torch.device(device)
        self.batch_size = batch_size
        self.batch_wait_s = None if batch_wait_s is None else float(batch_wait_s)
        self._ticks: dict[asyncio.AbstractEventLoop, list[_Job]] = {}
        """Tick batching: each loop's requests waiting for its next group."""
        self._drainers: dict[asyncio.AbstractEventLoop, asyncio.Task[None]] = {}
        self.logprobs_mode: LogprobsMode = logprobs_mode
        self.model: Any = cast(Any, AutoModelForCausalLM.from_pretrained(path))
        self.model.to(self.device)
        self.model.eval()
        self.tokenizer: Any = AutoTokenizer.from_pretrained(path)
        config = self.model.config
        self.context_length: int = int(
            getattr(config, "max_position_embeddings", None)
            or getattr(config, "n_positions", None)
            or 1 << 30
        )
        # transformers 5.x renamed the KV-cache argument; older builds take past_key_values
        params = inspect.signature(self.model.forward).parameters
        self._cache_kw = "cache" if "cache" in params else "past_key_values"
        self._eos: frozenset[int] = frozenset(self._eos_ids())
        self._pad = next(
            i
            for i in (self.tokenizer.pad_token_id, self.tokenizer.eos_token_id, 0)
            if isinstance(i, int)
        )
        self._rng = random.Random(seed)
        self._version = 0
        self._lock = threading.Lock()
        self._queue: queue.Queue[_Job | list[_Job] | None] = queue.Queue()
        self._thread: threading.Thread | None = None
        self._start_lock = threading.Lock()
        self._closed = False
        self.batches_run = 0
        """Worker batches decoded so far (requests grouped into shared forward passes)."""
        self.requests_run = 0
        """Requests answered so far."""
        self.tokens_generated = 0
        self.generate_s = 0.0
        """Tokens sampled and seconds spent decoding them (the trainer's throughput)."""

    # ---- public API ---------------------------------------------------------------------

    @property
    def policy_version(self) -> int:
        """Bumped by every ``load_weights``; 0 for the weights loaded at start."""
        return self._version

    def current_version(self) -> int:
        """``policy_version`` (the trainer's ``PolicyHook`` asks for it this way)."""
        return self._version

    def encode(self, text: str) -> list[int]:
        """Token ids of a completions prompt (the tokenizer's default special tokens)."""
        return list(self.tokenizer.encode(text))

    def render_chat(self, messages: Sequence[Message]) -> list[int]:
        """Prompt ids for a conversation, ending where the assistant's reply begins.

        Raises:
            PolicyError(kind="config"): ``messages`` is empty or not a list of messages.
        """
        if isinstance(messages, str) or not messages:
            raise PolicyError("config", "chat messages: give a non-empty list of messages")
        if not all(isinstance(m, Mapping) for m in messages):
            raise PolicyError("config", "chat messages: each one must be an object with a role")
        if getattr(self.tokenizer, "chat_template", None):
            text = self.tokenizer.apply_chat_template(
                [dict(m) for m in messages], tokenize=False, add_generation_prompt=True
            )
            return list(self.tokenizer.encode(text, add_special_tokens=False))
        return list(self.tokenizer.encode(simple_chat_template(messages), add_special_tokens=False))

    def decode(self, ids: Sequence[int]) -> str:
        return str(self.tokenizer.decode(list(ids), skip_special_tokens=True))

    async def generate(self, prompt: Prompt, params: SamplingParams) -> list[Generation]:
        """``params.n`` generations for a text prompt or a conversation.

        Raises:
            PolicyError(kind="config"): the prompt does not fit the model's context.
        """
        ids = self.encode(prompt) if isinstance(prompt, str) else self.render_chat(prompt)
        return [_to_generation(s) for s in await self.sample(ids, params)]

    async def generate_tokens(
        self, prompt_ids: Sequence[int], params: SamplingParams
    ) -> list[Generation]:
        """``params.n`` generations continuing ``prompt_ids`` exactly (no re-tokenization).

        Raises:
            PolicyError(kind="config"): bad ids or a prompt that does not fit the context.
        """
        return [_to_generation(s) for s in await self.sample(prompt_ids, params)]

    async def sample(
        self,
        prompt_ids: Sequence[int],
        params: SamplingParams,
        *,
        top_logprobs: int = 0,
        on_token: Callable[[int, int], None] | None = None,
    ) -> list[Sample]:
        """``params.n`` samples with full token detail (what the model server reports).

        ``on_token(index, token_id)`` is called on the caller's event loop as each sample's
        tokens are decoded (streaming); the samples are still returned whole at the end.

        Raises:
            PolicyError(kind="config"): bad ids, ``top_logprobs`` out of range, or a
                prompt that leaves no room in the context.
        """
        ids = self._check_prompt(prompt_ids)
        if not 0 <= top_logprobs <= MAX_TOP_LOGPROBS:
            raise PolicyError("config", f"top_logprobs={top_logprobs}: use 0..{MAX_TOP_LOGPROBS}")
        if self._closed:
            raise PolicyError("config", f"TransformersPolicy {self.name!r} is closed")
        self._ensure_worker()
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[list[Sample]] = loop.create_future()
        job = _Job(ids, params, top_logprobs, loop, fut, on_token)
        if self.batch_wait_s is not None:
            self._queue.put(job)
        else:
            self._ticks.setdefault(loop, []).append(job)
            drainer = self._drainers.get(loop)
            if drainer is None or drainer.done():
                self._drainers[loop] = loop.create_task(self._drain(loop))
        return await fut

    async def _drain(self, loop: asyncio.AbstractEventLoop) -> None:
        """Tick batching: hand the worker one group at a time, formed on the loop."""
        while self._ticks.get(loop):
            for _ in range(3):  # let the requests started in the same tick join
                await asyncio.sleep(0)
            group = self._ticks.pop(loop)
            self._queue.put(group)
            # The next group forms only after this one is decoded, whatever that took.
            await asyncio.gather(*(j.future for j in group), return_exceptions=True)

    async def score(
        self, prompt_ids: Sequence[int], top_logprobs: int = 0
    ) -> list[tuple[float | None, tuple[tuple[int, float], ...]]]:
        """The model's log-probability of each prompt token given the ones before it (the
        first has none), with the ``top_logprobs`` most likely ids at each position: what
        a server reports for ``echo`` with ``logprobs`` (likelihood evals).

        Raises:
            PolicyError(kind="config"): bad ids, ``top_logprobs`` out of range, a prompt
                longer than the context.
        """
        ids = self._check_prompt(prompt_ids)
        if not 0 <= top_logprobs <= MAX_TOP_LOGPROBS:
            raise PolicyError("config", f"top_logprobs={top_logprobs}: use 0..{MAX_TOP_LOGPROBS}")
        return await asyncio.to_thread(self._score, ids, top_logprobs)

    def _score(
        self, ids: list[int], top: int
    ) -> list[tuple[float | None, tuple[tuple[int, float], ...]]]:
        with self._lock, torch.inference_mode():
            x = torch.tensor([ids], device=self.device)
            logits = self.model(input_ids=x).logits[0, :-1, :].float()
            raw = torch.log_softmax(logits, dim=-1)
            got = raw.gather(-1, x[0, 1:, None])[:, 0].tolist()
            alts = raw.topk(top, dim=-1) if top else None
        out: list[tuple[float | None, tuple[tuple[int, float], ...]]] = [(None, ())]
        for i, lp in enumerate(got):
            pairs: tuple[tuple[int, float], ...] = ()
            if alts is not None:
                idx, vals = alts.indices[i].tolist(), alts.values[i].tolist()
                pairs = tuple(zip(idx, vals, strict=True))
            out.append((lp, pairs))
        return out

    def load_weights(self, source: WeightsSource) -> int:
        """Swap the weights in place (between batches) and return the new policy version.

        ``source`` is a state dict, a ``.safetensors`` file, or a folder of them (a
        ``save_pretrained`` checkpoint). Keys and shapes must match the model; weights tied
        to a provided one (e.g. GPT-2's ``lm_head``) may be missing.

        Raises:
            FileNotFoundError: the path does not exist or holds no ``.safetensors`` file.
            PolicyConfigError: keys or shapes do not match the served model, or a weight
                is NaN or infinite (nothing is changed); a ``ValueError`` too.
        """
        state = _read_state(source)
        # A diverged trainer's NaN or inf would be served as garbage (and every sampler
        # call would fail): refuse them, nothing loaded, so the trainer stops loudly.
        bad = [k for k, v in state.items() if v.is_floating_point() and not v.isfinite().all()]
        if bad:
            where = "the state dict" if isinstance(source, Mapping) else str(source)
            raise PolicyConfigError(f"{where}: weights that are NaN or infinite: {bad[:5]}")
        with self._lock:
            self._check_state(state, source)
            self.model.load_state_dict(state, strict=False)
            self._version += 1
            return self._version

    async def aload_weights(self, source: WeightsSource) -> int:
        """``load_weights`` off the event loop."""
        return await asyncio.to_thread(self.load_weights, source)

    def close(self) -> None:
        """Stop the worker thread after the queued requests (idempotent)."""
        self._closed = True
        thread = self._thread
        if thread is not None:
            self._queue.put(None)
            thread.join(timeout=60)
            self._thread = None

    async def __aenter__(self) -> TransformersPolicy:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await asyncio.to_thread(self.close)

    # ---- validation ---------------------------------------------------------------------

    def _eos_ids(self) -> list[int]:
        found: list[int] = []
        gen = getattr(self.model, "generation_config", None)
        for value in (
            getattr(gen, "eos_token_id", None),
            self.model.config.eos_token_id,
            self.tokenizer.eos_token_id,
        ):
            if isinstance(value, int):
                found.append(value)
            elif isinstance(value, list):
                found.extend(v for v in value if isinstance(v, int))
        return found

    def _check_prompt(self, prompt_ids: Sequence[int]) -> list[int]:
        vocab = int(self.model.config.vocab_size)
        ids = list(prompt_ids)
        bad = [
            i for i in ids if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < vocab
        ]
        if bad:
            raise PolicyError(
                "config", f"prompt token ids {bad[:5]} are not ids of this model (0..{vocab - 1})"
            )
        if not ids:  # an empty prompt starts from BOS (or EOS, the GPT-2 convention)
            start = self.tokenizer.bos_token_id
            start = start if isinstance(start, int) else self.tokenizer.eos_token_id
            if not isinstance(start, int):
                raise PolicyError("config", "the prompt is empty and the model has no BOS token")
            ids = [start]
        if len(ids) >= self.context_length:
            raise PolicyError(
                "config",
                f"the prompt has {len(ids)} tokens; the model's context is "
                f"{self.context_length}; shorten the prompt",
            )
        return ids

    def check_weights(
        self, state: Mapping[str, torch.Tensor], *, partial: bool = False, where: str = ""
    ) -> None:
        """Raise ``PolicyConfigError`` (naming ``where``) unless ``state``'s keys and shapes
        fit the model; ``partial`` allows keys to be missing (a chunk of an update).
        Tensors on the ``meta`` device are enough: only names and shapes are read."""
        self._check_state(state, where or "the state dict", partial=partial)

    def _check_state(
        self, state: Mapping[str, torch.Tensor], source: WeightsSource, *, partial: bool = False
    ) -> None:
        where = "the state dict" if isinstance(source, Mapping) else str(source)
        own = self.model.state_dict()
        unexpected = sorted(set(state) - set(own))
        if unexpected:
            raise PolicyConfigError(f"{where}: keys the served model lacks: {unexpected[:5]}")
        given_ptrs = {own[k].data_ptr() for k in state}
        # a missing key is fine only when it is tied to (shares storage with) a given one
        missing = sorted(k for k in set(own) - set(state) if own[k].data_ptr() not in given_ptrs)
        if missing and not partial:
            raise PolicyConfigError(f"{where}: keys missing for the served model: {missing[:5]}")
        wrong = [
            f"{k}: {tuple(v.shape)} vs served {tuple(own[k].shape)}"
            for k, v in state.items()
            if tuple(v.shape) != tuple(own[k].shape)
        ]
        if wrong:
            raise PolicyConfigError(f"{where}: shapes do not match the served model: {wrong[:3]}")

    # ---- the worker thread --------------------------------------------------------------

    def _ensure_worker(self) -> None:
        with self._start_lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._work, name=f"policy-{self.name}", daemon=True
                )
                self._thread.start()

    def _work(self) -> None:
        while True:
            first = self._queue.get()
            if first is None:
                return
            if isinstance(first, list):  # a tick-batching group: decoded as it is
                self._run_jobs(first)
                continue
            jobs = [first]
            rows = first.params.n
            deadline = time.monotonic() + (self.batch_wait_s or 0.0)
            stop = False
            while rows < self.batch_size:
                try:
                    nxt = self._queue.get(timeout=max(0.0, deadline - time.monotonic()))
                except queue.Empty:
                    break
                if nxt is None:
                    stop = True
                    break
                more = nxt if isinstance(nxt, list) else [nxt]  # one policy uses one mode
                jobs.extend(more)
                rows += sum(j.params.n for j in more)
            self._run_jobs(jobs)
            if stop:
                return

    def _run_jobs(self, jobs: list[_Job]) -> None:
        try:
            rows = [row for job in jobs for row in self._rows(job)]
            with self._lock, torch.inference_mode():
                version = self._version
                start = time.perf_counter()
                for lo in range(0, len(rows), self.batch_size):
                    self._decode(rows[lo : lo + self.batch_size])
                elapsed = time.perf_counter() - start
                self.batches_run += 1
                self.requests_run += len(jobs)
                self.generate_s += elapsed
                self.tokens_generated += sum(len(r.out) for r in rows)
        except Exception as e:  # noqa: BLE001 - handed to every waiting caller, not swallowed
            for job in jobs:
                job.loop.call_soon_threadsafe(_fail, e, job.future)
            return
        at = 0
        for job in jobs:
            mine, at = rows[at : at + job.params.n], at + job.params.n
            samples = [self._finish(r, version, elapsed) for r in mine]
            job.loop.call_soon_threadsafe(_succeed, samples, job.future)

    def _rows(self, job: _Job) -> list[_Row]:
        p = job.params
        budget = min(p.max_tokens, self.context_length - len(job.prompt_ids))
        out = []
        for j in range(p.n):
            # seeded: a pure function of (seed, j); unseeded: the policy's seeded stream
            if p.seed is not None:
                seed = (p.seed * 1_000_003 + j) & 0x7FFF_FFFF
            else:
                seed = self._rng.getrandbits(31)
            row = _Row(job.prompt_ids, p, seed, job.top_k, budget)
            if job.on_token is not None:
                row.notify = _notifier(job, j)
            out.append(row)
        return out

    def _finish(self, row: _Row, version: int, elapsed: float) -> Sample:
        text = row.text if row.text is not None else self.decode(row.out)
        return Sample(
            prompt_token_ids=tuple(row.prompt),
            token_ids=tuple(row.out),
            logprobs=tuple(row.lps),
            top_logprobs=tuple(row.tops),
            text=text,
            finish_reason=row.finish or "length",
            policy_version=version,
            model_s=elapsed,
        )

    def _decode(self, rows: list[_Row]) -> None:
        """Sample every row to completion with one shared KV cache (runs under the lock)."""
        dev = self.device
        width = max(len(r.prompt) for r in rows)
        ids = torch.full((len(rows), width), self._pad, dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for i, r in enumerate(rows):  # left padding: every row's next token is at the end
            ids[i, width - len(r.prompt) :] = torch.tensor(r.prompt)
            mask[i, width - len(r.prompt) :] = 1
        ids, mask = ids.to(dev), mask.to(dev)
        pos = (mask.cumsum(-1) - 1).clamp(min=0)
        temps = torch.tensor([r.params.temperature for r in rows], device=dev)
        top_p = torch.tensor([r.params.top_p for r in rows], device=dev)
        greedy = temps == 0
        gens = [torch.Generator(device=dev).manual_seed(r.seed) for r in rows]
        top_k = max(r.top_k for r in rows)
        past: Any = None
        inp, inp_pos, next_pos = ids, pos, pos[:, -1] + 1
        for _ in range(max(r.budget for r in rows)):
            out = self.model(
                input_ids=inp,
                attention_mask=mask,
                position_ids=inp_pos,
                use_cache=True,
                **{self._cache_kw: past},
            )
            past = out.get("cache", None) or out.get("past_key_values", None)
            logits = out.logits[:, -1, :].float()
            raw = torch.log_softmax(logits, dim=-1)
            scaled = logits / torch.where(greedy, 1.0, temps)[:, None]
            tempered = torch.log_softmax(scaled, dim=-1)
            probs = tempered.exp()
            if bool((top_p < 1).any()):
                probs = _nucleus(probs, top_p)
            chosen = torch.argmax(logits, dim=-1)
            for i in range(len(rows)):
                if not greedy[i] and rows[i].finish is None:
                    chosen[i] = torch.multinomial(probs[i], 1, generator=gens[i])[0]
            report = tempered if self.logprobs_mode == "tempered" else raw
            report = torch.where(greedy[:, None], raw, report)
            lps = report.gather(-1, chosen[:, None])[:, 0].tolist()
            tops = report.topk(top_k, dim=-1) if top_k else None
            tokens = chosen.tolist()
            for i, r in enumerate(rows):
                if r.finish is None:
                    self._step(r, tokens[i], lps[i], tops, i)
            if all(r.finish is not None for r in rows):
                break
            # A finished row keeps stepping with its batch: hold it inside the position
            # table (a row near the context's end beside a long one overran it: IndexError
            # for the whole batch).
            inp = chosen[:, None]
            inp_pos = next_pos[:, None].clamp(max=self.context_length - 1)
            next_pos = next_pos + 1
            mask = torch.cat([mask, torch.ones((len(rows), 1), dtype=mask.dtype, device=dev)], 1)

    def _step(self, r: _Row, token: int, lp: float, tops: Any, i: int) -> None:
        r.out.append(token)
        r.lps.append(lp)
        if r.notify is not None:
            r.notify(token)
        if r.top_k:
            vals, idx = tops.values[i, : r.top_k].tolist(), tops.indices[i, : r.top_k].tolist()
            r.tops.append(tuple(zip(idx, vals, strict=True)))
        if token in self._eos:
            r.finish = "stop"
            return
        if r.params.stop:
            text = self.decode(r.out)
            cuts = [c for c in (text.find(s) for s in r.params.stop) if c >= 0]
            if cuts:
                r.finish, r.text = "stop", text[: min(cuts)]
                return
        if len(r.out) >= r.budget:
            r.finish = "length"


def _notifier(job: _Job, index: int) -> Callable[[int], None]:
    call, loop = job.on_token, job.loop
    assert call is not None

    def notify(token: int) -> None:
        loop.call_soon_threadsafe(call, index, token)

    return notify


def _nucleus(probs: torch.Tensor, top_p: torch.Tensor) -> torch.Tensor:
    """Zero the tail beyond each row's top-p mass (always keeping the most likely token)."""
    sorted_p, order = probs.sort(dim=-1, descending=True)
    before = sorted_p.cumsum(-1) - sorted_p
    sorted_p = torch.where(before > top_p[:, None], 0.0, sorted_p)
    return torch.zeros_like(probs).scatter(-1, order, sorted_p)


def _read_state(source: WeightsSource) -> dict[str, torch.Tensor]:
    if isinstance(source, Mapping):
        return dict(source)
    path = Path(source)
    if path.is_file():
        if path.suffix != ".safetensors":
            raise FileNotFoundError(f"{path}: not a .safetensors file; save weights as safetensors")
        return load_file(str(path))
    if path.is_dir():
        files = sorted(path.glob("*.safetensors"))
        if not files:
            raise FileNotFoundError(
                f"{path}: no .safetensors file in the folder; save with save_pretrained()"
            )
        state: dict[str, torch.Tensor] = {}
        for f in files:  # sharded checkpoints: model-00001-of-0000N.safetensors, ...
            state.update(load_file(str(f)))
        return state
    raise FileNotFoundError(f"{path}: no such file or folder")


def _to_generation(s: Sample) -> Generation:
    return Generation(
        text=s.text,
        finish_reason=s.finish_reason,
        tokens_in=len(s.prompt_token_ids),
        tokens_out=len(s.token_ids),
        model_s=s.model_s,
        prompt_token_ids=s.prompt_token_ids,
        token_ids=s.token_ids,
        logprobs=s.logprobs,
        policy_version=s.policy_version,
    )
