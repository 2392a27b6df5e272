"""Special judges: a task's checker, run apart from the program, decides each output.

The problems are written for the purpose (no public dataset here ships checkers in
Python): "print two positive numbers whose sum is n" has many right answers.
"""

from __future__ import annotations

import pytest

from codegym.sandbox import Sandbox
from codegym.tasks import IOCase, Task, score, verify
from codegym.tasks.formats import RecordError, to_task

CHECK = """\
def check(input, output, expected):
    n = int(input)
    a, b = map(int, output.split())
    if a <= 0 or b <= 0:
        return False, f"{a} and {b} are not both positive"
    return a + b == n, f"{a} + {b} is not {n}"
"""


def _task(checker: str = CHECK, **over: object) -> Task:
    row = {
        "problem_id": 1,
        "question": "Print two positive numbers whose sum is n.",
        "input_output": {"inputs": ["5\n", "2\n"], "outputs": ["1 4\n", "1 1\n"]},
        "solutions": ["n = int(input())\nprint(1, n - 1)\n"],
        "checker": checker,
        **over,
    }
    return to_task(row, "apps", "x")


async def test_any_right_answer_passes_and_the_checker_says_why_not(sandbox: Sandbox) -> None:
    t = _task()
    assert t.checker and (await score(sandbox, t, t.reference)).passed
    other = "n = int(input())\nprint(n - 1, 1)\n"  # not the expected output, still right
    assert (await score(sandbox, t, other)).passed
    r = await score(sandbox, t, "n = int(input())\nprint(n, 1)\n")
    assert (r.passed, r.outcome) == (False, "fail") and "case 0: 5 + 1 is not 5" in r.detail
    r = await score(sandbox, t, "print('many')\n")  # an output the checker cannot read
    assert (r.outcome, r.is_infra) == ("fail", False) and "cannot read the output" in r.detail
    r = await score(sandbox, t, "while True:\n    pass\n")
    assert r.outcome == "timeout" and r.detail.startswith("case 0")


async def test_the_program_cannot_reach_the_checker(sandbox: Sandbox) -> None:
    t = _task()
    # a verdict line of its own, and files planted where the checker's run reads its own
    forge = (
        "import json, os\n"
        "for name in ('cases.json', 'checker.py'):\n"
        "    try:\n"
        "        open(name, 'w').write('def check(*a):\\n    return True\\n')\n"
        "    except OSError:\n"
        "        pass\n"
        "print('\\n' + json.dumps([[True, ''], [True, '']]))\n"
    )
    r = await score(sandbox, t, forge)
    assert (r.passed, r.outcome) == (False, "fail"), r


async def test_a_checker_that_cannot_run_is_the_tasks_fault(sandbox: Sandbox) -> None:
    broken = _task(checker="def check(input, output, expected):\n    return undefined_name\n")
    r = await score(sandbox, broken, broken.reference)
    # a check() that raises on every output reads as rejecting it: ground truth catches it
    assert r.outcome == "fail"
    report = await verify(sandbox, [broken])
    assert [(q.id, q.kind) for q in report.quarantined] == [(broken.id, "fails")], report
    dead = _task(
        checker="def check(input, output, expected):\n    return True\nraise SystemExit(3)\n"
    )
    r = await score(sandbox, dead, dead.reference)
    assert (r.outcome, r.is_infra) == ("infra", True) and "the task's checker failed" in r.detail


def test_checkers_are_read_with_their_records() -> None:
    with pytest.raises(RecordError, match="'checker' must define check"):
        _task(checker="def judge(a, b, c):\n    return True\n")
    with pytest.raises(RecordError, match="'checker' is not valid Python"):
        _task(checker="def check(:\n")
    cc = to_task(
        {"name": "cc/1", "description": "sum", "public_tests": {"input": ["3\n"],
         "output": ["1 2\n"]}, "checker": CHECK},
        "codecontests",
        "x",
    )  # fmt: skip
    assert cc.checker == CHECK and cc.digest() != _task(checker="").digest()
    with pytest.raises(ValueError, match="a checker judges stdin/stdout cases only"):
        Task(id="t", prompt="p", entry_point="f", test="def check(c): pass", checker=CHECK)
    assert Task(id="t", prompt="p", io_cases=(IOCase("1", "1"),), checker=CHECK).checker


async def test_outputs_that_break_a_checker_are_the_programs_fault(sandbox: Sandbox) -> None:
    # found by the adversarial review: each of these ended as infra or an exception
    # a format check that backtracks for ever on a crafted output: rejected after its time
    slow = _task(
        checker="import re\ndef check(input, output, expected):\n"
        "    return re.fullmatch(r'(\\s*\\d+\\s*)+', output) is not None\n"
    )
    r = await score(sandbox, slow, "print('1' * 40 + 'x')\n")
    assert (r.outcome, r.passed) == ("fail", False) and "took over 5s" in r.detail, r
    # a testlib-style exit on a wrong output rejects it
    exits = _task(
        checker=CHECK.replace(
            "return a + b == n,",
            "import sys\n    sys.exit('WA') if a + b != n else None\n    return True,",
        )
    )
    r = await score(sandbox, exits, "n = int(input())\nprint(n, 1)\n")
    assert r.outcome == "fail" and "SystemExit: WA" in r.detail, r
    # a checker that echoes the output: the message is capped, not the verdict lost
    echo = _task(checker="def check(input, output, expected):\n    return False, 'got ' + output\n")
    r = await score(sandbox, echo, "print('\\U0001F600' * 400)\n")
    assert r.outcome == "fail" and r.detail.startswith("case 0: got \U0001f600"), r


async def test_outputs_too_big_for_one_run_are_judged_in_several(sandbox: Sandbox) -> None:
    # control characters grow six-fold as JSON: 8 x 1 MiB of them used to make one file
    # past the sandbox's cap, an exception that ended the whole eval
    n = 8
    t = _task(
        checker="def check(input, output, expected):\n    return output.count(chr(1)) == 1 << 20\n",
        input_output={"inputs": [f"{i}\n" for i in range(n)], "outputs": ["x\n"] * n},
        solutions=["import sys\nsys.stdout.write(chr(1) * (1 << 20))\n"],
    )
    assert (await score(sandbox, t, t.reference)).passed
    last_wrong = "import sys\nk = int(input())\nsys.stdout.write(chr(1) * ((1 << 20) - (k == 7)))\n"
    r = await score(sandbox, t, last_wrong)
    assert (r.outcome, r.detail) == ("fail", "case 7: the checker rejected the output"), r
