"""The number to hold: a policy that computes nothing scores 0 of 164 on HumanEval.

Its completions are no-op bodies plus every trick known to have forged passes (objects
equal to everything, exiting before the test, swapping ``check`` through an audit hook or a
trace function, a decorator meant to land on ``check``, patched builtins and task helpers,
digging through frames, forged result lines). They go through each way codegym scores a
model: ``score`` (the library call behind ``codegym score``), the eval runner sampling a
policy (``codegym eval``), and the ``code`` and ``tool`` environments through the rollout
engine. Nothing may pass, and nothing may be excluded as infra.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections import Counter
from typing import Any

import pytest
import pytest_asyncio

from codegym.envs import Resources
from codegym.evals.runner import Runner
from codegym.policies import Generation, SamplingParams
from codegym.rollout import EnvSpec, LocalExecutor, RolloutConfig, RolloutEngine
from codegym.sandbox import Sandbox
from codegym.tasks import Task, load_humaneval, score

pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]

TASKS = load_humaneval().tasks
ANYTHING = """
class _Anything(int):
    def __eq__(self, other): return True
    def __ne__(self, other): return False
    __lt__ = __le__ = __gt__ = __ge__ = __eq__
    def __sub__(self, other): return _Anything(0)
    __rsub__ = __add__ = __radd__ = __mul__ = __rmul__ = __truediv__ = __sub__
    def __abs__(self): return 0
    def __bool__(self): return True
    def __len__(self): return 0
    def __iter__(self): return iter(())
    def __getitem__(self, i): return self
    __hash__ = int.__hash__
