"""``TaskSet``: a frozen, ordered, content-addressed collection of tasks.

A task set is what a loader returns and what an eval runs: a name (the suite spec that
produced it), the tasks in their dataset order, the sha256 of the source file when there was
one (so results can cite exactly which bytes were judged), and ``digest``, a sha256 over the
task digests in order, which changes whenever any verdict-deciding content changes.

Errors (one hierarchy for the dataset boundary)::

    DatasetError            a dataset is missing, altered or malformed
    └── UnknownTaskError    a lookup by id found nothing (also a KeyError)
    RecordError             one record cannot become a task (also a ValueError; raised by
                            the converters in ``formats``, ``evalplus``, ``livecodebench``)
"""

from __future__ import annotations

import datetime
import difflib
import hashlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import overload

from codegym.errors import CodegymError
from codegym.tasks.task import Task


class DatasetError(CodegymError):
    """A dataset is missing, altered or malformed; the message names the input and the fix."""


class RecordError(CodegymError, ValueError):
    """One record cannot become a task; the message names the field and the fix.

    Re-exported from ``codegym.tasks.formats``, where its converters raise it."""


class UnknownTaskError(KeyError, DatasetError):
    """No task has the requested id; the message lists the nearest ids."""

    def __str__(self) -> str:
        # KeyError's str() is the repr of its argument (quotes and escapes); show the message.
        return str(self.args[0]) if self.args else "unknown task"


@dataclass(frozen=True)
class TaskSet(Sequence[Task]):
    """An ordered collection of tasks with unique ids.

    Indexing by position (``ts[0]``) and iteration follow the dataset order; ``ts.get(id)``
    looks a task up by id.

    Raises:
        DatasetError: two tasks share an id, or ``tasks`` holds something that is not a Task.
    """

    name: str
    """The suite spec that produced the set (``humaneval``, a path, ``synth:...``)."""
    tasks: tuple[Task, ...]
    """The tasks, in dataset order."""
    sha256: str | None = None
    """sha256 of the source file's bytes, when the set was read from one."""
    source: str = ""
    """Where the tasks came from (a file path, a package resource); for messages."""
    skipped: tuple[str, ...] = field(default=(), compare=False)
    """Input lines skipped while loading (``on_bad_line="skip"``), each ``file:line: why``."""
    _index: dict[str, int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # Accept any iterable from callers but store a tuple, so the set is truly immutable.
        object.__setattr__(self, "tasks", tuple(self.tasks))
        index: dict[str, int] = {}
        for i, task in enumerate(self.tasks):
            if not isinstance(task, Task):
                raise DatasetError(
                    f"task set {self.name!r}: item {i} is a {type(task).__name__}, not a Task"
                )
            if task.id in index:
                raise DatasetError(
                    f"task set {self.name!r}: duplicate task id {task.id!r} "
                    f"(items {index[task.id]} and {i}); give every task a unique id"
                )
            index[task.id] = i
        object.__setattr__(self, "_index", index)

    @classmethod
    def of(
        cls, name: str, tasks: Iterable[Task], *, sha256: str | None = None, source: str = ""
    ) -> TaskSet:
        """Build a set from any iterable of tasks (a list from a generator, say)."""
        return cls(name, tuple(tasks), sha256=sha256, source=source)

    @cached_property
    def digest(self) -> str:
        """sha256 over the task digests in order: equal digests, equal verdicts."""
        h = hashlib.sha256()
        for task in self.tasks:
            h.update(task.digest().encode("ascii"))
            h.update(b"\n")
        return h.hexdigest()

    @property
    def ids(self) -> tuple[str, ...]:
        return tuple(t.id for t in self.tasks)

    def get(self, task_id: str) -> Task:
        """The task with this id.

        Raises:
            UnknownTaskError: no such id; the message lists up to five near matches.
        """
        try:
            return self.tasks[self._index[task_id]]
        except KeyError:
            raise UnknownTaskError(self._unknown(task_id)) from None

    def select(self, ids: Iterable[str]) -> TaskSet:
        """A subset in the order given by ``ids`` (a repeated id is an error).

        Raises:
            UnknownTaskError: an id is not in the set.
            DatasetError: an id is given twice.
        """
        chosen = tuple(self.get(i) for i in ids)
        return TaskSet(self.name, chosen, sha256=self.sha256, source=self.source)

    def since(self, day: str) -> TaskSet:
        """The tasks released on or after ``day`` (``YYYY-MM-DD``, by ``metadata["date"]``):
        problems published after a model's training data was gathered (``--since``).

        Raises:
            DatasetError: ``day`` is not a date, or some task has no release date.
        """
        try:
            start = datetime.date.fromisoformat(day).isoformat()
        except ValueError:
            raise DatasetError(f"--since {day!r} is not a date: give it as YYYY-MM-DD") from None
        undated = [t.id for t in self.tasks if not t.metadata.get("date")]
        if undated:
            raise DatasetError(
                f"task set {self.name!r}: {len(undated)} of {len(self.tasks)} tasks have no "
                f"release date (e.g. {undated[0]!r}), so --since cannot filter it; drop "
                "--since, or use a suite whose records carry dates (LiveCodeBench's "
                "contest_date)"
            )
        kept = tuple(t for t in self.tasks if t.metadata["date"][:10] >= start)
        return TaskSet(f"{self.name} (since {start})", kept, sha256=self.sha256, source=self.source)

    def _unknown(self, task_id: str) -> str:
        near = difflib.get_close_matches(str(task_id), list(self._index), n=5, cutoff=0.6)
        hint = f"; did you mean {', '.join(map(repr, near))}?" if near else ""
        return (
            f"unknown task id {task_id!r} in task set {self.name!r} ({len(self.tasks)} tasks){hint}"
        )

    # Sequence protocol -------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self.tasks)

    def __iter__(self) -> Iterator[Task]:
        return iter(self.tasks)

    @overload
    def __getitem__(self, i: int) -> Task: ...
    @overload
    def __getitem__(self, i: slice) -> tuple[Task, ...]: ...
    def __getitem__(self, i: int | slice) -> Task | tuple[Task, ...]:
        if isinstance(i, str):
            raise TypeError(f"index a TaskSet by position; look ids up with .get({i!r})")
        return self.tasks[i]

    def __contains__(self, item: object) -> bool:
        """``"HumanEval/0" in ts`` checks ids; a Task checks membership."""
        if isinstance(item, str):
            return item in self._index
        return (
            isinstance(item, Task)
            and self._index.get(item.id) is not None
            and (self.tasks[self._index[item.id]] == item)
        )
