"""EvalPlus records judged as evalplus judges them: base and plus parts, expected outputs
from the reference (computed in the judge, once), per-input time budgets, the tolerance,
the special oracles, MBPP+'s rebuilt inputs; and the release files themselves where
``../shared/data/evalplus`` is present (their references must pass, both parts).

The per-sample agreement with evalplus's own evaluator on over a thousand samples per
dataset is measured by ``benchmarks/evalplus_plus_bench.py`` (evalplus lives in a venv of
its own); here, what each rule does, on records written for the purpose.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from codegym.evals.runner import Runner
from codegym.sandbox import Sandbox
from codegym.store import DictCache, Store
from codegym.tasks import Task, load_suite, score
from codegym.tasks.evalplus import to_task

SHARED = Path(__file__).parents[3] / "shared" / "data" / "evalplus"


def _task(**over: Any) -> Task:
    row = {
        "task_id": "HumanEval/900",
        "prompt": "def f(x):\n",
        "entry_point": "f",
        "canonical_solution": "    return x * 2\n",
        "base_input": [[1], [2]],
        "plus_input": [[3], [4], [5]],
        "atol": 0,
    }
    return to_task({**row, **over}, "x")


async def test_both_parts_are_judged_and_reported(sandbox: Sandbox) -> None:
    t = _task()
    ok = await score(sandbox, t, t.reference)
    assert ok.passed and ok.parts == (("base", "pass"), ("plus", "pass")), ok
    # right on the base inputs, wrong on a plus one: base passes, the sample does not
    plus_only = await score(sandbox, t, "    return 11 if x == 5 else x * 2\n")
    assert not plus_only.passed and plus_only.parts == (("base", "pass"), ("plus", "fail"))
    assert "plus input 2: expected 10, got 11" in plus_only.detail, plus_only.detail
    missing = await score(sandbox, t, "    return 1\ndel f\n")
    assert dict(missing.parts) == {"base": "error", "plus": "error"}


async def test_float_outputs_are_compared_with_evalplus_tolerance(sandbox: Sandbox) -> None:
    t = _task(canonical_solution="    return x / 3\n", base_input=[[1.0]], plus_input=[[2]])
    near = await score(sandbox, t, "    return x / 3 + 1e-9\n")  # within the 1e-6 default
    assert near.passed, near.detail
    far = await score(sandbox, t, "    return x / 3 + 1e-4\n")
    assert not far.passed and "atol 1e-06" in far.detail
    # the type must match once the tolerance is used: an int for a float is wrong
    wide = _task(canonical_solution="    return 2.0000001\n", atol=1e-3)
    assert not (await score(sandbox, wide, "    return 2\n")).passed
    assert (await score(sandbox, wide, "    return 2.0\n")).passed
    lists = _task(canonical_solution="    return [x / 3, 1.0]\n", base_input=[[1]])
    assert (await score(sandbox, lists, "    return [x / 3 + 1e-9, 1.0]\n")).passed
    assert not (await score(sandbox, lists, "    return [x / 3]\n")).passed  # length
    assert not (await score(sandbox, lists, "    return (x / 3, 1.0)\n")).passed  # type


async def test_each_input_has_its_budget_from_the_reference(sandbox: Sandbox) -> None:
    t = _task()
    slow = "    import time\n    if x == 4:\n        time.sleep(3)\n    return x * 2\n"
    r = await score(sandbox, t, slow)
    # max(1 s, 4 x the reference's microseconds): 1 s for input 4, well before 3 s
    assert dict(r.parts) == {"base": "pass", "plus": "timeout"}, r
    assert r.outcome == "timeout" and r.wall_s < 5, r
    forever = await score(sandbox, t, "    while True:\n        pass\n")
    assert dict(forever.parts) == {"base": "timeout", "plus": "timeout"}


async def test_budgets_come_from_the_references_cpu_time_not_its_wall_clock(
    sandbox: Sandbox,
) -> None:
    # the judge times the reference while the program already runs, so anything that
    # stalls the judge (busy loops the program starts at import) stretches its wall clock:
    # the budget is 4 x CPU time. A reference that waits 1.5 s computing nothing has the
    # 1 s minimum there, and a program waiting as long misses it (6 s by wall clock)
    wait = "    import time\n    if x == 4:\n        time.sleep(1.5)\n    return x * 2\n"
    t = _task(canonical_solution=wait)
    r = await score(sandbox, t, wait)
    assert dict(r.parts) == {"base": "pass", "plus": "timeout"}, r


async def test_the_program_cannot_collide_with_the_checker(sandbox: Sandbox) -> None:
    # an entry point named like a builtin and like the checker's helpers
    t = _task(prompt="def sum(x):\n", entry_point="sum")
    assert (await score(sandbox, t, t.reference)).passed
    hostile = (
        "    return x * 2\n"
        "__evalplus__ = None\n__judge__ = None\njson = None\n"
        "def run(*a):\n    return True\n"
    )
    assert (await score(sandbox, t, hostile)).passed  # nothing of it reaches the judge
    wrong = hostile.replace("x * 2", "x * 3")
    assert not (await score(sandbox, t, wrong)).passed


async def test_an_oracle_reads_the_inputs_as_given_not_as_the_program_left_them(
    sandbox: Sandbox,
) -> None:
    t = _task(
        task_id="HumanEval/32",
        prompt="def find_zero(xs):\n",
        entry_point="find_zero",
        canonical_solution="    return -xs[0] / xs[1]\n",
        base_input=[[[2.0, 4.0]]],
        plus_input=[[[-3.0, 1.5]]],
        atol=1e-4,
    )
    assert (await score(sandbox, t, t.reference)).passed
    zeroing = "    xs[:] = [0.0] * len(xs)\n    return 12345.0\n"  # every x is a root of 0
    r = await score(sandbox, t, zeroing)
    assert not r.passed and "is no root" in r.detail, r


async def test_a_broken_reference_is_the_tasks_fault(sandbox: Sandbox) -> None:
    t = _task(canonical_solution="    return 1 / 0\n")
    r = await score(sandbox, t, "    return x * 2\n")
    assert r.outcome == "infra" and "ZeroDivisionError" in r.detail, r


async def test_mbpp_oracles_and_rebuilt_inputs(sandbox: Sandbox) -> None:
    # Mbpp/2: its argument lists are tuples again, and outputs compare as sets
    t = to_task(
        {
            "task_id": "Mbpp/2",
            "prompt": '"""\nShared elements.\n"""\n',
            "entry_point": "similar_elements",
            "canonical_solution": "def similar_elements(a, b):\n"
            "    assert type(a) is tuple\n    return tuple(set(a) & set(b))\n",
            "base_input": [[[3, 4, 5], [5, 4, 9]]],
            "plus_input": [[[1, 2], [2, 1]]],
            "atol": 0,
        },
        "x",
    )
    ordered = "def similar_elements(a, b):\n    return tuple(sorted(set(a) & set(b), reverse=1))\n"
    assert (await score(sandbox, t, ordered)).passed
    lists = "def similar_elements(a, b):\n    assert type(b) is tuple\n    return [5]\n"
    assert not (await score(sandbox, t, lists)).passed
    # Mbpp/737-style: only "not None" counts, so a re.Match (not plain data) is fine
    m = to_task(
        {
            "task_id": "Mbpp/737",
            "prompt": '"""\nStarts with a vowel.\n"""\n',
            "entry_point": "check_str",
            "canonical_solution": "import re\ndef check_str(s):\n"
            "    return re.match('^[aeiou]', s)\n",
            "base_input": [["apple"], ["pear"]],
            "plus_input": [],
            "atol": 0,
        },
        "x",
    )
    same = "import re\ndef check_str(s):\n    return re.search('^[aeiou]', s)\n"
    assert (await score(sandbox, m, same)).passed
    inverted = "def check_str(s):\n    return None if s[0] in 'aeiou' else 1\n"
    assert not (await score(sandbox, m, inverted)).passed


async def test_parts_survive_the_result_store(sandbox: Sandbox, tmp_path: Path) -> None:
    t = _task()
    sample = {"task_id": t.id, "completion": "    return 11 if x == 5 else x * 2\n"}
    with Store(tmp_path / "s.duckdb") as store:
        first = await Runner(sandbox, cache=DictCache(store)).score_samples([(t, sample)])
        again = await Runner(sandbox, cache=DictCache(store)).score_samples([(t, sample)])
    assert first[0].parts == again[0].parts == {"base": "pass", "plus": "fail"}
    assert again[0].cached and again[0].row()["parts"] == {"base": "pass", "plus": "fail"}


def test_bad_records_are_refused_by_field() -> None:
    from codegym.tasks.formats import RecordError

    for over, field in (
        ({"atol": -1}, "atol"),
        ({"entry_point": "__init__"}, "entry_point"),
        ({"plus_input": "[1]"}, "plus_input"),
        ({"canonical_solution": ""}, "canonical_solution"),
    ):
        with pytest.raises(RecordError, match=field):
            _task(**over)


@pytest.mark.skipif(not SHARED.is_dir(), reason="the EvalPlus release files are not beside")
@pytest.mark.parametrize("name", ["HumanEvalPlus.jsonl.gz", "MbppPlus.jsonl.gz"])
async def test_release_references_pass_both_parts(sandbox: Sandbox, name: str) -> None:
    tasks = load_suite(str(SHARED / name))
    assert len(tasks) in (164, 378)
    picked = list(tasks)[:: len(tasks) // 12][:12]  # a spread of a dozen, both parts each
    for t in picked:
        r = await score(sandbox, t, t.reference)
        assert r.passed and dict(r.parts) == {"base": "pass", "plus": "pass"}, (t.id, r)
