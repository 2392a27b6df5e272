"""What the adversarial review of the judge found, each kept as a standing test."""

from __future__ import annotations

import json
from textwrap import dedent

import pytest
from adversary_kit import LIMITS, Clean

from codegym.sandbox import AssertTest, IOTest, Limits, Sandbox, Session, Verdict
from codegym.tasks import IOCase, Task, load_humaneval, score
from codegym.tasks.evalplus import to_task
from codegym.tasks.livecodebench import to_task as lcb_task

pytestmark = pytest.mark.asyncio(loop_scope="module")

HE = {t.id: t for t in load_humaneval().tasks}


async def test_a_module_the_program_names_is_never_imported_by_the_judge(clean: Clean) -> None:
    # unittest.__main__ runs test discovery on import, from the judge's working dir; in
    # a session the program could plant a package there whose code forged a pass
    task = HE["HumanEval/0"]
    plant = dedent("""
        import os, types, json, struct
        open("/work/__init__.py", "w").write(
            "import os, json, struct\\n"
            "d = json.dumps({'passed': True, 'verdict': 'ok', 'detail': ''}).encode()\\n"
            "for fd in range(3, 16):\\n"
            "    try: os.write(fd, struct.pack('>I', len(d)) + d)\\n"
            "    except OSError: pass\\n"
            "os._exit(0)\\n")
        ENTRY = types.ModuleType("unittest.__main__")
    """).replace("ENTRY", task.entry_point)
    async with Session() as s:
        result = await score(s, task, "    pass\n" + plant)
        assert (result.passed, result.outcome) == (False, "error"), result
        assert s.infra_count == 0


async def test_would_be_tags_without_a_newline_cost_the_zygote_nothing(
    sb: Sandbox, clean: Clean
) -> None:
    junk = "import os\nos.write(3, (b'0' * 32 + b' ') * ((1 << 20) // 33))\n"
    r = await sb.run_python(junk, limits=LIMITS)
    assert r.verdict is Verdict.OK, r.reason
    s = await score(sb, HE["HumanEval/0"], "    return False\n\n" + junk)
    assert (s.passed, s.outcome) == (False, "fail"), s
    await clean()


async def test_an_integer_too_long_for_int_is_compared_not_crashed_on(
    sb: Sandbox, clean: Clean
) -> None:
    big = "9" * 5000
    task = Task(id="big", prompt="print it", io_cases=(IOCase("", big + "8"),), compare="float")
    s = await score(sb, task, f"print('{big}9')")
    assert (s.passed, s.outcome) == (False, "fail"), s
    s = await score(sb, task, f"print('{big}8')")
    assert (s.passed, s.outcome) == (True, "pass"), s
    await clean()


async def test_a_failure_message_holding_a_huge_program_value(sb: Sandbox, clean: Clean) -> None:
    code = "def f(x):\n    return 10 ** 5000\n"
    tests = [
        AssertTest("got = f(1)\nassert got == 2, (1, got)"),
        AssertTest("raise KeyError(f(1))"),
        AssertTest("assert f(1) == 10 ** 5000"),
    ]
    r = await sb.run_tests(code, tests, limits=LIMITS)
    assert [(t.passed, t.verdict) for t in r.tests] == [
        (False, Verdict.OK),
        (False, Verdict.ERROR),
        (True, Verdict.OK),
    ], r.tests
    await clean()


async def test_a_batch_slowed_at_every_teardown_ends_in_time_without_infra(
    sb: Sandbox, clean: Clean
) -> None:
    code = dedent("""
        import os, time
        os.makedirs("/tmp/d", exist_ok=True)
        n, t = 0, time.process_time()
        try:
            while time.process_time() - t < 1.0:
                for i in range(1000):
                    os.close(os.open(f"/tmp/d/f{n}", os.O_CREAT | os.O_WRONLY)); n += 1
        except OSError:
            pass
        time.sleep(100)
        def f(x):
            return x
    """)
    tests = [AssertTest(f"assert f({i}) == {i}") for i in range(6)]
    r = await sb.run_tests(code, tests, limits=Limits(cpu_s=2, wall_s=1.5))
    assert r.verdict is not Verdict.INFRA, r.reason
    assert all(t.verdict is Verdict.TIMEOUT for t in r.tests), r.tests
    await clean()


async def test_stdio_cases_do_not_share_scratch_files(sb: Sandbox, clean: Clean) -> None:
    code = dedent("""
        import os
        seen = sorted(os.listdir('/tmp') + os.listdir('/dev/shm') + os.listdir('.'))
        open('/tmp/count', 'a').write('x')
        open('/dev/shm/count', 'a').write('x')
        open('left', 'w').write('x')
        print([name for name in seen if name in ('count', 'left')])  # an earlier case's
    """)
    r = await sb.run_tests(code, [IOTest("", "[]")] * 3, limits=LIMITS)
    assert [t.passed for t in r.tests] == [True] * 3, r.tests
    await clean()


