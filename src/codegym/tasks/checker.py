"""Special judges: a task's checker decides whether an output is right.

Problems with several right answers (any shortest path, any valid colouring, a float to
some precision the statement defines) cannot be judged by comparing with one expected
output; contest systems run a *checker* given the input, the program's output and the
jury's answer. A task's ``checker`` is Python source defining

    def check(input: str, output: str, expected: str) -> bool | tuple[bool, str]

(the message says why an output is wrong). How a sample is judged:

1. the program runs on each case in a fresh run of its own, as stdin/stdout tests do; the
   first case that does not end normally decides (``timeout``, ``error``, …);
2. one more run, apart from the program's, runs the checker over every case's output:
   the program never reaches it, and sees nothing of it but its own outputs going in;
3. a ``check`` that returns false, or raises on an output (an output it cannot read), fails
   that case; a checker that cannot run at all (a syntax error, no ``check``, past its
   limits) is the task's fault, ``infra``, never the program's. A checker that blames right
   outputs is found by ground truth, which runs the reference through it (``verify``).
"""

from __future__ import annotations

import json
from typing import Final

from codegym.sandbox import ExecResult, Limits, Verdict
from codegym.sandbox.api import SandboxAPI
from codegym.tasks.task import Task

CHECKER_LIMITS: Final = Limits(cpu_s=20.0, wall_s=60.0, memory_mb=1024, output_bytes=1 << 20)

# Runs in the checker's own run: the cases (input, output, expected) come in a file, the
# verdicts go out as the last line of stdout (what check() prints is kept apart).
_HARNESS: Final = """\
import io, json, sys
_out = sys.stdout
sys.stdout = io.StringIO()
_ns = {"__name__": "checker"}
exec(compile(open("checker.py").read(), "checker.py", "exec"), _ns)
_check = _ns["check"]
_verdicts = []
for _inp, _got, _exp in json.load(open("cases.json")):
    try:
        _r = _check(_inp, _got, _exp)
        _ok, _why = _r if isinstance(_r, tuple) else (_r, "")
        _verdicts.append([_ok is True or _ok == 1, str(_why)[:300]])
    except Exception as _e:
        _why = f"the checker cannot read the output: {type(_e).__name__}: {_e}"
        _verdicts.append([False, _why[:300]])
_out.write("\\n" + json.dumps(_verdicts) + "\\n")
_out.flush()
"""


async def score_with_checker(
    sandbox: SandboxAPI, task: Task, program: str, limits: Limits
) -> tuple[bool, str, str, float, float]:
    """(passed, outcome, detail, cpu_s, wall_s) of ``program`` on ``task``'s cases, judged
    by its checker (see the module docstring)."""
    outputs: list[str] = []
    cpu = wall = 0.0
    for i, case in enumerate(task.io_cases):
        r = await sandbox.run_python(program, case.stdin, limits=limits)
        cpu, wall = cpu + r.cpu_s, wall + r.wall_s
        if r.verdict is not Verdict.OK:
            return False, _outcome(r), f"case {i}: {r.reason}"[:500], cpu, wall
        outputs.append(r.stdout)
    cases = [[c.stdin, out, c.expected] for c, out in zip(task.io_cases, outputs, strict=True)]
    ran = await sandbox.run_python(
        _HARNESS,
        files={"checker.py": task.checker, "cases.json": json.dumps(cases)},
        limits=CHECKER_LIMITS,
    )
    verdicts = _verdicts(ran, len(cases))
    if isinstance(verdicts, str):
        return False, "infra", f"the task's checker failed: {verdicts}", cpu, wall
    for i, (ok, why) in enumerate(verdicts):
        if not ok:
            return False, "fail", f"case {i}: {why or 'the checker rejected the output'}", cpu, wall
    return True, "pass", "", cpu, wall


def _outcome(r: ExecResult) -> str:
    if r.verdict is Verdict.OK:
        return "pass"
    if r.verdict is Verdict.INFRA:
        return "infra"
    return r.verdict.value


def _verdicts(ran: ExecResult, n: int) -> list[tuple[bool, str]] | str:
    """The checker run's verdicts, or why there are none."""
    if ran.verdict is not Verdict.OK:
        err = ran.stderr.strip().splitlines()
        return f"{ran.verdict.value}: {err[-1] if err else ran.reason}"[:500]
    lines = ran.stdout.strip().splitlines()
    try:
        got = json.loads(lines[-1])
    except (IndexError, json.JSONDecodeError):
        return "it wrote no verdicts"
    if not isinstance(got, list) or len(got) != n:
        return f"it gave {len(got) if isinstance(got, list) else 'no'} verdicts for {n} cases"
    try:
        return [(bool(ok), str(why)) for ok, why in got]
    except (TypeError, ValueError):
        return "its verdicts are malformed"
