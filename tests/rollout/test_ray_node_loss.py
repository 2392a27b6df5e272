"""A Ray rollout whose worker node dies when the cluster has no room for a replacement
actor: the replacement is given up after ``replace_timeout_s``, the dead actor's episodes
are re-sent to the live one, and the run ends with every episode accounted for (it used to
wait forever on an actor that could not be placed).

A real two-node cluster on loopback (``ray.cluster_utils.Cluster``), one CPU per node and
one actor per CPU, so the lost node's actor can go nowhere.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import psutil
import pytest
import ray
from ray.cluster_utils import Cluster

from codegym.policies import OpenAIPolicy, SamplingParams
from codegym.rollout import EnvSpec, RolloutConfig, RolloutEngine
from codegym.rollout.ray_executor import RayExecutor, RayOptions, SandboxSpec
from codegym.tasks.synthetic import generate
from codegym.testing import await_until
from codegym.testing.fake_openai import FakeOpenAIServer

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

TASKS = generate("infer", 4, 5, 1)


CLIENT_PORT = 0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def cluster() -> Iterator[tuple[Cluster, Any]]:
    global CLIENT_PORT
    if ray.is_initialized():
        ray.shutdown()
    CLIENT_PORT = _free_port()
    head = {"num_cpus": 1, "include_dashboard": False, "ray_client_server_port": CLIENT_PORT}
    c = Cluster(initialize_head=True, head_node_args=head)
    worker = c.add_node(num_cpus=1)
    c.wait_for_nodes()
    ray.init(address=c.address, log_to_driver=False)
    try:
        yield c, worker
    finally:
        ray.shutdown()
        c.shutdown()


def test_rollout_joins_a_cluster_by_a_ray_client_address(
    cluster: tuple[Cluster, Any], tmp_path: Path
) -> None:
    """``--ray-address ray://HOST:PORT`` (the ``ray[client]`` extra) from another process."""
    with FakeOpenAIServer() as srv:
        cmd = [str(Path(sys.executable).parent / "codegym"), "rollout", "--env", "code",
               "--model", srv.model, "--base-url", srv.base_url, "--groups", "2",
               "--group-size", "2", "--out", str(tmp_path / "r"), "--no-store",
               "--ray-address", f"ray://127.0.0.1:{CLIENT_PORT}", "--ray-actors", "1"]  # fmt: skip
        env = {**os.environ, "OPENAI_API_KEY": "test"}
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=240, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    assert summary["requested"] == summary["scored"] + summary["excluded_total"] == 4


def _on_node(pid: int, node: Any) -> bool:
    raylet = node.all_processes["raylet"][0].process.pid
    try:
        return any(p.pid == raylet for p in psutil.Process(pid).parents())
    except psutil.NoSuchProcess:
        return False


async def test_a_lost_node_without_room_for_a_replacement_does_not_hang(
    cluster: tuple[Cluster, Any], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="codegym.rollout")
    c, worker = cluster
    with FakeOpenAIServer(latency_s=0.3) as srv:
        ex = RayExecutor(
            EnvSpec("code"),
            partial(OpenAIPolicy, srv.base_url, srv.model, mode="chat"),
            SamplingParams(max_tokens=64),
            sandbox=SandboxSpec(tier="jail", workers=1),
            ray_options=RayOptions(
                actors=2,
                slots_per_actor=8,
                actor_cpus=1.0,
                start_timeout_s=90,
                replace_timeout_s=5.0,
            ),
            env_concurrency=2,
        )
        async with ex:
            pids = [int((await h.ready.remote()).rsplit(":", 1)[1]) for h in ex.actors]
            lost = next(i for i, pid in enumerate(pids) if _on_node(pid, worker))
            engine = RolloutEngine(ex, RolloutConfig(group_size=4, seed=1), env="code")

            async def go() -> list[Any]:
                return [g async for g in engine.run(TASKS * 2)]

            run = asyncio.ensure_future(asyncio.wait_for(go(), 180))
            await await_until(lambda: ex._busy[lost] >= 4, timeout=60, what="work on the node")
            # a lost machine takes every process with it at once; removing the node alone
            # kills its raylet, and the actor it started lived on long enough (CI, under
            # load) to finish the whole run: no death was ever seen, so nothing retired
            os.kill(pids[lost], signal.SIGKILL)
            c.remove_node(worker, allow_graceful=False)
            groups = await run  # the live actor ran the lost one's episodes meanwhile
            # and the replacement, which no node has room for, is given up within its bound
            try:
                await await_until(
                    lambda: ex.stats["slots_retired"],
                    timeout=60,
                    what="the slot retired",
                )
            except TimeoutError as e:  # say what the executor did, not only what it did not
                raise AssertionError(f"{e}; stats {ex.stats}; log:\n{caplog.text}") from e
            stats = dict(ex.stats)
    s = engine.stats.summary()
    assert s["requested"] == s["scored"] + s["excluded_total"] == 32, s
    assert s["scored"] == 32, s  # the lost node's episodes ran again on the live actor
    assert len(groups) == 8
    assert stats["actor_deaths"] == 1 and stats["slots_retired"] == 1, (stats, caplog.text)
    assert stats["redispatched"] >= 4, stats
