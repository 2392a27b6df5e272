"""ToolEnv over a real sandbox session, driven through the engine; token-exact mode."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from typing import Any

from codegym.envs import ByteTokenizer, Resources
from codegym.policies import Generation, SamplingParams
from codegym.rollout import EnvSpec, LocalExecutor, RolloutConfig, RolloutEngine, replay_trajectory
from codegym.sandbox import Sandbox
from codegym.tasks.synthetic import generate

TASK = generate("infer", 1, 3, 1)[0]
SOLUTION = TASK.prompt + TASK.reference


class ScriptedTokenPolicy:
    """Plays fixed turns; samples are the turn's bytes (ByteTokenizer ids)."""

    def __init__(self, turns: Sequence[str]) -> None:
        self.name = "script"
        self.turns = list(turns)
        self.prompts: list[list[int]] = []

    async def generate_tokens(
        self, prompt_ids: Sequence[int], params: SamplingParams
    ) -> list[Generation]:
        self.prompts.append(list(prompt_ids))
        text = self.turns[len(self.prompts) - 1]
        ids = tuple(text.encode())
        return [
            Generation(
                text, "stop", token_ids=ids, logprobs=tuple(-0.5 for _ in ids), tokens_out=len(ids)
            )
        ]


class ToolCallPolicy:
    """Chat policy that answers with OpenAI tool calls."""

    name = "toolcalls"

    def __init__(self, calls: Sequence[tuple[str, dict[str, Any]]]) -> None:
        self.calls = list(calls)
        self.n = 0

    async def generate(self, prompt: Any, params: SamplingParams) -> list[Generation]:
        name, args = self.calls[self.n]
        self.n += 1
        call = {
            "id": f"call{self.n}",
            "type": "function",
            "function": {"name": name, "arguments": json.dumps(args)},
        }
        return [Generation("", "tool_calls", tool_calls=(call,), tokens_out=5)]


async def _run(policy: Any, sb: Sandbox, tokenizer: Any = None, **options: Any) -> Any:
    ex = LocalExecutor(
        EnvSpec("tool", options), policy, SamplingParams(), Resources(sb), tokenizer=tokenizer
    )
    engine = RolloutEngine(ex, RolloutConfig(group_size=1), env="tool")
    groups = [g async for g in engine.run([TASK])]
    assert engine.stats.requested == engine.stats.scored + sum(engine.stats.excluded.values())
    return groups[0]


async def test_text_fallback_token_exact_episode() -> None:
    turns = [
        f"I'll write it.\n```write_file sol.py\n{SOLUTION}```",
        "```bash\ncat sol.py | head -1; python3 -c 'import sol; print(sol.f([1, 2]))'\n```",
        f"```submit\n{SOLUTION}```",
    ]
    policy = ScriptedTokenPolicy(turns)
    tok = ByteTokenizer()
    async with Sandbox(workers=1) as sb:
        g = await _run(policy, sb, tokenizer=tok)
        (t,) = g.trajectories
        assert t.outcome == "pass" and t.reward == 1.0
        assert [io["name"] for io in t.tool_io] == ["write_file", "bash", "submit"]
        assert "def f(x):" in t.tool_io[1]["output"]
        # token-exact: the sequence is the first prompt extended by sampled and observation ids
        assert t.token_exact and len(t.token_ids) == len(t.loss_mask) == len(t.logprobs)
        sampled = [i for i, m in zip(t.token_ids, t.loss_mask, strict=False) if m]
        assert bytes(sampled).decode() == "".join(turns)
        for turn, prompt in zip(t.turns, policy.prompts, strict=False):
            assert list(turn.prompt_ids or ()) == prompt
            assert t.token_ids[: len(prompt)] == tuple(prompt)  # every prompt is a prefix
        assert policy.prompts[1][: len(policy.prompts[0])] == policy.prompts[0]
        assert tok.decode(policy.prompts[2]).count("[bash]") == 1
        diff = await replay_trajectory(t, Resources(sb))
        assert diff.same, diff.differences


async def test_tool_calls_errors_are_observations_and_budgets_end_episodes() -> None:
    calls = [("read_file", {"path": "missing.py"}), ("nope", {}), ("submit", {"code": SOLUTION})]
    async with Sandbox(workers=1) as sb:
        g = await _run(ToolCallPolicy(calls), sb)
        (t,) = g.trajectories
        assert t.outcome == "pass"
        tool_msgs = [m for m in t.messages if m["role"] == "tool"]
        assert [m["tool_call_id"] for m in tool_msgs] == ["call1", "call2"]
        assert "no such file" in tool_msgs[0]["content"]
        assert "unknown tool 'nope'" in tool_msgs[1]["content"]
        assert [io["ok"] for io in t.tool_io] == [False, False, True]

        g = await _run(ToolCallPolicy(calls), sb, max_turns=2)
        (t,) = g.trajectories
        assert t.outcome == "no_code" and t.reward == 0.0 and len(t.turns) == 2


async def test_more_episodes_than_sessions_do_not_deadlock() -> None:
    # every episode holds its session between steps; one waiting for a session must not
    # hold a step slot that the session holders need for their next step
    calls = [("write_file", {"path": "a.txt", "content": "x"}), ("submit", {"code": SOLUTION})]

    class Many(ToolCallPolicy):
        async def generate(self, prompt: Any, params: SamplingParams) -> list[Generation]:
            turn = sum(m["role"] == "assistant" for m in prompt)
            self.n = turn
            return await super().generate(prompt, params)

    async with Sandbox(workers=1) as sb:
        resources = Resources(sb, max_sessions=2)
        ex = LocalExecutor(
            EnvSpec("tool", {}), Many(calls), SamplingParams(), resources, env_concurrency=2
        )
        engine = RolloutEngine(ex, RolloutConfig(group_size=3, env_concurrency=2), env="tool")
        async with asyncio.timeout(30):  # a deadlock never ends: 0.5 s when it works
            groups = [g async for g in engine.run([TASK, TASK])]
        outcomes = [t.outcome for g in groups for t in g.trajectories]
        assert outcomes == ["pass"] * 6