async def test_busy_loops_during_the_references_timing_buy_a_slow_program_no_time(
    sb: Sandbox, clean: Clean
) -> None:
    # found by the review of the EvalPlus checker: a program that starts busy loops at
    # import (stalling the judge while it timed the reference) and stops them at its
    # first call had its budgets stretched; correct but 12 x too slow, it passed (here 30 x,
    # so that the 1 s minimum is missed on a fast machine too)
    work = "sum(i * i for i in range(5_000_000))"
    task = to_task(
        {
            "task_id": "Mbpp/9001",
            "prompt": '"""\nDouble, slowly.\n"""\n',
            "entry_point": "f",
            "canonical_solution": f"def f(x):\n    if x == 4:\n        {work}\n    return x * 2\n",
            "base_input": [[1]],
            "plus_input": [[3], [4]],
            "atol": 0,
        },
        "x",
    )
    slow = dedent(f"""
        import os, signal
        KIDS = []
        for _ in range(4):
            pid = os.fork()
            if pid == 0:
                while True:
                    pass
            KIDS.append(pid)
        def f(x):
            while KIDS:
                os.kill(KIDS.pop(), signal.SIGKILL)
            if x == 4:
                for _ in range(30):
                    {work}
            return x * 2
    """)
    r = await score(sb, task, slow)
    assert dict(r.parts) == {"base": "pass", "plus": "timeout"}, r
    await clean()


LCB_ROW = {
    "question_id": "3000",
    "question_content": "Return n.",
    "public_test_cases": json.dumps([{"input": "1", "output": "1", "testtype": "functional"}]),
    "private_test_cases": "",
    "starter_code": "class Solution:\n    def same(self, n: int) -> int:\n        ",
    "metadata": json.dumps({"func_name": "same"}),
}


async def test_livecodebench_import_and_constructor_have_one_tests_time(
    sb: Sandbox, clean: Clean
) -> None:
    # found by the review of the LiveCodeBench format: the import and Solution() ran
    # before the first call's deadline, so a program could compute for the whole run's
    # limit there (7 s a test); LiveCodeBench gives them one test's 6 s
    task = lcb_task(LCB_ROW, "x")
    body = "class Solution:\n    def same(self, n):\n        return n\n"
    assert (await score(sb, task, body)).passed
    r = await score(sb, task, "import time\ntime.sleep(8)\n" + body)
    assert r.outcome == "timeout", r
    await clean()


async def test_a_huge_wrong_answer_is_a_fail_shown_by_its_size(sb: Sandbox, clean: Clean) -> None:
    # its repr (millions of digits) held the judge until the run's wall limit: a timeout
    task = lcb_task(LCB_ROW, "x")
    huge = "class Solution:\n    def same(self, n):\n        return 1 << 12_000_000\n"
    r = await score(sb, task, huge)
    assert (r.outcome, r.passed) == ("fail", False) and "<an int of 12000001 bits>" in r.detail
    await clean()


def test_a_reply_of_colliding_set_items_is_refused_not_built() -> None:
    # a program can hand-write its reply: ints that all hash to 0 take quadratic time to
    # put in a set, spent by the judge (60k of them: 11 s)
    from codegym.sandbox import _plain

    collide = [k * (2**61 - 1) for k in range(5000)]
    for wire in ({"s": collide}, {"d": [[k, 0] for k in collide]}):
        with pytest.raises(_plain.NotPlain, match="hashes collide"):
            _plain.loads(json.dumps(wire).encode())
    assert _plain.loads(json.dumps({"s": list(range(5000))}).encode()) == set(range(5000))


def test_a_reply_of_a_long_decimal_int_is_refused_not_parsed() -> None:
    # a hand-written reply's int of millions of decimal digits took the judge (which lifts
    # Python's digit cap) minutes to parse; honest replies send such ints as hex
    import sys

    from codegym.sandbox import _plain

    cap = sys.get_int_max_str_digits()
    sys.set_int_max_str_digits(0)  # as the judge runs
    try:
        with pytest.raises(_plain.NotPlain, match="decimal int of 5000 digits"):
            _plain.loads(b"[" + b"7" * 5000 + b"]")
        big = 7**20_000  # ~16,900 digits: crosses as hex and comes back whole
        assert _plain.loads(_plain.dumps(_plain.tree([big, 12]))) == [big, 12]
        assert _plain.loads(b"[" + b"9" * 4300 + b"]") == [int("9" * 4300)]
    finally:
        sys.set_int_max_str_digits(cap)
