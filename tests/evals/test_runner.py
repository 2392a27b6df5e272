"""The eval runner end to end: a real fake server on loopback, the jail sandbox, a DuckDB file."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from codegym.evals.runner import Runner, RunnerConfig, SampleResult
from codegym.policies import OpenAIPolicy, Retry, SamplingParams
from codegym.policies.policy import Prompt
from codegym.sandbox import Sandbox
from codegym.store import DictCache, Store
from codegym.tasks import Task, load_humaneval
from codegym.testing import wait_until
from codegym.testing.fake_openai import FakeOpenAIServer

CODEGYM = str(Path(sys.executable).parent / "codegym")
TASKS = list(load_humaneval())[:12]
BY_PROMPT = {t.prompt: t for t in TASKS}


def responder(prompt: Prompt, params: SamplingParams, index: int) -> str:
    """Even tasks: the reference (pass). Odd: a wrong answer, except sample 1 is no code."""
    task = BY_PROMPT[prompt if isinstance(prompt, str) else ""]
    num = int(task.id.split("/")[1])
    if num % 2 == 0:
        return task.reference
    return "    return None\n" if index == 0 else "I am not sure how to do this."


def _outcomes(results: list[SampleResult]) -> dict[tuple[str, int], str]:
    return {(r.task_id, r.sample_index): r.outcome for r in results}


async def test_evaluate_scores_every_sample_and_resumes_from_the_store(
    sandbox: Sandbox, tmp_path: Path
) -> None:
    params = SamplingParams(temperature=0.0, max_tokens=400, n=2)
    with FakeOpenAIServer(responder=responder) as srv:
        async with OpenAIPolicy(srv.base_url, srv.model) as policy:
            with Store(tmp_path / "s.duckdb") as store:
                runner = Runner(sandbox, cache=DictCache(store))
                first = await runner.evaluate(TASKS, policy, params)
                requests_after_first = srv.requests
                second = await Runner(sandbox, cache=DictCache(store)).evaluate(
                    TASKS, policy, params
                )
            assert srv.requests == requests_after_first  # nothing re-sampled
    assert len(first) == len(TASKS) * 2
    for r in first:
        num = int(r.task_id.split("/")[1])
        expected = "pass" if num % 2 == 0 else ("fail" if r.sample_index == 0 else "no_code")
        assert r.outcome == expected, (r.task_id, r.sample_index, r.outcome, r.detail)
    assert _outcomes(second) == _outcomes(first)
    assert all(r.cached for r in second if r.outcome != "no_code")
    assert all(r.tokens_in for r in first)  # usage is per request; out is split only with ids


async def test_truncated_and_policy_errors_are_kept_apart(sandbox: Sandbox) -> None:
    with FakeOpenAIServer(responder=responder) as srv:
        async with OpenAIPolicy(
            srv.base_url, srv.model, retry=Retry(attempts=2, base_s=0.01, max_s=0.05)
        ) as policy:
            short = SamplingParams(temperature=0.0, max_tokens=3, n=1)
            cut = await Runner(sandbox).evaluate(TASKS[:2], policy, short)
            assert [r.outcome for r in cut] == ["truncated", "truncated"]
            srv.fail("server_error", times=100)
            broken = await Runner(sandbox).evaluate(TASKS[:3], policy, short)
    assert [r.outcome for r in broken] == ["policy_error"] * 3
    assert all("500" in r.detail or "server" in r.detail.lower() for r in broken)


async def test_runner_exports_eval_metrics(sandbox: Sandbox) -> None:
    from prometheus_client import REGISTRY

    runner = Runner(sandbox, config=RunnerConfig(suite="metrics-test"))
    task = TASKS[0]
    await runner.score_samples(
        [(task, {"completion": task.reference}), (task, {"completion": "    return None\n"})]
    )

    def value(name: str, **labels: str) -> float | None:
        return REGISTRY.get_sample_value(name, {"suite": "metrics-test", **labels})

    assert value("codegym_eval_samples_total", outcome="pass") == 1
    assert value("codegym_eval_pass_rate") == 0.5


async def test_flaky_programs_are_flagged(sandbox: Sandbox) -> None:
    task = Task(
        id="coin",
        prompt="def f():\n",
        entry_point="f",
        test="def check(c):\n    assert c()\n",
    )
    coin = "    import os\n    return os.urandom(1)[0] % 2 == 0\n"
    runner = Runner(sandbox, config=RunnerConfig(flaky_repeats=12))
    res = await runner.score_samples([(task, {"completion": coin})])
    steady = await runner.score_samples([(task, {"completion": "    return True\n"})])
    assert res[0].flaky and "flaky" in res[0].detail
    assert not steady[0].flaky and steady[0].outcome == "pass"


def _samples(tmp_path: Path) -> Path:
    path = tmp_path / "samples.jsonl"
    rows = [
        {"task_id": t.id, "completion": body}
        for t in load_humaneval()
        for body in (t.reference, "    return None\n", t.reference + "\n# v2\n", "    return 0\n")
        for _ in range(2)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in path.read_text().splitlines()]


@pytest.mark.slow
def test_score_killed_midway_resumes_without_loss_or_duplicates(tmp_path: Path) -> None:
    samples = _samples(tmp_path)
    env = {**os.environ, "CODEGYM_STORE": str(tmp_path / "store.duckdb")}
    cmd = [CODEGYM, "score", str(samples), "--out", str(tmp_path / "r.jsonl"), "--json"]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    # killed once results have been committed: the write-ahead log has grown past the
    # size the tables' creation left it at (a commit appends to it; nothing checkpoints)
    wal = tmp_path / "store.duckdb.wal"
    sizes: set[int] = set()

    def committed() -> bool:
        assert proc.poll() is None, "the run finished before it could be killed"
        if wal.exists():
            sizes.add(wal.stat().st_size)
        return len(sizes - {0}) >= 3

    wait_until(committed, timeout=120, what="a few batches of scores committed")
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    with Store(tmp_path / "store.duckdb", read_only=True) as store:
        partial = store.counts()["scores"]
    assert 0 < partial < 656, partial  # killed midway, with something to reuse
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    rows = _rows(tmp_path / "r.jsonl")
    assert len(rows) == 1312 and summary["scored"] == 1312
    assert summary["cached"] >= partial  # everything stored before the kill was reused
    with Store(tmp_path / "store.duckdb", read_only=True) as store:
        # 164 tasks × 4 distinct programs: one row each, never duplicated.
        assert store.counts()["scores"] == 656
    assert sum(r["passed"] for r in rows) == 164 * 4
    again = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert json.loads(again.stdout)["cached"] == 1312
