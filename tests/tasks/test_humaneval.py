"""HumanEval loading (hash-pinned) and sandboxed scoring of its reference solutions."""

from __future__ import annotations

import asyncio

import pytest

from codegym.sandbox import Sandbox
from codegym.tasks import DatasetError, load_humaneval, score
from codegym.tasks import humaneval as he


def test_humaneval_loads_164_pinned_tasks() -> None:
    tasks = load_humaneval()
    assert len(tasks) == 164 and tasks[0].id == "HumanEval/0"
    assert all(t.reference and t.entry_point in t.prompt for t in tasks)


def test_altered_dataset_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(he, "HUMANEVAL_SHA256", "0" * 64)
    with pytest.raises(DatasetError, match="sha256"):
        load_humaneval()


async def test_every_reference_solution_passes(sandbox: Sandbox) -> None:
    tasks = load_humaneval()
    scores = await asyncio.gather(*(score(sandbox, t, t.reference) for t in tasks))
    failed = [
        (t.id, s.outcome, s.detail) for t, s in zip(tasks, scores, strict=True) if not s.passed
    ]
    assert failed == []


@pytest.mark.parametrize(
    ("completion", "outcome"),
    [
        ("    return None\n", "fail"),
        ("    raise ValueError('nope')\n", "error"),
        ("    while True:\n        pass\n", "timeout"),
        ("    return [\n", "error"),
    ],
)
async def test_wrong_completions_get_model_outcomes(
    sandbox: Sandbox, completion: str, outcome: str
) -> None:
    task = load_humaneval()[0]
    s = await score(sandbox, task, completion)
    assert not s.passed and s.outcome == outcome, s
