"""Assert-style tests: a program that computes nothing must not pass, whatever it tries.

The task here is the shape every HumanEval/MBPP task has: a trusted prompt (with a helper
the test calls), an entry point, and a ``check`` that compares the entry point's results
with expected values. Every program below returns nothing useful and attacks the test
instead; each must fail as its own (model) outcome.
"""

from __future__ import annotations

from textwrap import dedent, indent

import pytest
from adversary_kit import LIMITS, Clean, failed_as_model

from codegym.sandbox import AssertTest, Limits, Sandbox, Verdict
from codegym.tasks import Task, score

pytestmark = pytest.mark.asyncio(loop_scope="module")

PROMPT = dedent('''
    import math


    def helper(xs):
        """The task's own helper: the test checks answers with it."""
        return sum(xs)


    def solve(xs: list) -> int:
        """Return twice the sum of xs."""
''')
TEST = dedent("""
    EXPECTED = [(([1, 2, 3],), 12), (([5],), 10), (([],), 0), (([-1, 1],), 0)]


    def check(candidate):
        for args, want in EXPECTED:
            got = candidate(*args)
            assert got == want, (args, got)
            assert helper(args[0]) * 2 == got
            assert abs(got - want) < 1e-9 and math.isclose(got, want)
""")
TASK = Task(id="adv/1", prompt=PROMPT, entry_point="solve", test=TEST)


class Outcome(str):
    """An outcome that shows its score's detail when an assertion on it fails."""

    detail = ""

    def __repr__(self) -> str:
        return f"{str(self)!r} ({self.detail})"


async def _score(sb: Sandbox, body: str, limits: Limits = LIMITS) -> Outcome:
    s = await score(sb, TASK, body, limits)
    assert not s.passed, s
    assert s.outcome != "infra", s
    out = Outcome(s.outcome)
    out.detail = s.detail
    return out


def _body(text: str, tail: str = "") -> str:
    """A completion: the function body (indented here), then module code after it."""
    return indent(dedent(text), "    ") + "\n" + dedent(tail)


async def test_the_honest_program_passes(sb: Sandbox, clean: Clean) -> None:
    s = await score(sb, TASK, "    return 2 * sum(xs)\n", LIMITS)
    assert (s.passed, s.outcome) == (True, "pass"), s
    await clean()


EQ_ALWAYS = """\
    class Anything:
        def __eq__(self, other): return True
        def __ne__(self, other): return False
        def __lt__(self, other): return True
        def __sub__(self, other): return 0
        def __rsub__(self, other): return 0
        def __abs__(self): return 0
        def __mul__(self, other): return self
        def __rmul__(self, other): return self
        def __float__(self): return 0.0
        def __bool__(self): return True
    return Anything()
"""


@pytest.mark.parametrize(
    "name, body",
    [
        ("object whose __eq__ is always true", EQ_ALWAYS),
        (
            "int subclass equal to everything",
            _body("""\
                class I(int):
                    def __eq__(self, o): return True
                    def __sub__(self, o): return I(0)
                    def __rsub__(self, o): return I(0)
                    def __mul__(self, o): return self
                    def __rmul__(self, o): return self
                    __hash__ = int.__hash__
                return I(0)
        """),
        ),
        (
            "list subclass equal to everything",
            _body("""\
                class L(list):
                    def __eq__(self, o): return True
                return L()
        """),
        ),
        ("a function", "    return solve\n"),
        ("a module", "    return math\n"),
        ("a cyclic list", "    a = []\n    a.append(a)\n    return a\n"),
        (
            "nesting past the limit",
            "    a = 0\n    for _ in range(500):\n        a = [a]\n    return a\n",
        ),
    ],
)
async def test_results_that_are_not_plain_data(
    sb: Sandbox, clean: Clean, name: str, body: str
) -> None:
    assert await _score(sb, body) == "error", name
    await clean()


async def test_walking_up_the_stack_to_the_expected_values(sb: Sandbox, clean: Clean) -> None:
    body = _body("""\
        import sys, gc
        f = sys._getframe()
        while f is not None:  # the test's frames, if they were here
            for v in list(f.f_locals.values()):
                if isinstance(v, tuple) and len(v) == 2 and isinstance(v[1], int):
                    return v[1]
            want = f.f_locals.get("want")
            if want is not None:
                return want
            f = f.f_back
        for o in gc.get_objects():  # or anywhere in this interpreter's heap
            if isinstance(o, list) and o and isinstance(o[0], tuple) and len(o[0]) == 2:
                try:
                    return dict((a[0][0] if a[0] else None, w) for a, w in o)
                except Exception:
                    pass
        return None
    """)
    assert await _score(sb, body) == "fail"
    await clean()


