"""An episode is one trace: policy call and env step (with its sandbox run) nest under it."""

from __future__ import annotations

import json
from pathlib import Path

from rollout_helpers import ScriptedPolicy, reference_answer

from codegym.envs import Resources
from codegym.policies import SamplingParams
from codegym.rollout import EnvSpec, LocalExecutor, RolloutConfig, RolloutEngine
from codegym.sandbox import Sandbox
from codegym.tasks import Task
from codegym.telemetry.tracing import configure_tracing, shutdown_tracing


async def test_episode_spans_nest_policy_env_and_sandbox(
    sandbox: Sandbox, tasks: list[Task], tmp_path: Path
) -> None:
    out = tmp_path / "spans.jsonl"
    configure_tracing("file", path=out)
    try:
        policy = ScriptedPolicy(reference_answer(tasks))
        ex = LocalExecutor(
            EnvSpec("code"), policy, SamplingParams(max_tokens=256), Resources(sandbox)
        )
        engine = RolloutEngine(ex, RolloutConfig(group_size=2, seed=2), env="code")
        groups = [g async for g in engine.run(tasks[:2])]
    finally:
        shutdown_tracing()
    assert sum(len(g.trajectories) for g in groups) == 4
    spans = [json.loads(x) for x in out.read_text().splitlines()]
    by_id = {s["span_id"]: s for s in spans}
    episodes = [s for s in spans if s["name"] == "episode"]
    assert len(episodes) == 4
    for name in ("policy.call", "env.step"):
        children = [s for s in spans if s["name"] == name]
        assert len(children) == 4
        assert all(by_id[c["parent_span_id"]]["name"] == "episode" for c in children)
    execs = [s for s in spans if s["name"] == "sandbox.exec"]
    assert execs and all(by_id[s["parent_span_id"]]["name"] == "env.step" for s in execs)
    assert {e["attributes"]["outcome"] for e in episodes} <= {"pass", "fail", "error"}
