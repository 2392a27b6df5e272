"""Rollout engine benchmark: episodes/s against the ideal, CPU per episode, faults, memory.

    .venv/bin/python benchmarks/rollout_bench.py                       # throughput table
    .venv/bin/python benchmarks/rollout_bench.py --latency 0.05 1.0    # several latencies
    .venv/bin/python benchmarks/rollout_bench.py --only memory --memory-episodes 50000
    .venv/bin/python benchmarks/rollout_bench.py --only sandbox --sandbox-episodes 2000

Throughput runs (single-turn episodes of a cheap reverse-text-like env, no sandbox, so the
ideal is concurrency ÷ latency), side by side per latency:

1. ``engine``: an in-process policy that only sleeps ``latency``: the engine's own CPU per
   episode (process CPU ÷ episodes, event-loop timers included).
2. ``http``: ``OpenAIPolicy`` against the fake OpenAI server in its own process (loopback,
   fixed latency, no concurrency cap); client and server CPU per episode are both shown.
3. ``http+10%faults``: the same with 10% of requests failing (500s, dropped connections,
   hangs cut by the policy timeout), hedging off: every episode must be accounted for.
4. ``http+10%faults+hedge``: the same faults with ``OpenAIPolicy``'s copies on (``Hedge``:
   a second copy of a request still unanswered ``--hedge-factor`` x the 95th percentile of
   recent latencies after it was sent, and ``--tail`` copies at most of each request into
   the room idle at the end of the run), against the same fault-free run.

Both faulty runs retry a 500 or a dropped connection at once the first time
(``Retry.at_once``; ``--no-at-once`` restores backoff for every retry).

``cpu_cap/s`` is what the CPUs allow: cores ÷ (client + server CPU per episode). When it is
below the ideal, the machine, not the engine, is the limit (at 50 ms latency and 512 in
flight the ideal of 10,240 episodes/s needs more than 2 cores for any Python HTTP stack).

``memory``: RSS sampled every tenth of a long run (in-process policy, or ``--memory-http``);
``sandbox``: ``CodeEnv`` with a real 2-worker sandbox, throughput and RSS.
"""

from __future__ import annotations

import argparse
import asyncio
import difflib
import json
import os
import random
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from codegym.envs import Env, Message, Resources, StepResult, Turn, register
from codegym.policies import Generation, Hedge, OpenAIPolicy, Retry, SamplingParams
from codegym.rollout import EnvSpec, LocalExecutor, RolloutConfig, RolloutEngine
from codegym.tasks import IOCase, Task


@register("bench_echo")
class EchoEnv(Env):
    """Reverse-text-like: one turn, a partial-credit string reward, no sandbox."""

    async def reset(self, task: Task, seed: int) -> list[Message]:
        self.target = task.prompt[::-1]
        return [{"role": "user", "content": task.prompt}]

    async def step(self, turn: Turn) -> StepResult:
        reward = difflib.SequenceMatcher(None, turn.text, self.target).ratio()
        return StepResult(done=True, reward=reward, outcome="pass" if reward == 1 else "fail")


class SleepPolicy:
    """A model that answers after ``latency`` seconds, with ``text``."""

    name = "sleep"

    def __init__(self, latency: float, text: str = "ok") -> None:
        self.latency = latency
        self.text = text

    async def generate(self, prompt: Any, params: SamplingParams) -> list[Generation]:
        await asyncio.sleep(self.latency)
        return [Generation(self.text, "stop", tokens_out=1)]


def _rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def _cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _tasks(n_groups: int, group: int) -> list[Task]:
    return [Task(id=f"b{i}", prompt=f"p{i}", io_cases=(IOCase("", ""),)) for i in range(n_groups)]