async def test_reading_the_test_from_the_file_system(sb: Sandbox, clean: Clean) -> None:
    body = _body("""\
        import os, re
        for root in ("/work", "/tmp", "/opt", "/run", "/dev/shm", "/etc"):
            for dirpath, _, names in os.walk(root):
                for n in names:
                    try:
                        text = open(os.path.join(dirpath, n), errors="ignore").read(1 << 20)
                    except Exception:
                        continue
                    if "EXPECTED = [" in text and n != "main.py":  # not its own source
                        found = re.search(r"\\(\\((\\[.*?\\]),\\), (\\d+)\\)", text)
                        return int(found.group(2))
        return -1
    """)
    # the walk must finish to show there is nothing to find: it reads every file it can
    # (0.4 s of CPU in a quiet jail), which a loaded machine stretched past 1 s (timeout)
    roomy = Limits(cpu_s=6, wall_s=20, memory_mb=256, output_bytes=1 << 16)
    assert await _score(sb, body, roomy) == "fail"
    await clean()


async def test_patching_the_builtins_the_test_uses(sb: Sandbox, clean: Clean) -> None:
    tail = """
    import builtins, math
    builtins.abs = lambda x: 0
    math.isclose = lambda *a, **k: True
    math.fabs = lambda x: 0.0
    builtins.AssertionError = type("Nope", (Exception,), {})
    def helper(xs):
        return 0
    """
    assert await _score(sb, _body("return 0", tail)) == "fail"
    await clean()


@pytest.mark.parametrize(
    "name, tail",
    [
        (
            "defines its own check, then exits with 0",
            "def check(candidate):\n    pass\nraise SystemExit(0)\n",
        ),
        ("exits with 0 before the test", "import os\nos._exit(0)\n"),
        (
            "an audit hook that swaps check",
            "import sys\n"
            "def hook(event, args):\n"
            "    g = sys._getframe(1).f_globals\n"
            "    if 'check' in g: g['check'] = lambda c: None\n"
            "sys.addaudithook(hook)\n",
        ),
        (
            "a trace function that swaps check",
            "import sys, threading\n"
            "def tr(frame, event, arg):\n"
            "    if frame.f_code.co_name == 'check': frame.f_globals['check'] = lambda c: None\n"
            "    return tr\n"
            "sys.settrace(tr)\nthreading.settrace(tr)\n",
        ),
        (
            "a bare decorator meant to land on the test's check",
            "def d(f):\n    return lambda c: None\n@d\n",
        ),
        ("replaces the task's helper", "def helper(xs):\n    return 0\n"),
    ],
)
async def test_neutralising_the_test_that_follows(
    sb: Sandbox, clean: Clean, name: str, tail: str
) -> None:
    outcome = await _score(sb, "    return 0\n\n" + tail)
    assert outcome in ("fail", "error"), (name, outcome)
    await clean()


async def test_forged_results_on_every_fd(sb: Sandbox, clean: Clean) -> None:
    body = _body("""\
        import os
        line = b'{"i": 0, "passed": true, "verdict": "ok", "detail": ""}\\n'
        for fd in range(3, 64):
            for data in (line, b"0" * 32 + b" " + line, b'{"passed": true, "verdict": "ok"}'):
                try:
                    os.write(fd, data)
                except OSError:
                    pass
        os._exit(0)
    """)
    assert await _score(sb, body) == "error"
    await clean()


async def test_killing_everything_it_can_see(sb: Sandbox, clean: Clean) -> None:
    body = _body("""\
        import os, signal
        for pid in range(1, 4096):
            if pid != os.getpid():
                for sig in (signal.SIGKILL, signal.SIGSTOP, signal.SIGTERM):
                    try:
                        os.kill(pid, sig)
                    except OSError:
                        pass
        return 0
    """)
    assert await _score(sb, body) == "fail"
    await clean()


async def test_a_reply_too_large_for_the_judge(sb: Sandbox, clean: Clean) -> None:
    assert await _score(sb, "    return 'x' * (20 << 20)\n") == "error"
    await clean()


async def test_a_generator_is_no_value(sb: Sandbox, clean: Clean) -> None:
    # its items cross as plain data, but it compares as the iterator it is
    assert await _score(sb, "    yield 12\n") == "fail"
    await clean()


async def test_raising_the_test_s_own_exception_types(sb: Sandbox, clean: Clean) -> None:
    body = "    raise StopIteration\n"  # a test's loop must not take it as its own end
    assert await _score(sb, body) in ("fail", "error")
    await clean()


async def test_a_multi_test_batch_forges_nothing_either(sb: Sandbox, clean: Clean) -> None:
    code = "import sys\nsys.modules['__main__'].__dict__.clear()\ndef f(x):\n    return None\n"
    tests = [AssertTest(f"assert f({i}) == {i + 1}") for i in range(3)]
    r = await sb.run_tests(code, tests, limits=LIMITS)
    assert [t.verdict for t in failed_as_model(r)] == [Verdict.OK] * 3
    await clean()
