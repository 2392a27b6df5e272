"""Special judges: a task's checker decides whether an output is right.

Problems with several right answers (any shortest path, any valid colouring, a float to
some precision the statement defines) cannot be judged by comparing with one expected
output; contest systems run a *checker* given the input, the program's output and the
jury's answer. A task's ``checker`` is Python source defining

    def check(input: str, output: str, expected: str) -> bool | tuple[bool, str]

(the message says why an output is wrong). How a sample is judged:

1. the program runs on each case in a fresh run of its own, as stdin/stdout tests do; the
   first case that does not end normally decides (``timeout``, ``error``, …);
2. one more run, apart from the program's, runs the checker over the cases' outputs (a run
   per ``CHUNK_BYTES`` of them, each case's input, output and answer a file of its own):
   the program never reaches it, and sees nothing of it but its own outputs going in;
3. a ``check`` that returns false, raises or exits on an output (one it cannot read), or
   takes over ``PER_CASE_S`` on it, rejects that case: ``fail``, with its message;
4. a checker run that fails as a whole is run again on the expected answers: if it runs
   there, the program's outputs broke it (``fail``); if not, the checker itself is broken,
   the task's fault (``infra``), never the program's. A checker that blames right outputs
   is found by ground truth, which runs the reference through it (``verify``).
"""

from __future__ import annotations

import json
from typing import Final

from codegym.sandbox import Limits, Verdict
from codegym.sandbox.api import SandboxAPI
from codegym.tasks.task import Task

CHECKER_LIMITS: Final = Limits(cpu_s=30.0, wall_s=90.0, memory_mb=1024, output_bytes=1 << 16)
PER_CASE_S: Final = 5.0
"""Wall clock ``check`` has for one output: past it, the output is rejected."""
CHUNK_BYTES: Final = 8 << 20
"""Inputs, outputs and answers one checker run takes (a run's files and requests are
capped, a service's request bodies too)."""

# Runs in the checker's own run: each case's input, output and expected answer come as
# files of their own (no escaping to inflate them); the first rejected case, or "ok", goes
# out as the last line of stdout (what check() prints is kept apart).
_HARNESS: Final = f"""\
import io, json, signal, sys
class _Slow(Exception):
    pass
def _alarm(*_):
    raise _Slow
signal.signal(signal.SIGALRM, _alarm)
_out = sys.stdout
sys.stdout = io.StringIO()
_ns = {{"__name__": "checker"}}
exec(compile(open("checker.py").read(), "checker.py", "exec"), _ns)
_check = _ns["check"]
def _read(name):
    with open(name, encoding="utf-8", errors="replace") as f:
        return f.read()
_verdict = "ok"
for _i in range(int(_read("n"))):
    _args = [_read(f"c/{{_i}}.{{k}}") for k in ("in", "out", "exp")]
    try:
        signal.setitimer(signal.ITIMER_REAL, {PER_CASE_S!r})
        try:
            _r = _check(*_args)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
        _ok, _why = _r if isinstance(_r, tuple) and len(_r) == 2 else (_r, "")
        if not (_ok is True or _ok == 1):
            _verdict = [_i, str(_why)[:300] or "the checker rejected the output"]
    except _Slow:
        _verdict = [_i, "the checker took over {PER_CASE_S:g}s on this output"]
    except (Exception, SystemExit) as _e:  # a testlib-style exit rejects, as any raise
        _verdict = [_i, f"the checker cannot read the output: {{type(_e).__name__}}: {{_e}}"[:300]]
    if _verdict != "ok":
        break
_out.write("\\n" + json.dumps(_verdict) + "\\n")
_out.flush()
"""


async def score_with_checker(
    sandbox: SandboxAPI, task: Task, program: str, limits: Limits, workspace: str | None = None
) -> tuple[bool, str, str, float, float]:
    """(passed, outcome, detail, cpu_s, wall_s) of ``program`` on ``task``'s cases, judged
    by its checker (see the module docstring); the program runs in ``workspace`` (the
    task's image), the checker on the sandbox's own Python."""
    outputs: list[str] = []
    cpu = wall = 0.0
    for i, case in enumerate(task.io_cases):
        r = await sandbox.run_python(program, case.stdin, limits=limits, workspace=workspace)
        cpu, wall = cpu + r.cpu_s, wall + r.wall_s
        if r.verdict is not Verdict.OK:
            return False, r.verdict.value, f"case {i}: {r.reason}"[:500], cpu, wall
        outputs.append(r.stdout)
    cases = [(c.stdin, out, c.expected) for c, out in zip(task.io_cases, outputs, strict=True)]
    for first, chunk in _chunks(cases):
        verdict = await _judge(sandbox, task.checker, chunk)
        if isinstance(verdict, str):
            # it could not run on these outputs: on the expected answers it can, or the
            # checker itself is broken (ours); a program whose output broke it, failed
            ok_on_answers = await _judge(sandbox, task.checker, [(i, e, e) for i, _, e in chunk])
            if isinstance(ok_on_answers, str):
                why = f"the task's checker failed: {verdict}"
                return False, "infra", why, cpu, wall
            why = f"cases {first}-{first + len(chunk) - 1}: the checker failed on them: {verdict}"
            return False, "fail", why[:500], cpu, wall
        if verdict is not None:
            index, why = verdict
            return False, "fail", f"case {first + index}: {why}", cpu, wall
    return True, "pass", "", cpu, wall


def _chunks(cases: list[tuple[str, str, str]]) -> list[tuple[int, list[tuple[str, str, str]]]]:
    """The cases in runs of at most ``CHUNK_BYTES`` (one case at least), with the first's
    index."""
    out: list[tuple[int, list[tuple[str, str, str]]]] = []
    size = CHUNK_BYTES
    for i, case in enumerate(cases):
        n = sum(len(x.encode("utf-8", "replace")) for x in case)
        if size + n > CHUNK_BYTES:
            out.append((i, []))
            size = 0
        out[-1][1].append(case)
        size += n
    return out


async def _judge(
    sandbox: SandboxAPI, checker: str, cases: list[tuple[str, str, str]]
) -> tuple[int, str] | str | None:
    """The first case the checker rejects (index, why), None when it takes them all, or
    why it could not run."""
    files = {"checker.py": checker, "n": str(len(cases))}
    for i, (inp, out, exp) in enumerate(cases):
        files |= {f"c/{i}.in": inp, f"c/{i}.out": out, f"c/{i}.exp": exp}
    ran = await sandbox.run_python(_HARNESS, files=files, limits=CHECKER_LIMITS)
    if ran.verdict is not Verdict.OK:
        err = ran.stderr.strip().splitlines()
        return f"{ran.verdict.value}: {err[-1] if err else ran.reason}"[:500]
    lines = ran.stdout.strip().splitlines()
    try:
        got = json.loads(lines[-1])
    except (IndexError, json.JSONDecodeError):
        return "it wrote no verdict"
    if got == "ok":
        return None
    if (
        isinstance(got, list)
        and len(got) == 2
        and isinstance(got[0], int)
        and 0 <= got[0] < len(cases)
    ):
        return got[0], str(got[1])
    return "its verdict is malformed"