async def _run(
    policy: Any,
    episodes: int,
    concurrency: int,
    group: int,
    *,
    env: str = "bench_echo",
    resources: Resources | None = None,
    tasks: list[Task] | None = None,
    on_group: Callable[[int], None] | None = None,
) -> dict[str, Any]:
    ex = LocalExecutor(
        EnvSpec(env),
        policy,
        SamplingParams(max_tokens=8),
        resources or Resources(),
        model_concurrency=concurrency,
        env_concurrency=concurrency if resources is None else 8,
    )
    cfg = RolloutConfig(
        group_size=group,
        model_concurrency=concurrency,
        retries=3,
        retry_base_s=0.05,
        buffer_groups=64,
        breaker_threshold=10_000,
    )
    engine = RolloutEngine(ex, cfg, env=env)
    done = 0
    marks: list[tuple[float, int]] = []
    cpu0, t0 = time.process_time(), time.perf_counter()
    async for g in engine.run(tasks or _tasks(episodes // group, group)):
        done += len(g.trajectories) + len(g.excluded)
        marks.append((time.perf_counter(), len(g.trajectories)))
        if on_group is not None:
            on_group(done)
    wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    s = engine.stats.summary()
    assert s["requested"] == s["scored"] + s["excluded_total"], s  # every episode accounted
    return {
        "episodes": s["requested"],
        "scored": s["scored"],
        "excluded": s["excluded"],
        "faults": s["faults"],
        "wall_s": round(wall, 2),
        "episodes_per_s": round(s["scored"] / wall, 1),
        "steady_per_s": _steady(marks),
        "client_cpu_ms": round(1000 * cpu / s["requested"], 3),
    }


def _steady(marks: list[tuple[float, int]]) -> float | None:
    """Scored episodes/s between the marks where 10% and 90% were scored: the rate without
    the ramp-up and the drain (a finite run ends on its slowest retried episode)."""
    total = sum(n for _, n in marks)
    seen, lo = 0, None
    for t, n in marks:
        seen += n
        if lo is None and seen >= 0.1 * total:
            lo = (t, seen)
        elif lo is not None and seen >= 0.9 * total:
            return round((seen - lo[1]) / (t - lo[0]), 1) if t > lo[0] else None
    return None


def serve(latency: float, fault_rate: float, seed: int) -> None:
    """Child process: the fake server, with faults at seeded random request numbers."""
    from codegym.testing.fake_openai import FakeOpenAIServer

    srv = FakeOpenAIServer(latency_s=latency)
    with srv:
        rng = random.Random(seed)
        for kind in ("server_error", "drop", "hang"):
            at = [i for i in range(1, 400_000) if rng.random() < fault_rate / 3]
            srv.fail(kind, at=at, hang_s=30.0)  # type: ignore[arg-type]
        print(srv.base_url, flush=True)
        threading.Event().wait()


def _policy(
    url: str, latency: float, concurrency: int, hedge: Hedge | None, at_once: bool = True
) -> OpenAIPolicy:
    # Twice the latency: a hang is cut soon, a slow-but-healthy answer on a loaded box is not.
    return OpenAIPolicy(
        url,
        "fake-model",
        mode="chat",
        concurrency=concurrency,
        timeout_s=max(2 * latency, latency + 0.5),
        retry=Retry(attempts=3, base_s=0.05, max_s=0.5, at_once=at_once),
        hedge=hedge,
    )


class _Server:
    """The fake server in its own process (sharing our GIL would skew both)."""

    def __init__(self, latency: float, fault_rate: float) -> None:
        cmd = [sys.executable, __file__, "--serve", "--latency", str(latency)]
        cmd += ["--fault-rate", str(fault_rate)]
        self.proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
        )
        assert self.proc.stdout is not None
        self.url = self.proc.stdout.readline().strip()

    def cpu_s(self) -> float:
        return _cpu_s(self.proc.pid)

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)


def http_run(
    latency: float,
    fault_rate: float,
    episodes: int,
    concurrency: int,
    group: int,
    hedge: Hedge | None = None,
    at_once: bool = True,
) -> dict[str, Any]:
    srv = _Server(latency, fault_rate)
    try:

        async def go() -> dict[str, Any]:
            async with _policy(srv.url, latency, concurrency, hedge, at_once) as policy:
                s0 = srv.cpu_s()
                row = await _run(policy, episodes, concurrency, group)
                row["server_cpu_ms"] = round(1000 * (srv.cpu_s() - s0) / episodes, 3)
                row["hedges"], row["hedge_wins"] = policy.hedges, policy.hedge_wins
                row["tail_copies"], row["tail_wins"] = policy.tail_copies, policy.tail_wins
                return row

        return asyncio.run(go())
    finally:
        srv.close()


