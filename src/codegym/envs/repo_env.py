"""``RepoEnv``: a coding agent fixes a repository task in a copy-on-write workspace.

Each episode forks the task's prepared state (the package's image with the task's bug:
``codegym.tasks.swe.grade.task_state``) into a kept workspace of its own. Tools (OpenAI
tool-calling format, ``TOOLS``): ``bash`` (no network), ``view`` (a file with line
numbers, or a folder), ``edit`` (replace one unique string, insert after a line, or create
a file), ``search`` (fixed-string grep), ``run_tests`` (the package's suite or a subset,
time-capped, results from JUnit XML) and ``submit``. Models without tool calling write a
fenced block named after the tool (```` ```bash ````); ```` ```submit ```` ends the episode.

The patch is the workspace's diff against the task's state; grading runs it on a fresh
copy with the task's own test files restored (``grade``), so an agent that edits the
tests gains nothing. Reward: 1.0 when resolved, else 0.0 (``partial``: the share of the
task's tests that pass). Budgets: ``max_turns`` turns, ``max_tokens`` generated tokens and
``max_seconds`` of wall time per episode. Infra (the workspace, the worker, the grader's
sandbox) raises ``EnvInfraError``: retried by the engine, never scored.
"""

from __future__ import annotations

import re
import shlex
import time
from typing import Any, ClassVar

from codegym.envs.env import (
    Env,
    EnvError,
    EnvInfraError,
    Message,
    Resources,
    StepResult,
    Stopwatch,
    Turn,
    register,
)
from codegym.envs.tool_env import _calls, _exec, _tool
from codegym.sandbox import Limits, SandboxError, SandboxInfraError, Verdict
from codegym.sandbox.images import ImageBuildError
from codegym.sandbox.workspace import Workspace
from codegym.tasks import Task
from codegym.tasks.swe import junit
from codegym.tasks.swe.grade import grade, task_state
from codegym.tasks.swe.suite import run_suite
from codegym.tasks.swe.task import SweTask, swe_of

TOOLS: tuple[dict[str, Any], ...] = (
    _tool("bash", "Run a shell command in the repository (no network).", command="the command"),
    _tool(
        "view",
        "Show a file with line numbers (or list a folder).",
        path="relative path",
        lines="optional range like 10-40",
    ),
    _tool(
        "edit",
        "Replace the one occurrence of `old` with `new` in a file; with old empty, "
        "create the file (or insert after line `after`).",
        path="relative path",
        old="exact text to replace (unique)",
        new="replacement text",
        after="optional line number to insert `new` after",
    ),
    _tool(
        "search",
        "Find a fixed string in the repository's files.",
        pattern="the text",
        path="optional folder",
    ),
    _tool(
        "run_tests",
        "Run the test suite, or some tests (paths or ids).",
        tests="optional space-separated test paths or ids",
    ),
    _tool("submit", "Submit the repository as it is now; ends the episode."),
)
_FALLBACK = re.compile(r"```(bash|view|search|run_tests|submit)[ \t]*([^\n]*)\n(.*?)```", re.S)
_SYSTEM = (
    "You are fixing a bug in a Python repository, in a sandboxed copy of it (no network). "
    "Use the tools bash, view, edit, search and run_tests to find and fix the bug in the "
    "library's code, then call submit. Without tool calling, write a fenced block named "
    "after the tool, e.g. ```bash\\nls\\n``` or ```submit\\n```."
)
TOOL_LIMITS = Limits(cpu_s=60, wall_s=90, memory_mb=2048, disk_mb=256, output_bytes=1 << 20)


