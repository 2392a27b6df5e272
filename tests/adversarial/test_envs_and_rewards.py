"""Environments, sessions and rewards: an agent cannot void its failures or be paid for
nothing, and its workspace cannot be turned against the sandbox.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import pytest
from adversary_kit import Clean

from codegym.envs import Resources
from codegym.policies import Generation, SamplingParams
from codegym.rollout import EnvSpec, LocalExecutor, RolloutConfig, RolloutEngine
from codegym.sandbox import IOTest, Sandbox, SandboxInputError, Session, Verdict
from codegym.tasks import score
from codegym.tasks.synthetic import generate

pytestmark = pytest.mark.asyncio(loop_scope="module")

TASK = generate("infer", 1, 3, 1)[0]
WRONG = TASK.prompt + "    return None\n"


class ToolCalls:
    """A chat policy that answers with fixed OpenAI tool calls, one per turn (by the turn's
    number in the conversation, so a retried episode replays the same calls)."""

    name = "toolcalls"

    def __init__(self, calls: Sequence[tuple[str, dict[str, Any]]]) -> None:
        self.calls = list(calls)

    async def generate(self, prompt: Any, params: SamplingParams) -> list[Generation]:
        turn = sum(m["role"] == "assistant" for m in prompt)
        name, args = self.calls[turn]
        call = {
            "id": f"c{turn}",
            "type": "function",
            "function": {"name": name, "arguments": json.dumps(args)},
        }
        return [Generation("", "tool_calls", tool_calls=(call,), tokens_out=5)]


async def _episode(sb: Sandbox, calls: Sequence[tuple[str, dict[str, Any]]]) -> Any:
    ex = LocalExecutor(EnvSpec("tool", {}), ToolCalls(calls), SamplingParams(), Resources(sb))
    engine = RolloutEngine(ex, RolloutConfig(group_size=1), env="tool")
    groups = [g async for g in engine.run([TASK])]
    return engine.stats, groups[0].trajectories[0]


async def test_an_agent_cannot_void_a_failure_by_naming_infra(sb: Sandbox, clean: Clean) -> None:
    calls = [
        ("run_python", {"code": WRONG + "\nprint(f([1, 2]))"}),
        ("read_file", {"path": "/infra"}),  # its text quotes the path: "infra"
        ("write_file", {"path": "infra/x", "content": "sandbox infra failure"}),
        ("submit", {"code": WRONG}),
    ]
    stats, t = await _episode(sb, calls)
    assert (t.outcome, t.reward) == ("fail", 0.0), t.outcome
    assert stats.scored == 1 and not stats.excluded
    await clean()


async def test_a_file_where_a_folder_is_wanted_is_the_agent_s_error(
    sb: Sandbox, clean: Clean
) -> None:
    calls = [
        ("write_file", {"path": "notes", "content": "x"}),
        ("write_file", {"path": "notes/more", "content": "y"}),
        ("bash", {"command": "cat notes"}),
        ("submit", {"code": WRONG}),
    ]
    stats, t = await _episode(sb, calls)
    assert [io["ok"] for io in t.tool_io] == [True, False, True, True], t.tool_io
    assert (t.outcome, t.reward) == ("fail", 0.0) and not stats.excluded
    await clean()


async def test_an_agent_s_workspace_does_not_take_part_in_its_grading(
    sb: Sandbox, clean: Clean
) -> None:
    # a module planted in the workspace, shadowing what the submission imports
    plant = "def f(x):\n    return " + repr(TASK.reference) + "\n"
    calls = [
        ("write_file", {"path": "helper.py", "content": plant}),
        ("submit", {"code": "from helper import f\n"}),
    ]
    _, t = await _episode(sb, calls)
    assert t.outcome == "error", t.outcome  # no helper.py where grading happens
    await clean()


async def test_session_uploads_are_never_redirected_or_fatal(clean: Clean) -> None:
    from codegym.sandbox import WorkspaceError

    async with Session(disk_mb=8) as s:
        with pytest.raises(SandboxInputError):
            await s.write_file("n" * 300, "x")  # a name the file system refuses
        r = await s.run("mkdir d && ln -s /tmp e && mkfifo pipe && chmod 000 /work")
        assert r.verdict is Verdict.OK, r.stderr
        with pytest.raises(WorkspaceError, match=r"symbolic link|not a folder"):
            await s.write_file("e/escaped.txt", "x")
        with pytest.raises(WorkspaceError, match="not a regular file"):
            await s.write_file("pipe", "x")  # a FIFO would block the writer
        await s.write_file("d/ok.txt", "fine")  # modes the program set do not lock us out
        r = await s.run("chmod 755 /work && cat d/ok.txt && ls /tmp")
        assert (r.verdict, r.stdout) == (Verdict.OK, "fine"), (r.stdout, r.stderr)
        r = await s.run("dd if=/dev/zero of=fill bs=1M count=16 2>/dev/null; echo $?")
        with pytest.raises(WorkspaceError, match="No space"):
            await s.write_file("more.bin", b"x" * (4 << 20))
        r = await s.run_python("import os\nos.read(os.open('/proc/self/fd/4', os.O_RDONLY), 9)")
        assert r.verdict is Verdict.ERROR, r.reason  # no such fd: not the run's infra
        r = await s.run("rm fill && echo alive")
        assert (r.verdict, r.stdout) == (Verdict.OK, "alive\n"), r.reason  # same workspace
        assert s.infra_count == 0 and s.recycles == 0


async def test_integer_answers_compare_exactly_under_a_float_tolerance(
    sb: Sandbox, clean: Clean
) -> None:
    tests = [
        IOTest("", "998244353", compare="float", tolerance=1e-3),
        IOTest("", "0.5 998244353", compare="float", tolerance=1e-3),
    ]
    r = await sb.run_tests("print('998244000')", tests[:1])
    assert not r.tests[0].passed, r.tests
    r = await sb.run_tests("print('0.5004 998244353')", tests[1:])
    assert r.tests[0].passed, r.tests  # decimals keep their tolerance
    await clean()


async def test_text_with_no_utf8_form_is_the_completion_s_error(sb: Sandbox, clean: Clean) -> None:
    s = await score(sb, TASK, "    return x  # \ud800\n")
    assert (s.passed, s.outcome) == (False, "error") and "surrogate" in s.detail, s
    calls = [("submit", {"code": TASK.prompt + "    return x  # \udcff\ud800\n"})]
    stats, t = await _episode(sb, calls)
    assert (t.outcome, t.reward) == ("error", 0.0) and not stats.excluded, t.outcome
    await clean()
