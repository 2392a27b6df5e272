"""Rollout engine benchmark: episodes/s against the ideal, engine CPU per episode, faults.

    .venv/bin/python benchmarks/rollout_bench.py [--episodes 4096] [--concurrency 512]

Three runs, side by side, single-turn episodes with a trivial reward (no sandbox, so the
ideal is concurrency ÷ latency):

1. ``engine``: an in-process policy that only sleeps ``latency`` — isolates the engine's own
   CPU per episode (process CPU ÷ episodes; includes the event loop's timer cost).
2. ``http``: ``OpenAIPolicy`` against a fake OpenAI server in its own process (loopback).
3. ``http+10%faults``: the same with 10% of requests failing (500s, dropped connections,
   hangs cut by the policy timeout); every episode must be accounted for.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import subprocess
import sys
import threading
import time
from typing import Any

from codegym.envs import Env, Message, Resources, StepResult, Turn, register
from codegym.policies import Generation, OpenAIPolicy, Retry, SamplingParams
from codegym.rollout import EnvSpec, LocalExecutor, RolloutConfig, RolloutEngine
from codegym.tasks import IOCase, Task


@register("bench_echo")
class EchoEnv(Env):
    async def reset(self, task: Task, seed: int) -> list[Message]:
        return [{"role": "user", "content": task.prompt}]

    async def step(self, turn: Turn) -> StepResult:
        return StepResult(done=True, reward=float(bool(turn.text)), outcome="pass")


class SleepPolicy:
    name = "sleep"

    def __init__(self, latency: float) -> None:
        self.latency = latency

    async def generate(self, prompt: Any, params: SamplingParams) -> list[Generation]:
        await asyncio.sleep(self.latency)
        return [Generation("ok", "stop", tokens_out=1)]


async def _run(policy: Any, episodes: int, concurrency: int, group: int) -> dict[str, Any]:
    tasks = [
        Task(id=f"b{i}", prompt=f"p{i}", io_cases=(IOCase("", ""),))
        for i in range(episodes // group)
    ]
    ex = LocalExecutor(
        EnvSpec("bench_echo"),
        policy,
        SamplingParams(max_tokens=8),
        Resources(),
        model_concurrency=concurrency,
        env_concurrency=concurrency,
    )
    cfg = RolloutConfig(
        group_size=group,
        model_concurrency=concurrency,
        retries=3,
        retry_base_s=0.05,
        buffer_groups=64,
        breaker_threshold=10_000,
    )
    engine = RolloutEngine(ex, cfg, env="bench_echo")
    cpu0, t0 = time.process_time(), time.perf_counter()
    async for _ in engine.run(tasks):
        pass
    wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    s = engine.stats.summary()
    assert s["requested"] == s["scored"] + s["excluded_total"], s
    return {
        "episodes": s["requested"],
        "scored": s["scored"],
        "excluded": s["excluded"],
        "faults": s["faults"],
        "wall_s": round(wall, 2),
        "episodes_per_s": round(s["scored"] / wall, 1),
        "cpu_ms_per_episode": round(1000 * cpu / s["requested"], 3),
    }


def serve(latency: float, fault_rate: float, seed: int) -> None:
    """Child process: the fake server, with faults at seeded random request numbers."""
    from codegym.testing.fake_openai import FakeOpenAIServer

    srv = FakeOpenAIServer(latency_s=latency)
    with srv:
        rng = random.Random(seed)
        for kind in ("server_error", "drop", "hang"):
            at = [i for i in range(1, 200_000) if rng.random() < fault_rate / 3]
            srv.fail(kind, at=at, hang_s=30.0)  # type: ignore[arg-type]
        print(srv.base_url, flush=True)
        threading.Event().wait()


async def _http(url: str, episodes: int, concurrency: int, group: int) -> dict[str, Any]:
    policy = OpenAIPolicy(
        url,
        "fake-model",
        mode="chat",
        concurrency=concurrency,
        timeout_s=1.0,
        retry=Retry(attempts=3, base_s=0.05, max_s=0.5),
    )
    async with policy:
        return await _run(policy, episodes, concurrency, group)


def http_run(
    latency: float, fault_rate: float, episodes: int, concurrency: int, group: int
) -> dict[str, Any]:
    cmd = [
        sys.executable,
        __file__,
        "--serve",
        "--latency",
        str(latency),
        "--fault-rate",
        str(fault_rate),
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()
        return asyncio.run(_http(url, episodes, concurrency, group))
    finally:
        proc.terminate()
        proc.wait(10)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--episodes", type=int, default=4096)
    ap.add_argument("--concurrency", type=int, default=512)
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--latency", type=float, default=0.05)
    ap.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--fault-rate", type=float, default=0.0, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.serve:
        serve(a.latency, a.fault_rate, seed=0)
        return
    ideal = a.concurrency / a.latency
    rows = {
        "engine": asyncio.run(_run(SleepPolicy(a.latency), a.episodes, a.concurrency, a.group)),
        "http": http_run(a.latency, 0.0, a.episodes, a.concurrency, a.group),
        "http+10%faults": http_run(a.latency, 0.10, a.episodes, a.concurrency, a.group),
    }
    for r in rows.values():
        r["of_ideal"] = round(r["episodes_per_s"] / ideal, 3)
    rows["http+10%faults"]["of_fault_free"] = round(
        rows["http+10%faults"]["episodes_per_s"] / rows["http"]["episodes_per_s"], 3
    )
    print(
        json.dumps(
            {
                "ideal_episodes_per_s": ideal,
                "concurrency": a.concurrency,
                "latency_s": a.latency,
                "runs": rows,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
