"""SWE-style repository tasks: SWE-bench's fields, plus what codegym needs to rebuild and
grade them offline.

One JSON object per line. SWE-bench's fields keep their names and meaning, so existing
predictions and tools fit: ``instance_id``, ``repo``, ``version``, ``base_commit`` (here
the digest of the source layer), ``patch`` (the gold fix), ``test_patch`` (empty for
synthesized tasks: their tests are the package's own, unchanged), ``problem_statement``,
``FAIL_TO_PASS`` and ``PASS_TO_PASS`` (pytest node ids; a JSON-encoded list, as SWE-bench's
files write them, is read too). codegym's own: the image the task starts from (``image``:
the clean image, ``bug``: the patch that makes the task's state from it, the reverse of
``patch``), the test command, the test files a grader restores, and the time limit.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from codegym.tasks.swe.files import OFFLINE, OFFLINE_FILE
from codegym.tasks.taskset import DatasetError


class SweTask(BaseModel):
    """One repository task."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    instance_id: str = Field(min_length=1, max_length=200)
    repo: str
    version: str
    base_commit: str
    patch: str
    test_patch: str = ""
    problem_statement: str
    FAIL_TO_PASS: list[str] = Field(min_length=1)
    PASS_TO_PASS: list[str] = Field(default_factory=list)
    image: str
    """The clean image (source and environment), by digest."""
    image_spec: str | None = None
    """The spec the image is built from (a path relative to the dataset file, or a name
    under ``examples/images``), so a host without the image can build it."""
    bug: str
    """The patch that turns the clean image into the task's starting state."""
    test_cmd: list[str] = Field(min_length=1)
    test_files: list[str] = Field(default_factory=list)
    """Source files a grader restores to the image's version before testing."""
    timeout_s: float = Field(default=120.0, gt=0, le=3600)
    created_by: dict[str, Any] = Field(default_factory=dict)
    """How the task was made (mutation families, functions, seed)."""

    @field_validator("FAIL_TO_PASS", "PASS_TO_PASS", mode="before")
    @classmethod
    def _ids(cls, v: Any) -> Any:
        return json.loads(v) if isinstance(v, str) else v


def load_tasks(path: str | Path) -> list[SweTask]:
    """Read a task file (the shipped set is checked against its pinned sha256).

    Raises:
        DatasetError: a line that is not a task (names the line and the field), or the
            shipped file changed.
    """
    p = Path(path)
    out = []
    try:
        raw = p.read_bytes()
        if p.resolve() == OFFLINE_FILE.resolve():
            from codegym.tasks.manifest import BUILTIN_PINS, check_sha256

            check_sha256(raw, BUILTIN_PINS[OFFLINE], f"the shipped task set {p}")
        lines = _decode(p, raw).splitlines()
    except (OSError, EOFError, UnicodeDecodeError) as e:
        raise DatasetError(f"cannot read {p}: {e}") from None
    seen: set[str] = set()
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            task = SweTask.model_validate_json(line)
        except ValueError as e:
            raise DatasetError(f"{p}:{n}: not a repository task: {e}") from None
        if task.instance_id in seen:
            raise DatasetError(f"{p}:{n}: instance_id {task.instance_id!r} appears twice")
        seen.add(task.instance_id)
        out.append(task)
    return out


def _decode(p: Path, raw: bytes) -> str:
    """A task file's text (gzip when the name ends in ``.gz``)."""
    if p.name.endswith(".gz"):
        import gzip

        return gzip.decompress(raw).decode()
    return raw.decode()


def dump_tasks(tasks: list[SweTask], path: str | Path) -> None:
    text = "".join(t.model_dump_json() + "\n" for t in tasks)
    tmp = Path(f"{path}.tmp")
    tmp.write_text(text)
    tmp.replace(path)


def as_taskset(path: str | Path) -> Any:
    """The tasks of a repository-task file as a ``TaskSet`` (what ``eval`` and ``rollout``
    take): each ``Task`` carries its ``SweTask`` as ``repo`` (part of its digest) and the
    problem statement as its prompt; its package is its cluster (for clustered errors)."""
    import hashlib

    from codegym.tasks.task import Task
    from codegym.tasks.taskset import TaskSet

    p = Path(path)
    tasks = load_tasks(p)
    name = OFFLINE if p.resolve() == OFFLINE_FILE.resolve() else p.stem
    as_tasks = tuple(
        Task(id=t.instance_id, prompt=t.problem_statement, cluster=t.repo, repo=t.model_dump_json())
        for t in tasks
    )
    digest = hashlib.sha256(p.read_bytes()).hexdigest()
    return TaskSet(name, as_tasks, sha256=digest, source=str(p))


def swe_of(task: Any) -> SweTask:
    """The repository task inside a ``Task`` made by ``as_taskset``.

    Raises:
        DatasetError: the task is not a repository task.
    """
    raw = getattr(task, "repo", "")
    if not raw:
        raise DatasetError(
            f"task {getattr(task, 'id', task)!r} is not a repository task; the repo "
            "environment takes a task file made by `codegym tasks synth`"
        )
    return SweTask.model_validate_json(raw)
