"""``ToolEnv``: a multi-turn coding agent with tools over a sandbox session.

Tools (OpenAI tool-calling format, ``TOOLS``): ``run_python(code)``, ``bash(command)``,
``read_file(path)``, ``write_file(path, content)``, ``submit(code)``. Each episode gets its
own ``Session`` (a persistent workspace); ``submit`` runs the task's tests on the code in
that session and ends the episode with the rubric's reward.

Plain-text fallback for models without tool calling: a fenced block whose info string is a
tool name is a call (```` ```bash ````, ```` ```run_python ````, ```` ```submit ````,
```` ```write_file PATH ````, ```` ```read_file PATH ````); a plain ```` ```python ```` block
with no other call is a submission.

Contract:
- Tool errors (unknown tool, bad JSON arguments, a file that does not exist, a path the
  workspace refuses, a program that fails) go back to the model as observations; they are
  the model's to handle.
- A sandbox ``infra`` result or ``SandboxInfraError`` in any tool raises ``EnvInfraError``:
  the engine retries the episode and never scores it. The kind of failure decides, never
  the text of a message (which may quote the agent's own input).
- ``submit`` is graded in a fresh sandbox run, not in the episode's workspace.
- Budgets: ``max_turns`` model turns and ``max_tokens`` generated tokens per episode. Out of
  turns without a submission is ``no_code``; out of tokens is ``truncated`` (model
  outcomes, scored by the rubric with ``score=None``).
"""

from __future__ import annotations

import json
import re
import time
from contextlib import AsyncExitStack
from typing import Any, ClassVar

from codegym.envs.code_env import chat_prompt
from codegym.envs.env import (
    Env,
    EnvError,
    EnvInfraError,
    Message,
    Resources,
    Shell,
    StepResult,
    Stopwatch,
    Turn,
    register,
)
from codegym.envs.rewards import RewardContext, Rubric, rubric_from_weights
from codegym.sandbox import ExecResult, SandboxError, SandboxInfraError, Verdict
from codegym.tasks import Score, Task, score


def _tool(name: str, doc: str, **params: str) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": doc,
            "parameters": {
                "type": "object",
                "properties": {p: {"type": "string", "description": d} for p, d in params.items()},
                "required": list(params),
            },
        },
    }


TOOLS: tuple[dict[str, Any], ...] = (
    _tool("run_python", "Run a Python program in the workspace.", code="Python source"),
    _tool("bash", "Run a shell command in the workspace.", command="the command"),
    _tool("read_file", "Read a workspace file.", path="relative path"),
    _tool("write_file", "Write a workspace file.", path="relative path", content="file text"),
    _tool("submit", "Submit the final solution; ends the episode.", code="the full solution"),
)
_FALLBACK = re.compile(
    r"```(run_python|bash|submit|read_file|write_file|python)[ \t]*([^\n]*)\n(.*?)```", re.S
)
_SYSTEM = (
    "You are solving a coding task in a sandboxed workspace. Use the tools run_python, bash, "
    "read_file, write_file to explore and test, then call submit with your full solution. "
    "Without tool calling, write a fenced block whose language is the tool name, e.g. "
    "```bash\\nls\\n``` or ```submit\\n<code>\\n```; ```write_file PATH``` and "
    "```read_file PATH``` take the path after the name."
)