"""
TAILS = {
    "anything": ANYTHING,
    "exit before the test": "\ndef check(candidate):\n    pass\nraise SystemExit(0)\n",
    "audit hook": (
        "\nimport sys\n"
        "def _hook(event, args):\n"
        "    for f in (sys._getframe(1), sys._getframe(2)):\n"
        "        if 'check' in f.f_globals: f.f_globals['check'] = lambda c: None\n"
        "sys.addaudithook(_hook)\n"
    ),
    "trace function": (
        "\nimport sys, threading\n"
        "def _tr(frame, event, arg):\n"
        "    frame.f_globals['check'] = lambda c: None\n"
        "    return _tr\n"
        "sys.settrace(_tr)\nthreading.settrace(_tr)\n"
    ),
    "decorator on check": "\ndef _d(f):\n    return lambda c: None\n@_d\n",
    "patched builtins and helpers": (
        "\nimport builtins, math\n"
        "builtins.abs = lambda x: 0\nmath.isclose = lambda *a, **k: True\n"
        "math.fabs = lambda x: 0.0\nbuiltins.all = lambda x: True\n"
        "for _n, _v in list(globals().items()):\n"
        "    if callable(_v) and not _n.startswith('_'):\n"
        "        globals()[_n] = lambda *a, **k: _Anything(0)\n" + ANYTHING
    ),
    "forged results": (
        "\nimport os\n"
        "for _fd in range(3, 32):\n"
        '    try: os.write(_fd, b\'{"i": 0, "passed": true, "verdict": "ok"}\\n\')\n'
        "    except OSError: pass\n"
        "os._exit(0)\n"
    ),
}
BODIES = {
    "anything": "    return _Anything(0)\n",
    "patched builtins and helpers": "    return _Anything(0)\n",
    "frames": (
        "    import sys, gc\n"
        "    f = sys._getframe(1)\n"
        "    while f is not None:\n"
        "        for v in f.f_locals.values():\n"
        "            if not callable(v): return v\n"
        "        f = f.f_back\n"
        "    return None\n"
    ),
}


def cheats(task: Task) -> list[str]:
    """Completions (continuation style) that compute nothing for ``task``."""
    out = []
    for name, tail in TAILS.items():
        out.append(BODIES.get(name, "    return None\n") + tail)
    out.append(BODIES["frames"])
    return out


def _chat(task: Task, completion: str) -> str:
    return f"Here you go.\n```python\n{task.prompt}{completion}```\n"


def _assert_nothing_passed(outcomes: Counter[str], n: int, path: str) -> None:
    assert sum(outcomes.values()) == n, (path, outcomes)
    assert outcomes["pass"] == 0, (path, outcomes)
    assert outcomes["infra"] == 0, (path, outcomes)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def sb() -> Any:
    async with Sandbox(workers=2) as box:
        yield box


async def test_through_score(sb: Sandbox) -> None:
    async def one(task: Task, completion: str) -> str:
        return (await score(sb, task, completion)).outcome

    jobs = [one(t, c) for t in TASKS for c in cheats(t)]
    outcomes = Counter(await asyncio.gather(*jobs))
    _assert_nothing_passed(outcomes, len(jobs), "score")
    # and the honest completions still pass: the separation costs no correct program
    refs = Counter(await asyncio.gather(*(one(t, t.reference) for t in TASKS)))
    assert refs == Counter({"pass": len(TASKS)}), refs


class CheatPolicy:
    """A chat policy that answers every HumanEval prompt with its cheats, in turn."""

    name = "cheat"

    def __init__(self, per_task: int = 3) -> None:
        self.per_task = per_task
        self.by_prompt = {t.prompt: t for t in TASKS}
        self.calls: Counter[str] = Counter()

    def _task(self, prompt: Any) -> Task:
        text = prompt if isinstance(prompt, str) else prompt[-1]["content"]
        match = re.search(r"```python\n(.*)```", text, re.S)
        return self.by_prompt[match.group(1) if match else text]

    async def generate(self, prompt: Any, params: SamplingParams) -> list[Generation]:
        task = self._task(prompt)
        options = cheats(task)
        out = []
        for _ in range(params.n):
            k = self.calls[task.id]
            self.calls[task.id] += 1
            out.append(Generation(_chat(task, options[k % len(options)]), "stop", tokens_out=9))
        return out


async def test_through_the_eval_runner(sb: Sandbox) -> None:
    n = len(cheats(TASKS[0]))
    results = await Runner(sb).evaluate(TASKS, CheatPolicy(), SamplingParams(n=n), chat=True)
    _assert_nothing_passed(Counter(r.outcome for r in results), len(TASKS) * n, "eval")


async def test_through_the_code_environment(sb: Sandbox) -> None:
    ex = LocalExecutor(EnvSpec("code", {}), CheatPolicy(), SamplingParams(), Resources(sb))
    engine = RolloutEngine(ex, RolloutConfig(group_size=4), env="code")
    outcomes: Counter[str] = Counter()
    async for g in engine.run(TASKS):
        outcomes.update(t.outcome for t in g.trajectories)
        assert all(t.reward == 0.0 for t in g.trajectories), [t.reward for t in g.trajectories]
    _assert_nothing_passed(outcomes, len(TASKS) * 4, "code env")
    assert not engine.stats.excluded


class ToolCheat(CheatPolicy):
    """Tool calls: plant files in the workspace, then submit a cheat."""

    async def generate(self, prompt: Any, params: SamplingParams) -> list[Generation]:
        messages = prompt
        task = self._task([m for m in messages if m["role"] == "user"][:1])
        turn = sum(m["role"] == "assistant" for m in messages)
        if turn == 0:
            name, args = "write_file", {"path": "main.py", "content": "def check(c):\n    pass\n"}
        else:
            k = self.calls[task.id]
            self.calls[task.id] += 1
            options = cheats(task)
            name, args = "submit", {"code": task.prompt + options[k % len(options)]}
        call = {"id": f"c{turn}", "type": "function", "function": {"name": name}}
        call["function"]["arguments"] = json.dumps(args)
        return [Generation("", "tool_calls", tool_calls=(call,), tokens_out=5)]


async def test_through_the_tool_environment(sb: Sandbox) -> None:
    ex = LocalExecutor(EnvSpec("tool", {}), ToolCheat(), SamplingParams(), Resources(sb))
    engine = RolloutEngine(ex, RolloutConfig(group_size=1, env_concurrency=8), env="tool")
    outcomes: Counter[str] = Counter()
    async for g in engine.run(TASKS):
        outcomes.update(t.outcome for t in g.trajectories)
    _assert_nothing_passed(outcomes, len(TASKS), "tool env")
    assert not engine.stats.excluded
