"""The records the store keeps: small frozen dataclasses, validated on construction.

``GenerationRecord`` (a model output), ``ScoreRecord`` (a sandbox verdict) and
``TrajectoryRecord`` (an RL episode) are content-addressed: their ``key`` comes from
``content_key`` and the record is a pure function of it, so the first one stored for a
key is kept and later ones are ignored. ``RunInfo``, ``RunItem`` and ``RunRow`` describe
runs: an ordered list of items pointing at those records, which is what a results file or
an export lists.

Note for callers: infra outcomes (``infra``, ``policy_error``...) are not a function of
the inputs, so a runner should not store them under a content key; the store does not
check, because it sits below the task layer that defines outcomes.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from codegym.store.errors import StoreInputError

KEY_RE: Final = re.compile(r"[0-9a-f]{64}")
RunStatus = Literal["running", "finished", "failed", "interrupted"]
RUN_STATUSES: Final = frozenset({"running", "finished", "failed", "interrupted"})


def check_key(key: object, what: str) -> str:
    """``key`` if it is a content key (64 lowercase hex digits), else StoreInputError."""
    if not isinstance(key, str) or not KEY_RE.fullmatch(key):
        raise StoreInputError(
            f"{what}: {key!r:.80} is not a content key (64 lowercase hex digits); "
            "build keys with codegym.store.content_key(kind, **parts)"
        )
    return key


def _check(record: str, name: str, value: object, kinds: tuple[type, ...], optional: bool) -> None:
    if value is None and optional:
        return
    # bool is an int subclass; a bool where a count or a time belongs is a bug.
    bad_bool = isinstance(value, bool) and bool not in kinds
    if bad_bool or not isinstance(value, kinds):
        names = " or ".join(k.__name__ for k in kinds) + (" or None" if optional else "")
        raise StoreInputError(
            f"{record}.{name} must be {names}, got {type(value).__name__} {value!r:.80}"
        )


def _check_seq(
    record: object, name: str, value: object, kinds: frozenset[type]
) -> tuple[Any, ...] | None:
    """``value`` as a tuple when it is a list/tuple of exactly ``kinds``, else raise."""
    if value is None:
        return None
    # set(map(type, ...)) runs at C speed: a 100-token output costs microseconds, and
    # exact types keep bools (an int subclass) out of token ids.
    if isinstance(value, (list, tuple)) and set(map(type, value)) <= kinds:
        return tuple(value)
    names = " or ".join(sorted(k.__name__ for k in kinds))
    raise StoreInputError(
        f"{record}.{name} must be a list or tuple of {names}, or None, got {value!r:.80}"
    )


@dataclass(frozen=True)
class GenerationRecord:
    """One model output, keyed by everything that produced it."""

    key: str
    """``content_key("generation", ...)`` over model, prompt, sampling params, seed."""
    text: str
    """The raw completion text."""
    finish_reason: str | None = None
    """As the server said: ``stop``, ``length``..."""
    token_ids: tuple[int, ...] | None = None
    """The completion's token ids, exactly as sampled (None if the server gave none);
    a list is accepted and stored as a tuple."""
    logprobs: tuple[float, ...] | None = None
    """Log-probability of each sampled token, aligned with ``token_ids`` (list accepted)."""
    tokens_in: int | None = None
    """Prompt tokens billed."""
    tokens_out: int | None = None
    """Completion tokens billed."""
    model_s: float | None = None
    """Seconds the request took."""
    created: float = field(default_factory=time.time)
    """Unix time the record was made."""

    def __post_init__(self) -> None:
        check_key(self.key, "GenerationRecord.key")
        _check("GenerationRecord", "text", self.text, (str,), False)
        _check("GenerationRecord", "finish_reason", self.finish_reason, (str,), True)
        # Lists are accepted (that is what servers return) and frozen into tuples.
        ids = _check_seq("GenerationRecord", "token_ids", self.token_ids, frozenset({int}))
        lps = _check_seq("GenerationRecord", "logprobs", self.logprobs, frozenset({int, float}))
        object.__setattr__(self, "token_ids", ids)
        object.__setattr__(self, "logprobs", lps)
        if (
            self.token_ids is not None
            and self.logprobs is not None
            and len(self.token_ids) != len(self.logprobs)
        ):
            raise StoreInputError(
                f"GenerationRecord {self.key[:12]}: {len(self.token_ids)} token_ids but "
                f"{len(self.logprobs)} logprobs; they must be aligned, one per token"
            )
        _check("GenerationRecord", "tokens_in", self.tokens_in, (int,), True)
        _check("GenerationRecord", "tokens_out", self.tokens_out, (int,), True)
        _check("GenerationRecord", "model_s", self.model_s, (int, float), True)
        _check("GenerationRecord", "created", self.created, (int, float), False)


@dataclass(frozen=True)
class ScoreRecord:
    """One sandbox verdict on one completion, keyed by everything that decides it."""

    key: str
    """``content_key("score", ...)`` over task digest, harness version, limits, completion."""
    passed: bool
    outcome: str
    """A name from ``codegym.tasks.outcomes``."""
    detail: str = ""
    """Why it did not pass."""
    cpu_s: float = 0.0
    """Sandbox CPU seconds."""
    wall_s: float = 0.0
    """Sandbox wall seconds."""
    flaky: bool = False
    """Repeated executions disagreed (the runner's ``flaky_repeats``)."""
    created: float = field(default_factory=time.time)
    """Unix time the record was made."""
    parts: str = ""
    """A task with named tests (EvalPlus's base and plus): each one's outcome,
    ``name=outcome`` joined by commas; empty for other tasks."""

    def __post_init__(self) -> None:
        check_key(self.key, "ScoreRecord.key")
        _check("ScoreRecord", "passed", self.passed, (bool,), False)
        _check("ScoreRecord", "outcome", self.outcome, (str,), False)
        if not self.outcome:
            raise StoreInputError(
                "ScoreRecord.outcome must be a non-empty outcome name like 'pass'"
            )
        _check("ScoreRecord", "detail", self.detail, (str,), False)
        _check("ScoreRecord", "cpu_s", self.cpu_s, (int, float), False)
        _check("ScoreRecord", "wall_s", self.wall_s, (int, float), False)
        _check("ScoreRecord", "flaky", self.flaky, (bool,), False)
        _check("ScoreRecord", "created", self.created, (int, float), False)
        _check("ScoreRecord", "parts", self.parts, (str,), False)


@dataclass(frozen=True)
class TrajectoryRecord:
    """One RL episode: a JSON document plus a few columns indexed for queries."""

    key: str
    """``content_key("trajectory", ...)`` over env, task, policy, seed."""
    data: Mapping[str, Any]
    """The episode (messages, token ids, logprobs, rewards); must be JSON-serializable."""
    run_id: str | None = None
    task_id: str | None = None
    reward: float | None = None
    outcome: str | None = None
    created: float = field(default_factory=time.time)
    """Unix time the record was made."""

    def __post_init__(self) -> None:
        check_key(self.key, "TrajectoryRecord.key")
        _check("TrajectoryRecord", "data", self.data, (Mapping,), False)
        _check("TrajectoryRecord", "run_id", self.run_id, (str,), True)
        _check("TrajectoryRecord", "task_id", self.task_id, (str,), True)
        _check("TrajectoryRecord", "reward", self.reward, (int, float), True)
        if self.reward is not None and math.isnan(self.reward):
            raise StoreInputError(
                f"TrajectoryRecord {self.key[:12]}: reward is NaN; store None for no reward"
            )
        _check("TrajectoryRecord", "outcome", self.outcome, (str,), True)
        _check("TrajectoryRecord", "created", self.created, (int, float), False)


@dataclass(frozen=True)
class RunInfo:
    """A run: an eval, a scoring pass or a rollout, identified by the caller's id."""

    run_id: str
    kind: str
    """``eval``, ``score``, ``rollout``..."""
    config: Mapping[str, Any]
    """The run's configuration as JSON (suite, model, sampling params, limits...)."""
    status: RunStatus
    created: float
    finished: float | None
    """Unix time of ``finish_run``; None while running."""


@dataclass(frozen=True)
class RunItem:
    """One sample of a run, at a fixed position, pointing at its records by key."""

    ordinal: int
    """Position in the run (0-based); exports are ordered by it."""
    task_id: str
    sample_index: int = 0
    """Which of the task's samples this is."""
    cluster: str = ""
    """Group label for clustered errors; empty means the task id."""
    generation_key: str | None = None
    """The model output, when the run sampled a model."""
    score_key: str | None = None
    """The verdict, once scored."""
    sample: Mapping[str, Any] | None = None
    """The sample's own fields (e.g. a samples-file line), kept verbatim in results."""

    def __post_init__(self) -> None:
        _check("RunItem", "ordinal", self.ordinal, (int,), False)
        if self.ordinal < 0:
            raise StoreInputError(f"RunItem.ordinal must be >= 0, got {self.ordinal}")
        _check("RunItem", "task_id", self.task_id, (str,), False)
        _check("RunItem", "sample_index", self.sample_index, (int,), False)
        _check("RunItem", "cluster", self.cluster, (str,), False)
        if self.generation_key is not None:
            check_key(self.generation_key, "RunItem.generation_key")
        if self.score_key is not None:
            check_key(self.score_key, "RunItem.score_key")
        _check("RunItem", "sample", self.sample, (Mapping,), True)


@dataclass(frozen=True)
class RunRow:
    """A run item joined with its records (either may be missing: not made yet)."""

    item: RunItem
    generation: GenerationRecord | None
    score: ScoreRecord | None

    def to_result(self) -> dict[str, Any]:
        """This row as one ``results.jsonl`` object (the results-file contract).

        The sample's own fields come first; the store's fields are added over them.
        ``completion`` is the generation's text when there is one, else the sample's own.
        An unscored row has ``passed`` and ``outcome`` None.
        """
        it, gen, sc = self.item, self.generation, self.score
        out: dict[str, Any] = dict(it.sample or {})
        out["task_id"] = it.task_id
        if gen is not None:
            out["completion"] = gen.text
        out.setdefault("completion", None)
        out["sample_index"] = it.sample_index
        out["cluster"] = it.cluster or it.task_id
        out["passed"] = sc.passed if sc else None
        out["outcome"] = sc.outcome if sc else None
        out["detail"] = sc.detail if sc else None
        out["cpu_s"] = sc.cpu_s if sc else None
        out["wall_s"] = sc.wall_s if sc else None
        if sc is not None and sc.flaky:
            out["flaky"] = True
        if gen is not None:
            out["finish_reason"] = gen.finish_reason
            out["tokens_in"] = gen.tokens_in
            out["tokens_out"] = gen.tokens_out
            out["model_s"] = gen.model_s
        out["ordinal"] = it.ordinal
        out["generation_key"] = it.generation_key
        out["score_key"] = it.score_key
        return out
