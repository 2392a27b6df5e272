"""Synthetic task families: determinism, real-sandbox ground truth, the difficulty knob."""

from __future__ import annotations

import asyncio
import subprocess
import sys

import pytest

from codegym.sandbox import Sandbox
from codegym.tasks import score
from codegym.tasks.synthetic import FAMILIES, MAX_DIFFICULTY, generate


@pytest.mark.parametrize("family", FAMILIES)
def test_same_arguments_give_identical_tasks(family: str) -> None:
    a, b = generate(family, 30, 7, 2), generate(family, 30, 7, 2)
    assert [t.digest() for t in a] == [t.digest() for t in b]
    assert a == b
    # Task i depends only on its own index: a longer list extends, never reshuffles.
    assert generate(family, 40, 7, 2)[:30] == a
    assert len({t.id for t in a}) == 30
    assert a[3].id == f"synthetic/{family}/d2/s7/3"


def test_tasks_do_not_depend_on_the_hash_seed() -> None:
    code = (
        "from codegym.tasks.synthetic import generate;"
        "print([t.digest() for t in generate('bugfix', 5, 3, 2)])"
    )
    runs = {
        subprocess.run(
            [sys.executable, "-c", code],
            env={"PYTHONHASHSEED": seed},
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        for seed in ("1", "2")
    }
    assert len(runs) == 1


@pytest.mark.parametrize("family", FAMILIES)
def test_seed_and_difficulty_change_the_tasks(family: str) -> None:
    base = generate(family, 20, 0, 1)
    assert {t.digest() for t in base}.isdisjoint(t.digest() for t in generate(family, 20, 1, 1))
    for d in range(1, MAX_DIFFICULTY + 1):
        tasks = generate(family, 20, 0, d)
        # Difficulty d is a chain of d ops, each needed: the reference has d + 1 lines.
        assert all(t.reference.count("\n") == d + 1 for t in tasks)
        assert all(len(t.metadata["ops"].split("+")) == d for t in tasks)
        assert all(t.cluster.startswith(f"{family}/") for t in tasks)


@pytest.mark.parametrize(
    ("args", "match"),
    [
        (("nope", 1, 0, 1), "unknown synthetic family 'nope'"),
        (("infer", -1, 0, 1), "n=-1"),
        (("infer", 1, -5, 1), "seed=-5"),
        (("bugfix", 1, 0, 0), "difficulty=0"),
        (("bugfix", 1, 0, MAX_DIFFICULTY + 1), "difficulty="),
    ],
)
def test_bad_arguments_name_the_input(args: tuple[str, int, int, int], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        generate(*args)


def test_prompts_are_short() -> None:
    # The tiny model's context is small; keep prompt + solution to a few hundred characters.
    for family in FAMILIES:
        for t in generate(family, 50, 0, 3):
            assert len(t.prompt) + len(t.reference) < 600, t.id


@pytest.mark.parametrize("family", FAMILIES)
async def test_references_pass_and_broken_variants_fail(sandbox: Sandbox, family: str) -> None:
    tasks = [t for d in (1, 2, 3) for t in generate(family, 12, 5, d)]
    refs = await asyncio.gather(*(score(sandbox, t, t.reference) for t in tasks))
    assert [
        (t.id, s.outcome, s.detail) for t, s in zip(tasks, refs, strict=True) if not s.passed
    ] == []
    # Wrong answers: the identity function, and (for bugfix) copying the buggy g unchanged.
    wrong = ["    return x\n"] * len(tasks)
    if family == "bugfix":
        wrong = [t.metadata["buggy"] for t in tasks]
    bad = await asyncio.gather(*(score(sandbox, t, w) for t, w in zip(tasks, wrong, strict=True)))
    assert [s.outcome for s in bad] == [s.outcome for s in bad if not s.passed]
    assert all(s.outcome in {"fail", "error"} for s in bad)


async def test_a_shifted_reference_fails(sandbox: Sandbox) -> None:
    # Another task's reference almost never solves this one: the tests discriminate.
    tasks = generate("infer", 20, 9, 2)
    shifted = [tasks[(i + 1) % len(tasks)].reference for i in range(len(tasks))]
    got = await asyncio.gather(*(score(sandbox, t, c) for t, c in zip(tasks, shifted, strict=True)))
    assert sum(s.passed for s in got) <= 2