def throughput(a: argparse.Namespace) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    cores = os.cpu_count() or 1
    for latency in a.latency:
        ideal = a.concurrency / latency
        runs: dict[str, list[dict[str, Any]]] = {
            "engine": [], "http": [], "http+10%faults": [], "http+10%faults+hedge": []
        }  # fmt: skip
        # seeded: the fake server's answers do not depend on the seed or on which copy
        # answers, so copying the (seeded) episodes biases nothing here
        hedge = Hedge(factor=a.hedge_factor, tail=a.tail, tail_quiet=a.tail_quiet, seeded=True)
        for _ in range(a.repeat):
            engine = asyncio.run(_run(SleepPolicy(latency), a.episodes, a.concurrency, a.group))
            runs["engine"].append(engine)
            runs["http"].append(http_run(latency, 0.0, a.episodes, a.concurrency, a.group))
            runs["http+10%faults"].append(
                http_run(latency, 0.10, a.episodes, a.concurrency, a.group, None, a.at_once)
            )
            runs["http+10%faults+hedge"].append(
                http_run(latency, 0.10, a.episodes, a.concurrency, a.group, hedge, a.at_once)
            )
        for name, reps in runs.items():
            row = dict(min(reps, key=lambda r: abs(r["episodes_per_s"] - _med(reps))))
            row["run"], row["latency_s"], row["ideal_per_s"] = name, latency, ideal
            row["episodes_per_s"] = _med(reps)  # median of the repeats
            row["steady_per_s"] = _med(reps, "steady_per_s")
            row["all_episodes_per_s"] = [r["episodes_per_s"] for r in reps]
            row["of_ideal"] = round(row["episodes_per_s"] / ideal, 3)
            row["steady_of_ideal"] = round(row["steady_per_s"] / ideal, 3)
            cpu = row["client_cpu_ms"] + row.get("server_cpu_ms", 0.0)
            row["cpu_cap_per_s"] = round(cores * 1000 / cpu) if cpu else None
            rows.append(row)
        free = rows[-3]
        for faulty in rows[-2:]:
            faulty["of_fault_free"] = round(faulty["episodes_per_s"] / free["episodes_per_s"], 3)
            faulty["steady_of_fault_free"] = round(faulty["steady_per_s"] / free["steady_per_s"], 3)
    return rows


def _med(reps: list[dict[str, Any]], key: str = "episodes_per_s") -> float:
    return round(statistics.median(r[key] or 0.0 for r in reps), 1)


