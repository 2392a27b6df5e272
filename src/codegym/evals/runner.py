"""The eval runner: sample a policy, score in the sandbox, keep every result content-addressed.

Contract:
- Two bounded stages, each with its own concurrency limit: the model (``model_concurrency``
  requests in flight, one request per task asking for ``n`` samples) and the sandbox
  (``sandbox_concurrency`` scorings in flight). A task's samples are scored as soon as its
  request returns, so both stages stay busy.
- Every generation is stored under ``content_key("generation", task digest, policy, sampling
  params, sample index)`` and every score under ``content_key("score", task digest, harness
  version, limits, program)``. A re-run looks both up first and does only the missing work,
  so a finished eval costs one lookup and a ``kill -9`` loses at most the last unflushed
  batch (``flush_every`` results or ``flush_s`` seconds).
- Outcomes follow ``codegym.tasks.outcomes``. Sandbox ``infra`` is retried
  (``infra_retries``); a policy that fails after its own retries gives ``policy_error`` for
  that task's samples. Infra results are never stored, so the next run retries them.
- ``flaky_repeats`` > 1 re-executes each program that many times; a program whose outcome
  changes is marked ``flaky`` and listed, and the statistics leave it out.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal, Protocol

from codegym.policies import Generation, Policy, PolicyError, SamplingParams
from codegym.policies.extract import extract_code
from codegym.sandbox import Limits
from codegym.sandbox.api import SandboxAPI
from codegym.store import content_key
from codegym.tasks import DEFAULT_LIMITS, HARNESS_VERSION, Score, Task, is_infra, score
from codegym.telemetry import metrics as _metrics
from codegym.telemetry.tracing import span

Record = dict[str, Any]


class ResultCache(Protocol):
    """What the runner needs from ``codegym.store.Store`` (any key-value store fits)."""

    def get_generations(self, keys: Sequence[str]) -> Mapping[str, Record]: ...
    def put_generations(self, items: Sequence[tuple[str, Record]]) -> None: ...
    def get_scores(self, keys: Sequence[str]) -> Mapping[str, Record]: ...
    def put_scores(self, items: Sequence[tuple[str, Record]]) -> None: ...


@dataclass
class SampleResult:
    """One scored sample: the row of ``results.jsonl`` (plus the sample's own fields)."""

    task_id: str
    sample_index: int
    completion: str
    """What was scored: the completion as given (score) or the extracted code (eval)."""
    passed: bool
    outcome: str
    detail: str
    cluster: str
    cpu_s: float | None = None
    wall_s: float | None = None
    tokens_in: int | None = None
    tokens_out: int | None = None
    model_s: float | None = None
    raw: str | None = None
    """The model's raw text when it differs from ``completion``."""
    flaky: bool = False
    parts: dict[str, str] | None = None
    """A task with named tests (EvalPlus's ``base`` and ``plus``): each one's outcome."""
    cached: bool = False
    """Scored in an earlier run (read from the store)."""
    generation_key: str | None = None
    score_key: str | None = None
    """Store keys of this sample's records (None: not stored, e.g. infra or no code)."""
    fields: Record = field(default_factory=dict)
    """Extra fields of the input sample, written back unchanged."""

    def row(self) -> Record:
        d = asdict(self)
        extra = d.pop("fields")
        d.pop("cached")
        d.pop("generation_key")
        d.pop("score_key")
        if d["raw"] is None:
            d.pop("raw")
        if d["parts"] is None:
            d.pop("parts")
        return {**extra, **d}


@dataclass(frozen=True)
class RunnerConfig:
    """How the runner schedules and retries."""

    sandbox_concurrency: int = 8
    """Scorings in flight (keep near the sandbox's worker count × 2)."""
    model_concurrency: int = 32
    """Model requests in flight."""
    infra_retries: int = 2
    """Extra attempts for a sandbox ``infra`` outcome before it is recorded."""
    flaky_repeats: int = 1
    """Executions per program; above 1, outcome changes mark the sample flaky."""
    flush_every: int = 64
    flush_s: float = 1.0
    suite: str = ""
    """Label of the eval's Prometheus metrics (``codegym_eval_*``)."""


def generation_key(
    task: Task, policy: str, params: SamplingParams | str, index: int, chat: bool = False
) -> str:
    """The store key of sample ``index``; ``params`` may be its precomputed digest."""
    return content_key(
        "generation",
        task=task.digest(),
        policy=policy,
        params=params if isinstance(params, str) else params.digest(),
        index=index,
        chat=chat,
    )


def score_key(task: Task, limits: Limits, program: str, repeats: int) -> str:
    return content_key(
        "score",
        task=task.digest(),
        harness=HARNESS_VERSION,
        limits=_wire(limits),
        program=program,
        repeats=repeats,
    )


class Runner:
    """Scores samples (and samples policies) with bounded concurrency and a result cache."""

    def __init__(
        self,
        sandbox: SandboxAPI,
        *,
        cache: ResultCache | None = None,
        limits: Limits | None = None,
        config: RunnerConfig | None = None,
        on_result: Callable[[SampleResult], None] | None = None,
    ) -> None:
        self._sb = sandbox
        self._cache = cache
        self._limits = limits
        self._cfg = config or RunnerConfig()
        self._on_result = on_result
        self._sandbox_sem = asyncio.Semaphore(self._cfg.sandbox_concurrency)
        self._model_sem = asyncio.Semaphore(self._cfg.model_concurrency)
        self._pending_scores: list[tuple[str, Record]] = []
        self._pending_gens: list[tuple[str, Record]] = []
        self._last_flush = time.monotonic()
        self._known_scores: dict[str, Record] = {}
        self._progress = _metrics.EvalProgress(self._cfg.suite)
        self._extracted: dict[tuple[str, str, bool], str | None] = {}
        self._score_keys: dict[tuple[str, str], str] = {}

    # -- scoring ---------------------------------------------------------------------------

    async def score_samples(self, samples: Sequence[tuple[Task, Record]]) -> list[SampleResult]:
        """Score given completions (``Record`` holds ``completion`` and any other fields)."""
        keys = [self._score_key(t, s["completion"]) for t, s in samples]
        known = self._lookup_scores(keys)
        self._progress.plan(len(samples))
        counters: dict[str, int] = {}
        indexes: list[int] = []
        for task, sample in samples:
            idx = sample.get("sample_index")
            indexes.append(idx if isinstance(idx, int) else counters.get(task.id, 0))
            counters[task.id] = indexes[-1] + 1
        results: list[SampleResult | None] = [None] * len(samples)

        async def one(i: int) -> None:
            task, sample = samples[i]
            idx = indexes[i]
            fields = {k: v for k, v in sample.items() if k not in ("task_id", "completion")}
            res = SampleResult(
                task.id, idx, sample["completion"], False, "", "", task.group, fields=fields
            )
            with (
                self._progress.in_flight(),
                span("eval.sample", suite=self._cfg.suite, task=task.id, index=idx) as sp,
            ):
                await self._score_into(res, task, keys[i], known.get(keys[i]))
                sp.set_attribute("outcome", res.outcome)
            results[i] = res

        async with asyncio.TaskGroup() as tg:
            for i in range(len(samples)):
                tg.create_task(one(i))
        self.flush()
        return [r for r in results if r is not None]

    # -- sampling + scoring ----------------------------------------------------------------

    async def evaluate(
        self,
        tasks: Sequence[Task],
        policy: Policy,
        params: SamplingParams,
        *,
        chat: bool = False,
    ) -> list[SampleResult]:
        """Sample ``params.n`` completions per task from ``policy`` and score them."""
        per_task: list[list[SampleResult]] = [[] for _ in tasks]
        pdigest = params.digest()
        gen_keys = [
            [generation_key(t, policy.name, pdigest, i, chat) for i in range(params.n)]
            for t in tasks
        ]
        known = self._lookup_generations([k for ks in gen_keys for k in ks])
        # One batched score lookup for everything already sampled (a resumed run): per-task
        # lookups would cost one store query per task.
        prefetch = []
        for t, ks in zip(tasks, gen_keys, strict=True):
            for k in ks:
                g = known.get(k)
                code = None if g is None else self._extract(g["text"], t, chat)
                if code is not None:
                    prefetch.append(self._score_key(t, code))
        self._known_scores.update(self._lookup_scores(prefetch))
        self._progress.plan(len(tasks) * params.n)

        async def one(ti: int) -> None:
            # one span per task (its n samples share one model call), like an episode's
            with (
                self._progress.in_flight(params.n),
                span("eval.task", suite=self._cfg.suite, task=tasks[ti].id, n=params.n),
            ):
                await sample_and_score(ti)

        async def sample_and_score(ti: int) -> None:
            task = tasks[ti]
            keys = gen_keys[ti]
            gens: list[Record | None] = [known.get(k) for k in keys]
            if any(g is None for g in gens):
                fresh = await self._generate(task, policy, params, chat)
                if isinstance(fresh, PolicyError):
                    per_task[ti] = [
                        SampleResult(task.id, i, "", False, "policy_error", str(fresh), task.group)
                        for i in range(params.n)
                    ]
                    for r in per_task[ti]:
                        self._emit(r)
                    return
                for i, g in enumerate(gens):
                    if g is None:
                        gens[i] = _gen_record(fresh[i])
                        self._pending_gens.append((keys[i], gens[i]))  # type: ignore[arg-type]
            done = [g for g in gens if g is not None]
            await self._score_generations(task, done, per_task[ti], chat)
            for res, key in zip(per_task[ti], keys, strict=False):
                res.generation_key = key

        async with asyncio.TaskGroup() as tg:
            for ti in range(len(tasks)):
                tg.create_task(one(ti))
        self.flush()
        return [r for rs in per_task for r in rs]

    async def _generate(
        self, task: Task, policy: Policy, params: SamplingParams, chat: bool
    ) -> list[Generation] | PolicyError:
        prompt: Any = task.prompt
        if chat:
            prompt = [{"role": "user", "content": _chat_prompt(task)}]
        async with self._model_sem:
            try:
                with span("policy.call", policy=policy.name):
                    gens = await policy.generate(prompt, params)
            except PolicyError as e:
                return e
        if len(gens) != params.n:
            return PolicyError(
                "bad_response",
                f"policy {policy.name} returned {len(gens)} samples, asked for {params.n}",
            )
        return gens

    async def _score_generations(
        self, task: Task, gens: list[Record], out: list[SampleResult], chat: bool
    ) -> None:
        pending: list[tuple[SampleResult, str]] = []
        for i, g in enumerate(gens):
            text = g["text"]
            code = self._extract(text, task, chat)
            res = SampleResult(
                task.id,
                i,
                code if code is not None else "",
                False,
                "",
                "",
                task.group,
                tokens_in=g.get("tokens_in"),
                tokens_out=g.get("tokens_out"),
                model_s=g.get("model_s"),
                raw=text if code != text else None,
            )
            out.append(res)
            if g.get("finish_reason") == "length":
                res.outcome, res.detail = "truncated", "the completion hit max_tokens"
            elif code is None:
                res.outcome, res.detail = "no_code", "no code found in the completion"
            else:
                pending.append((res, self._score_key(task, code)))
                continue
            self._emit(res)
        missing = [k for _, k in pending if k not in self._known_scores]
        known = {**self._known_scores, **self._lookup_scores(missing)}
        await asyncio.gather(
            *(self._score_into(res, task, key, known.get(key)) for res, key in pending)
        )

    # -- shared machinery ------------------------------------------------------------------

    def _extract(self, text: str, task: Task, chat: bool) -> str | None:
        memo = (text, task.prompt, chat)
        if memo not in self._extracted:
            style: Literal["chat", "continuation"] = "chat" if chat else "continuation"
            self._extracted[memo] = extract_code(text, task_prompt=task.prompt, style=style)
        return self._extracted[memo]

    def _limits_for(self, task: Task) -> Limits:
        return self._limits or task.limits or DEFAULT_LIMITS

    def _score_key(self, task: Task, completion: str) -> str:
        memo = (task.digest(), completion)
        key = self._score_keys.get(memo)
        if key is None:
            key = self._score_keys[memo] = score_key(
                task, self._limits_for(task), task.program(completion), self._cfg.flaky_repeats
            )
        return key

    async def _score_into(
        self, res: SampleResult, task: Task, key: str, known: Record | None
    ) -> None:
        if known is not None:
            res.score_key = key
            res.passed, res.outcome, res.detail = known["passed"], known["outcome"], known["detail"]
            res.cpu_s, res.wall_s = known.get("cpu_s"), known.get("wall_s")
            res.flaky, res.cached = bool(known.get("flaky")), True
            res.parts = _parts_from(known.get("parts") or "")
        else:
            scores = [await self._score_once(task, res.completion)]
            while len(scores) < self._cfg.flaky_repeats and not scores[-1].is_infra:
                scores.append(await self._score_once(task, res.completion))
            first = scores[0]
            res.passed, res.outcome, res.detail = first.passed, first.outcome, first.detail
            res.cpu_s, res.wall_s = first.cpu_s, first.wall_s
            res.parts = dict(first.parts) or None
            if any(s.is_infra for s in scores):
                bad = next(s for s in scores if s.is_infra)
                res.passed, res.outcome, res.detail = False, "infra", bad.detail
            else:
                res.flaky = len({s.outcome for s in scores}) > 1
                if res.flaky:
                    res.detail = "flaky: " + ", ".join(s.outcome for s in scores)
                self._pending_scores.append((key, _score_record(res)))
                res.score_key = key
        self._emit(res)

    async def _score_once(self, task: Task, completion: str) -> Score:
        result: Score | None = None
        for _ in range(1 + self._cfg.infra_retries):
            async with self._sandbox_sem:
                result = await score(self._sb, task, completion, self._limits)
            if not result.is_infra:
                return result
        assert result is not None
        return result

    def _emit(self, res: SampleResult) -> None:
        self._progress.record(res.outcome, passed=res.passed, infra=is_infra(res.outcome))
        if self._on_result is not None:
            self._on_result(res)
        now = time.monotonic()
        pending = len(self._pending_scores) + len(self._pending_gens)
        if pending >= self._cfg.flush_every or (
            pending and now - self._last_flush > self._cfg.flush_s
        ):
            self.flush()

    def flush(self) -> None:
        """Write buffered generations and scores to the cache (one transaction each)."""
        self._last_flush = time.monotonic()
        if self._cache is None:
            self._pending_gens.clear()
            self._pending_scores.clear()
            return
        if self._pending_gens:
            gens, self._pending_gens = self._pending_gens, []
            self._cache.put_generations(gens)
        if self._pending_scores:
            scores, self._pending_scores = self._pending_scores, []
            self._cache.put_scores(scores)

    def _lookup_scores(self, keys: Sequence[str]) -> Mapping[str, Record]:
        return self._cache.get_scores(keys) if self._cache and keys else {}

    def _lookup_generations(self, keys: Sequence[str]) -> Mapping[str, Record]:
        return self._cache.get_generations(keys) if self._cache and keys else {}


@functools.lru_cache(maxsize=256)
def _wire(limits: Limits) -> dict[str, float | int]:
    return limits.to_wire()


def quarantined_results(task_id: str, n: int, reason: str) -> list[SampleResult]:
    """The rows for a task whose reference failed ground truth: excluded, never scored."""
    return [
        SampleResult(task_id, i, "", False, "broken_ground_truth", reason, task_id)
        for i in range(n)
    ]


def _chat_prompt(task: Task) -> str:
    if task.kind == "io":
        return (
            "Write a complete Python 3 program that reads standard input and prints the "
            f"answer. Reply with one ```python code block.\n\n{task.prompt}"
        )
    return (
        "Complete the following Python function. Reply with the whole function in one "
        f"```python code block.\n\n```python\n{task.prompt}```"
    )


def _gen_record(g: Generation) -> Record:
    return {
        "text": g.text,
        "finish_reason": g.finish_reason,
        "tokens_in": g.tokens_in,
        "tokens_out": g.tokens_out,
        "model_s": g.model_s,
        "token_ids": list(g.token_ids) if g.token_ids is not None else None,
        "logprobs": list(g.logprobs) if g.logprobs is not None else None,
    }


def _score_record(r: SampleResult) -> Record:
    return {
        "passed": r.passed,
        "outcome": r.outcome,
        "detail": r.detail,
        "cpu_s": r.cpu_s,
        "wall_s": r.wall_s,
        "flaky": r.flaky,
        "parts": ",".join(f"{k}={v}" for k, v in (r.parts or {}).items()),
    }


def _parts_from(text: str) -> dict[str, str] | None:
    """``Score.parts`` as the store keeps them (``base=pass,plus=fail``)."""
    pairs = [p.partition("=") for p in text.split(",") if p]
    return {k: v for k, _, v in pairs} or None