@register("tool")
class ToolEnv(Env):
    """Multi-turn: tools in a persistent workspace, ``submit`` is scored by the tests."""

    defaults: ClassVar[dict[str, Any]] = {
        "max_turns": 8,
        "max_tokens": 8192,
        "max_output_chars": 4000,
        "rewards": None,
    }
    tools = TOOLS

    def __init__(self, resources: Resources, **options: Any) -> None:
        super().__init__(resources, **options)
        for k in ("max_turns", "max_tokens", "max_output_chars"):
            v = self.options[k]
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise EnvError(f"ToolEnv {k}={v!r}: use an int >= 1")
        self.rubric: Rubric = rubric_from_weights(self.options["rewards"])
        self.task: Task | None = None
        self.messages: list[Message] = []
        self.turns = 0
        self.tokens = 0
        self._stack = AsyncExitStack()
        self._session: Shell | None = None

    def config(self) -> dict[str, Any]:
        opts = {k: v for k, v in self.options.items() if k != "rewards"}
        return {"name": self.name, **opts, "rubric": self.rubric.config(), "tools": TOOLS}

    async def reset(self, task: Task, seed: int) -> list[Message]:
        self.task = task
        # the workspace's slot now, outside any step (see Resources.session_slot)
        await self._stack.enter_async_context(self.resources.session_slot())
        self.messages = [
            {"role": "system", "content": _SYSTEM},
            {"role": "user", "content": chat_prompt(task)},
        ]
        return list(self.messages)

    async def close(self) -> None:
        await self._stack.aclose()

    async def _sess(self) -> Shell:
        if self._session is None:
            self._session = await self._stack.enter_async_context(self.resources.open_shell())
        return self._session

    async def step(self, turn: Turn) -> StepResult:
        if self.task is None:
            raise EnvError("ToolEnv.step before reset")
        self.turns += 1
        self.tokens += turn.tokens_out
        msg: Message = {"role": "assistant", "content": turn.text}
        if turn.tool_calls:
            msg["tool_calls"] = [dict(c) for c in turn.tool_calls]
        self.messages.append(msg)
        sw = Stopwatch()
        calls = _calls(turn)
        obs: list[Message] = []
        io: list[dict[str, Any]] = []
        for call_id, name, args in calls:
            if name == "submit":
                code = args.get("code") if isinstance(args, dict) else None
                if isinstance(code, str):
                    return await self._finish(code, sw, io)
            t0 = time.perf_counter()
            with sw("tool"):
                ok, out = await self._run_tool(name, args)
            out = out[: self.options["max_output_chars"]]
            io.append(
                {
                    "id": call_id,
                    "name": name,
                    "arguments": args,
                    "output": out,
                    "ok": ok,
                    "seconds": time.perf_counter() - t0,
                }
            )
            if call_id is not None:
                obs.append({"role": "tool", "tool_call_id": call_id, "content": out})
            else:
                obs.append({"role": "user", "content": f"[{name}] {out}"})
        if not calls:
            obs.append({"role": "user", "content": "No tool call found. " + _SYSTEM})
        self.messages.extend(obs)
        if self.tokens >= self.options["max_tokens"] or turn.finish_reason == "length":
            return await self._end("truncated", "the episode ran out of tokens", sw, io)
        if self.turns >= self.options["max_turns"]:
            return await self._end("no_code", f"no submission in {self.turns} turns", sw, io)
        return StepResult(observation=tuple(obs), tool_io=tuple(io), timings=sw.seconds)

    async def _run_tool(self, name: str, args: Any) -> tuple[bool, str]:
        if not isinstance(args, dict):
            return False, f"error: arguments for {name} must be a JSON object, got {args!r}"
        try:
            s = await self._sess()
            if name == "run_python":
                return _exec(await s.run_python(str(args.get("code", ""))))
            if name == "bash":
                return _exec(await s.run(str(args.get("command", ""))))
            if name == "read_file":
                data = await s.read_file(str(args.get("path", "")))
                return True, data.decode("utf-8", "replace")
            if name == "write_file":
                await s.write_file(str(args.get("path", "")), str(args.get("content", "")))
                return True, "ok"
        except FileNotFoundError as e:
            return False, f"error: no such file {e.args[0]!r}"
        except SandboxInfraError as e:  # the kind decides whose fault, never the text
            raise EnvInfraError("infra", str(e)) from e
        except SandboxError as e:  # a bad path, a refused write: the agent's to handle
            return False, f"error: {e}"
        known = ", ".join(t["function"]["name"] for t in TOOLS)
        return False, f"error: unknown tool {name!r}; tools: {known}"

    async def _finish(self, code: str, sw: Stopwatch, io: list[dict[str, Any]]) -> StepResult:
        assert self.task is not None
        with sw("sandbox"):
            # graded in a fresh run, never in the agent's workspace: nothing the episode
            # left there (files, modules, symlinks) takes part in its own grading
            if self.resources.sandbox is not None:
                result = await score(self.resources.sandbox, self.task, code, self.resources.limits)
            else:
                async with self.resources.open_session() as fresh:  # within our slot
                    result = await score(fresh, self.task, code, self.resources.limits)
        if result.is_infra:
            raise EnvInfraError(result.outcome, result.detail)
        io.append(
            {
                "id": None,
                "name": "submit",
                "arguments": {"code": code},
                "output": result.outcome,
                "ok": True,
                "seconds": sw.seconds["sandbox"],
            }
        )
        return await self._end(result.outcome, result.detail, sw, io, code, result)

    async def _end(
        self,
        outcome: str,
        detail: str,
        sw: Stopwatch,
        io: list[dict[str, Any]],
        code: str = "",
        result: Score | None = None,
    ) -> StepResult:
        assert self.task is not None
        with sw("reward"):
            ctx = RewardContext(self.task, self.messages, code, result, self.turns)
            total, raw = self.rubric(ctx)
        return StepResult(
            done=True,
            reward=total,
            outcome=outcome,
            detail=detail,
            rewards=raw,
            tool_io=tuple(io),
            timings=sw.seconds,
            info={"turns": self.turns, "code": code},
        )


def _exec(r: ExecResult) -> tuple[bool, str]:
    if r.verdict is Verdict.INFRA:
        raise EnvInfraError("infra", r.reason)
    out = r.stdout + (f"\n[stderr]\n{r.stderr}" if r.stderr else "")
    if r.verdict is not Verdict.OK:
        out += f"\n[{r.verdict.value}] exit={r.exit_code} {r.reason}".rstrip()
    return r.verdict is Verdict.OK, out


def _calls(turn: Turn) -> list[tuple[str | None, str, Any]]:
    """(call id or None for text fallback, tool name, arguments) in order."""
    out: list[tuple[str | None, str, Any]] = []
    for c in turn.tool_calls:
        fn = c.get("function", {})
        raw = fn.get("arguments", "{}")
        try:
            args = json.loads(raw) if isinstance(raw, str) else raw
        except ValueError:
            args = raw  # not JSON: _run_tool reports it back to the model
        out.append((str(c.get("id", "")), str(fn.get("name", "")), args))
    if out:
        return out
    blocks = _FALLBACK.findall(turn.text)
    for name, rest, body in blocks:
        rest = rest.strip()
        if name == "python":
            if len(blocks) == 1:
                out.append((None, "submit", {"code": body}))
        elif name in ("run_python", "submit"):
            out.append((None, name, {"code": body}))
        elif name == "bash":
            out.append((None, name, {"command": body}))
        elif name == "read_file":
            out.append((None, name, {"path": rest or body.strip()}))
        else:
            out.append((None, name, {"path": rest, "content": body}))
    return out
