"""LiveCodeBench records judged as LiveCodeBench judges them: its imports before every
program, functional tests by ``==`` (a tuple as a list), stdin tests line by line with
numbers as decimals, tests packed as released (base64/zlib/pickle), and ``--since``.

No LiveCodeBench release is reachable here (its files come from a hub), so the records
are written for the purpose, with the release files' fields and packing.
"""

from __future__ import annotations

import base64
import json
import pickle
import zlib
from pathlib import Path
from typing import Any

import pytest

from codegym.sandbox import Sandbox
from codegym.tasks import DatasetError, TaskSet, load_suite, score
from codegym.tasks.formats import RecordError, detect_format
from codegym.tasks.livecodebench import PER_TEST_S, to_task


def _packed(tests: list[dict[str, str]]) -> str:
    """Private tests as LiveCodeBench releases them."""
    return base64.b64encode(zlib.compress(pickle.dumps(json.dumps(tests)))).decode()


def _stdin_row(**over: Any) -> dict[str, Any]:
    row = {
        "question_id": "abc300_a",
        "question_title": "Halves",
        "question_content": "Read n and print n / 2, then n // 2.",
        "platform": "atcoder",
        "contest_date": "2024-05-04T00:00:00",
        "starter_code": "",
        "difficulty": "easy",
        "public_test_cases": json.dumps(
            [{"input": "3\n", "output": "1.5\n1\n", "testtype": "stdin"}]
        ),
        "private_test_cases": _packed(
            [{"input": "8\n", "output": "4.0\n4\n", "testtype": "stdin"}]
        ),
        "metadata": "{}",
    }
    return {**row, **over}


def _functional_row(**over: Any) -> dict[str, Any]:
    row = {
        "question_id": "2999",
        "question_title": "Min and max",
        "question_content": "Return the smallest and the largest of nums.",
        "platform": "leetcode",
        "contest_date": "2023-08-01T00:00:00",
        "starter_code": (
            "class Solution:\n    def minMax(self, nums: List[int]) -> List[int]:\n        "
        ),
        "difficulty": "easy",
        "public_test_cases": json.dumps(
            [{"input": "[3, 1, 2]", "output": "[1, 3]", "testtype": "functional"}]
        ),
        "private_test_cases": _packed(
            [{"input": "[5]", "output": "[5, 5]", "testtype": "functional"}]
        ),
        "metadata": json.dumps({"func_name": "minMax"}),
    }
    return {**row, **over}


async def test_stdin_problems_compare_lines_with_numbers_as_decimals(sandbox: Sandbox) -> None:
    t = to_task(_stdin_row(), "x")
    assert detect_format(_stdin_row()) == "livecodebench" and len(t.io_cases) == 2
    assert t.metadata["date"] == "2024-05-04" and t.limits and t.limits.wall_s == PER_TEST_S
    # "4" for "4.0" is the same decimal; sys and stdin come from LiveCodeBench's imports
    ok = (
        "def main():\n    n = int(stdin.readline())\n    print(n / 2 if n % 2 else n // 2)\n"
        "    print(n // 2)\nif __name__ == '__main__':\n    main()\n"
    )
    r = await score(sandbox, t, ok)
    assert r.passed, r.detail
    one_line = "n = int(input())\nprint(n / 2, n // 2)\n"  # the numbers, on one line
    assert not (await score(sandbox, t, one_line)).passed
    rounded = "n = int(input())\nprint(round(n / 2))\nprint(n // 2)\n"  # 2 is not 1.5
    assert not (await score(sandbox, t, rounded)).passed


async def test_functional_problems_call_the_solution_with_json_arguments(
    sandbox: Sandbox,
) -> None:
    t = to_task(_functional_row(), "x")
    assert t.entry_point == "Solution().minMax" and t.metadata["fn_name"] == "minMax"
    # List comes from LiveCodeBench's imports; a tuple compares as a list
    ok = (
        "class Solution:\n"
        "    def minMax(self, nums: List[int]) -> List[int]:\n"
        "        return (min(nums), max(nums))\n"
    )
    r = await score(sandbox, t, ok)
    assert r.passed, r.detail
    wrong = ok.replace("max(nums)", "nums[-1]")  # right on [5], wrong on [3, 1, 2]
    r = await score(sandbox, t, wrong)
    assert not r.passed and "test 0: returned [1, 2], expected [1, 3]" in r.detail, r.detail


def test_bad_records_are_refused_by_field() -> None:
    for name in ("not a name", "class", "_CASES"):
        with pytest.raises(RecordError, match="metadata 'func_name' must be a public"):
            to_task(_functional_row(metadata=json.dumps({"func_name": name})), "x")
    with pytest.raises(RecordError, match="'public_test_cases' is not valid JSON"):
        to_task(_stdin_row(public_test_cases="[" * 100_000), "x")  # too deep: not a crash
    # tests packed as bytes rather than str are JSON all the same
    raw = pickle.dumps(json.dumps([{"input": "2\n", "output": "1\n1\n"}]).encode())
    packed = base64.b64encode(zlib.compress(raw)).decode()
    assert len(to_task(_stdin_row(private_test_cases=packed), "x").io_cases) == 2
    with pytest.raises(RecordError, match="'private_test_cases' is neither JSON nor"):
        to_task(_stdin_row(private_test_cases="%%% not packed %%%"), "x")
    # a pickle that names a class is never loaded, whatever the class
    hostile = base64.b64encode(zlib.compress(pickle.dumps(Path("/etc/passwd")))).decode()
    with pytest.raises(RecordError, match="only plain data is read"):
        to_task(_stdin_row(private_test_cases=hostile), "x")
    with pytest.raises(RecordError, match="functional test 0: each input line"):
        bad = json.dumps([{"input": "[1", "output": "1", "testtype": "functional"}])
        to_task(_functional_row(public_test_cases=bad), "x")
    with pytest.raises(RecordError, match="no tests"):
        to_task(_stdin_row(public_test_cases="[]", private_test_cases=""), "x")


def test_since_keeps_the_problems_released_on_or_after_a_day(tmp_path: Path) -> None:
    path = tmp_path / "lcb.jsonl"
    path.write_text(json.dumps(_functional_row()) + "\n" + json.dumps(_stdin_row()) + "\n")
    every = load_suite(str(path))
    assert every.ids == ("2999", "abc300_a")
    newer = load_suite(str(path), since="2024-01-01")
    assert newer.ids == ("abc300_a",) and newer.digest != every.digest
    assert load_suite(str(path), since="2024-05-04").ids == ("abc300_a",)  # the day itself
    with pytest.raises(DatasetError, match="not a date: give it as YYYY-MM-DD"):
        every.since("May 2024")
    undated = TaskSet.of("u", [to_task(_stdin_row(contest_date=""), "x")])
    with pytest.raises(DatasetError, match="1 of 1 tasks have no release date"):
        undated.since("2024-01-01")
