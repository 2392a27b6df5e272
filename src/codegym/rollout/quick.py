"""``run_example``: the few lines every example environment needs to run on its own.

    python examples/reverse_text.py                       # against a built-in fake server
    python examples/reverse_text.py --base-url URL --model NAME

Without ``--base-url`` a loopback ``FakeOpenAIServer`` answers with the example's own
``responder`` (a scripted "model"), so an example runs end to end anywhere.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from collections.abc import Sequence
from typing import Any

from codegym.envs.env import Resources
from codegym.policies import OpenAIPolicy, SamplingParams
from codegym.rollout.config import RolloutConfig
from codegym.rollout.engine import RolloutEngine
from codegym.rollout.executor import EnvSpec, LocalExecutor
from codegym.sandbox import Sandbox
from codegym.tasks import Task
from codegym.testing.fake_openai import FakeOpenAIServer, Responder


def run_example(
    env: str, tasks: Sequence[Task], responder: Responder, argv: Sequence[str] | None = None
) -> dict[str, Any]:
    """Roll out ``env`` on ``tasks`` (one group each) and print/return the summary."""
    ap = argparse.ArgumentParser(description=f"roll out the {env!r} example env")
    ap.add_argument("--base-url", help="OpenAI-compatible server (default: a fake one)")
    ap.add_argument("--model", default="fake-model")
    ap.add_argument("--group-size", type=int, default=4)
    args = ap.parse_args(argv)

    async def main(base_url: str) -> dict[str, Any]:
        async with (
            Sandbox(workers=2) as sb,
            OpenAIPolicy(base_url, args.model, mode="chat") as policy,
        ):
            ex = LocalExecutor(EnvSpec(env), policy, SamplingParams(max_tokens=512), Resources(sb))
            engine = RolloutEngine(ex, RolloutConfig(group_size=args.group_size), env=env)
            async for g in engine.run(tasks):
                print(f"{g.group_id}: rewards {[round(r, 3) for r in g.rewards]}")
            return engine.stats.summary()

    if args.base_url:
        summary = asyncio.run(main(args.base_url))
    else:
        with FakeOpenAIServer(responder=responder, model=args.model) as srv:
            summary = asyncio.run(main(srv.base_url))
    print(json.dumps(summary, indent=2))
    return summary