def memory(a: argparse.Namespace) -> dict[str, Any]:
    """RSS every tenth of ``memory_episodes``: growth after warm-up means a leak."""
    samples: list[tuple[int, float]] = []
    step = max(a.group, a.memory_episodes // 10)

    def sample(done: int) -> None:
        if done >= (len(samples) + 1) * step:
            samples.append((done, round(_rss_mb(), 1)))

    async def go(policy: Any) -> dict[str, Any]:
        return await _run(policy, a.memory_episodes, a.concurrency, a.group, on_group=sample)

    if a.memory_http:
        srv = _Server(0.01, 0.0)
        try:

            async def http() -> dict[str, Any]:
                async with _policy(srv.url, 0.01, a.concurrency) as p:
                    return await go(p)

            row = asyncio.run(http())
        finally:
            srv.close()
    else:
        row = asyncio.run(go(SleepPolicy(0.005)))
    return _memory_row("memory(http)" if a.memory_http else "memory(engine)", row, samples)


def _memory_row(name: str, row: dict[str, Any], samples: list[tuple[int, float]]) -> dict[str, Any]:
    row["run"] = name
    row["rss_mb"] = samples
    if len(samples) >= 3:  # growth from the second sample (after warm-up) to the last
        row["rss_growth_mb"] = round(samples[-1][1] - samples[1][1], 1)
    return row


def sandbox(a: argparse.Namespace) -> dict[str, Any]:
    """``CodeEnv`` + a real 2-worker sandbox: each episode runs the model's program once."""
    from codegym.sandbox import Sandbox

    code = "```python\nprint(input()[::-1])\n```"
    tasks = [
        Task(id=f"s{i}", prompt=f"reverse {i}", io_cases=(IOCase(f"ab{i}\n", f"{i}ba\n"),))
        for i in range(a.sandbox_episodes // a.group)
    ]
    samples: list[tuple[int, float]] = []
    step = max(a.group, a.sandbox_episodes // 10)

    def sample(done: int) -> None:
        if done >= (len(samples) + 1) * step:
            samples.append((done, round(_rss_mb(), 1)))

    async def go() -> dict[str, Any]:
        async with Sandbox(workers=2) as sb:
            return await _run(
                SleepPolicy(0.05, code),
                a.sandbox_episodes,
                64,
                a.group,
                env="code",
                resources=Resources(sb),
                tasks=tasks,
                on_group=sample,
            )

    return _memory_row("sandbox(code)", asyncio.run(go()), samples)


def table(rows: list[dict[str, Any]]) -> str:
    head = (
        "run",
        "lat s",
        "ideal/s",
        "got/s",
        "of ideal",
        "steady/s",
        "of ideal",
        "vs no-fault",
        "cpu cap/s",
        "client ms",
        "server ms",
    )
    lines = ["  ".join(f"{h:>11}" for h in head)]
    for r in rows:
        if "latency_s" not in r:
            continue
        vals = (
            r["run"],
            r["latency_s"],
            round(r["ideal_per_s"]),
            r["episodes_per_s"],
            r["of_ideal"],
            r["steady_per_s"],
            r["steady_of_ideal"],
            f"{r['of_fault_free']}/{r['steady_of_fault_free']}" if "of_fault_free" in r else "-",
            r["cpu_cap_per_s"],
            r["client_cpu_ms"],
            r.get("server_cpu_ms", "-"),
        )
        lines.append("  ".join(f"{v!s:>11}" for v in vals))
    for r in rows:
        if r.get("hedges") or r.get("tail_copies"):
            lines.append(
                f"{r['run']}: {r['hedges']} hedges ({r['hedge_wins']} won), "
                f"{r['tail_copies']} tail copies ({r['tail_wins']} won)"
            )
    for r in rows:
        if "rss_mb" in r:
            lines.append(
                f"{r['run']}: {r['episodes']} episodes, {r['episodes_per_s']}/s, "
                f"{r['client_cpu_ms']} ms CPU/ep, RSS MB {r['rss_mb']}, "
                f"growth after warm-up {r.get('rss_growth_mb')} MB"
            )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--episodes", type=int, default=4096)
    ap.add_argument("--concurrency", type=int, default=512)
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--latency", type=float, nargs="+", default=[1.0])
    ap.add_argument("--repeat", type=int, default=1, help="runs per row; the median is shown")
    ap.add_argument("--only", choices=("throughput", "memory", "sandbox"), action="append")
    ap.add_argument("--memory-episodes", type=int, default=50_000)
    ap.add_argument("--memory-http", action="store_true", help="memory run over HTTP")
    ap.add_argument("--sandbox-episodes", type=int, default=1000)
    ap.add_argument(
        "--hedge-factor", type=float, default=1.5,
        help="the hedged run's Hedge.factor: hedge after this many times the usual latency",
    )  # fmt: skip
    ap.add_argument(
        "--tail", type=int, default=4,
        help="the hedged run's Hedge.tail: most tail copies of one request (1 = none, the "
        "policy's default; 4 here, the opt-in setting measured in docs/BENCHMARKS.md)",
    )  # fmt: skip
    ap.add_argument("--tail-quiet", type=float, default=Hedge.tail_quiet, help="Hedge.tail_quiet")
    ap.add_argument(
        "--no-at-once", dest="at_once", action="store_false",
        help="back off before every retry (Retry(at_once=False)), as before 2026-12-03",
    )  # fmt: skip
    ap.add_argument("--json", action="store_true", help="also print the rows as JSON")
    ap.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--fault-rate", type=float, default=0.0, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.serve:
        serve(a.latency[0], a.fault_rate, seed=0)
        return
    parts = a.only or ["throughput"]
    rows: list[dict[str, Any]] = []
    if "throughput" in parts:
        rows += throughput(a)
    if "memory" in parts:
        rows.append(memory(a))
    if "sandbox" in parts:
        rows.append(sandbox(a))
    print(f"load average {os.getloadavg()[0]:.1f}; {os.cpu_count()} cores")
    print(table(rows))
    if a.json:
        print(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