@register("repo")
class RepoEnv(Env):
    """Multi-turn: fix a repository task with tools; ``submit`` is graded on a fresh copy."""

    defaults: ClassVar[dict[str, Any]] = {
        "max_turns": 30,
        "max_tokens": 32768,
        "max_seconds": 900.0,
        "max_output_chars": 6000,
        "partial": False,
        "disk_mb": 512,
    }
    tools = TOOLS

    def __init__(self, resources: Resources, **options: Any) -> None:
        super().__init__(resources, **options)
        for k in ("max_turns", "max_tokens", "max_output_chars", "disk_mb"):
            v = self.options[k]
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise EnvError(f"RepoEnv {k}={v!r}: use an int >= 1")
        sb = resources.local_pool("repo")
        if sb.images is None:
            raise EnvError("the repo environment needs Sandbox(images=ImageStore())")
        self.sb = sb
        self.swe: SweTask | None = None
        self.ws: Workspace | None = None
        self.messages: list[Message] = []
        self.turns = 0
        self.tokens = 0
        self.started = 0.0

    def config(self) -> dict[str, Any]:
        return {"name": self.name, **self.options, "tools": TOOLS}

    async def reset(self, task: Task, seed: int) -> list[Message]:
        try:
            self.swe = swe_of(task)
        except ValueError as e:
            raise EnvError(str(e)) from None
        try:
            state = await task_state(self.sb, self.swe)
            self.ws = await self.sb.workspace(state, disk_mb=self.options["disk_mb"])
        except (SandboxInfraError, ImageBuildError) as e:  # ours: a worker, a full disk
            raise EnvInfraError("infra", str(e)) from e
        self.started = time.monotonic()
        self.messages = [
            {"role": "system", "content": _SYSTEM},
            {"role": "user", "content": self.swe.problem_statement},
        ]
        return list(self.messages)

    async def close(self) -> None:
        if self.ws is not None:
            await self.ws.close()

    async def step(self, turn: Turn) -> StepResult:
        if self.swe is None or self.ws is None:
            raise EnvError("RepoEnv.step before reset")
        self.turns += 1
        self.tokens += turn.tokens_out
        msg: Message = {"role": "assistant", "content": turn.text}
        if turn.tool_calls:
            msg["tool_calls"] = [dict(c) for c in turn.tool_calls]
        self.messages.append(msg)
        sw = Stopwatch()
        calls = _calls(turn) if turn.tool_calls else _fallback(turn.text)
        obs: list[Message] = []
        io: list[dict[str, Any]] = []
        for call_id, name, args in calls:
            if name == "submit":
                return await self._submit(sw, io)
            t0 = time.perf_counter()
            with sw("tool"):
                ok, out = await self._tool(name, args)
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
            return self._end("truncated", "the episode ran out of tokens", sw, io)
        if self.turns >= self.options["max_turns"]:
            return self._end("no_code", f"no submission in {self.turns} turns", sw, io)
        if time.monotonic() - self.started > float(self.options["max_seconds"]):
            return self._end("timeout", "the episode ran out of wall time", sw, io)
        return StepResult(observation=tuple(obs), tool_io=tuple(io), timings=sw.seconds)

    # -- tools -----------------------------------------------------------------

    async def _tool(self, name: str, args: Any) -> tuple[bool, str]:
        assert self.ws is not None and self.swe is not None
        if not isinstance(args, dict):
            return False, f"error: arguments for {name} must be a JSON object, got {args!r}"
        a = {k: str(v) for k, v in args.items()}
        try:
            if name == "bash":
                return _exec(
                    await self.ws.run(["bash", "-c", a.get("command", "")], limits=TOOL_LIMITS)
                )
            if name == "view":
                return await self._view(a.get("path", "."), a.get("lines", ""))
            if name == "edit":
                return await self._edit(a)
            if name == "search":
                where = a.get("path") or "."
                argv = [
                    "grep",
                    "-rnIF",
                    "--exclude-dir=.venv",
                    "--exclude-dir=__pycache__",
                    "--",
                    a.get("pattern", ""),
                    where,
                ]
                r = await self.ws.run(argv, limits=TOOL_LIMITS)
                if r.verdict is Verdict.INFRA:
                    raise EnvInfraError("infra", r.reason)
                hits = r.stdout.splitlines()
                more = f"\n… {len(hits) - 100} more lines" if len(hits) > 100 else ""
                return True, ("\n".join(hits[:100]) + more) if hits else "no match"
            if name == "run_tests":
                return await self._run_tests(a.get("tests", ""))
        except SandboxInfraError as e:  # the kind decides whose fault, never the text
            raise EnvInfraError("infra", str(e)) from e
        except FileNotFoundError as e:
            return False, f"error: no such file {e.args[0]!r}"
        except SandboxError as e:  # a bad path, a refused write: the agent's to handle
            return False, f"error: {e}"
        known = ", ".join(t["function"]["name"] for t in TOOLS)
        return False, f"error: unknown tool {name!r}; tools: {known}"

    async def _view(self, path: str, lines: str) -> tuple[bool, str]:
        assert self.ws is not None
        r = await self.ws.run(
            ["sh", "-c", 'if [ -d "$1" ]; then ls -la "$1"; else exit 3; fi', "sh", path],
            limits=TOOL_LIMITS,
        )
        if r.verdict is Verdict.OK:
            return True, r.stdout
        text = (await self.ws.read_file(path)).decode("utf-8", "replace").splitlines()
        lo, hi = 1, len(text)
        m = re.fullmatch(r"\s*(\d+)\s*-\s*(\d+)\s*", lines)
        if m:
            lo, hi = max(1, int(m.group(1))), min(len(text), int(m.group(2)))
        return True, "\n".join(f"{i:6}\t{text[i - 1]}" for i in range(lo, hi + 1))

    async def _edit(self, a: dict[str, str]) -> tuple[bool, str]:
        assert self.ws is not None
        path, old, new = a.get("path", ""), a.get("old", ""), a.get("new", "")
        try:
            text = (await self.ws.read_file(path)).decode("utf-8")
        except FileNotFoundError:
            if old:
                return False, f"error: no such file {path!r} (leave old empty to create it)"
            await self.ws.write_file(path, new)
            return True, f"created {path}"
        except UnicodeDecodeError:
            return False, f"error: {path} is not UTF-8 text"
        if not old:
            after = a.get("after", "")
            if not after.strip().isdigit():
                return False, "error: give old (the text to replace) or after (a line number)"
            lines = text.splitlines(keepends=True)
            k = min(int(after), len(lines))
            body = new if new.endswith("\n") else new + "\n"
            text = "".join(lines[:k]) + body + "".join(lines[k:])
        else:
            count = text.count(old)
            if count != 1:
                return False, f"error: `old` occurs {count} times in {path}; it must be unique"
            text = text.replace(old, new)
        await self.ws.write_file(path, text)
        return True, f"edited {path}"

    async def _run_tests(self, which: str) -> tuple[bool, str]:
        assert self.ws is not None and self.swe is not None
        try:
            chosen = shlex.split(which)
        except ValueError as e:
            return False, f"error: tests: {e}"
        run = await run_suite(self.ws, [*self.swe.test_cmd, *chosen], timeout_s=self.swe.timeout_s)
        if run.outcome == "infra":
            raise EnvInfraError("infra", run.result.reason)
        if run.outcome == "timeout":
            return False, "the tests ran past their time limit"
        if run.outcome == "broken":
            return False, "the tests could not run (collection failed?): " + run.result.stderr[
                -800:
            ]
        failed = sorted(t for t, o in run.statuses.items() if o in ("failed", "error"))
        head = f"{len(run.statuses) - len(failed)} passed, {len(failed)} failed"
        detail = [
            f"FAILED {t}\n  {msg.splitlines()[0][:300] if msg else ''}"
            for t, msg in junit.failures(run.xml, set(failed[:10]))
        ]
        return not failed, "\n".join([head, *detail])

    # -- the end ---------------------------------------------------------------

    async def _submit(self, sw: Stopwatch, io: list[dict[str, Any]]) -> StepResult:
        assert self.ws is not None and self.swe is not None
        with sw("sandbox"):
            try:
                patch = await self.ws.diff()
            except SandboxInfraError as e:
                raise EnvInfraError("infra", str(e)) from e
            except SandboxError as e:  # the workspace holds what cannot be carried out
                return self._end("unresolved", f"the workspace cannot be diffed: {e}", sw, io)
            graded = await grade(self.sb, self.swe, patch)
        if graded.outcome == "infra":
            raise EnvInfraError("infra", graded.detail)
        io.append(
            {
                "id": None,
                "name": "submit",
                "arguments": {},
                "output": graded.outcome,
                "ok": True,
                "seconds": sw.seconds.get("sandbox", 0.0),
            }
        )
        reward = 1.0 if graded.resolved else 0.0
        if self.options["partial"] and graded.tests and not graded.resolved:
            reward = sum(o == "passed" for o in graded.tests.values()) / len(graded.tests)
        return self._end(graded.outcome, graded.detail, sw, io, reward, patch)

    def _end(
        self,
        outcome: str,
        detail: str,
        sw: Stopwatch,
        io: list[dict[str, Any]],
        reward: float = 0.0,
        patch: str = "",
    ) -> StepResult:
        return StepResult(
            done=True,
            reward=reward,
            outcome=outcome,
            detail=detail,
            rewards={"resolved": reward},
            tool_io=tuple(io),
            timings=sw.seconds,
            info={"turns": self.turns, "patch": patch},
        )


def _fallback(text: str) -> list[tuple[str | None, str, Any]]:
    out: list[tuple[str | None, str, Any]] = []
    for name, rest, body in _FALLBACK.findall(text):
        if name == "bash":
            out.append((None, name, {"command": body}))
        elif name == "view":
            out.append((None, name, {"path": rest.strip() or body.strip()}))
        elif name == "search":
            out.append((None, name, {"pattern": rest.strip() or body.strip()}))
        elif name == "run_tests":
            out.append((None, name, {"tests": rest.strip() or body.strip()}))
        else:
            out.append((None, "submit", {}))
    return out
