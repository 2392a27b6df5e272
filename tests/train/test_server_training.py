"""Training through a separate model server: weights after every step, the server killed."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
import torch
from train_helpers import kill_at_checkpoint, run_script, small_config
from typer.testing import CliRunner

from codegym.cli.app import app
from codegym.policies.errors import PolicyError
from codegym.serving.server import ModelServer
from codegym.train import Trainer, parse_config
from codegym.train.server_policy import ServerPolicy


@pytest.mark.parametrize("transfer", ["file", "gloo"])
async def test_training_through_a_server_pushes_the_weights_every_step(
    toy_model: Path, tmp_path: Path, transfer: str
) -> None:
    with ModelServer(toy_model, weight_transfer=transfer == "gloo") as srv:
        server = {"url": srv.base_url, "weight_transfer": transfer}
        cfg = parse_config(small_config(str(tmp_path / "run"), run={"steps": 3}, server=server))
        trainer = Trainer(cfg, toy_model)
        assert isinstance(trainer.policy, ServerPolicy)
        assert trainer.policy.current_version() == 1  # the trainer's weights, pushed at start
        metrics = await trainer.run()
        assert [m["step"] for m in metrics] == [1, 2, 3]
        assert [m["version"] for m in metrics] == [2, 3, 4]
        for m in metrics:  # sync: every token from the weights of its step, all episodes in
            assert m["staleness_max"] == 0 and m["groups_stale"] == 0
            assert m["episodes"] == 8 and m["excluded"] == 0
            assert m["tokens_generated"] > 0 and m["generate_s"] > 0
        served = srv.policy.model.state_dict()
        for k, v in trainer.model.state_dict().items():
            assert torch.equal(served[k], v), k
        trainer.policy.close()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _serve(model: Path, port: int, *flags: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "codegym.cli", "serve-model", "--model", str(model),
         "--port", str(port), "--threads", "1", "--log-level", "warning", *flags],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )  # fmt: skip


def _wait_up(url: str, proc: subprocess.Popen[bytes], within_s: float = 120) -> None:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.stderr.read().decode()[-2000:] if proc.stderr else ""
        try:
            if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise AssertionError(f"serve-model did not come up at {url}")


@pytest.mark.slow
@pytest.mark.parametrize("transfer", ["file", "gloo"])
async def test_a_killed_server_is_waited_for_and_given_the_weights_again(
    toy_model: Path, tmp_path: Path, transfer: str
) -> None:
    port = _free_port()
    root = f"http://127.0.0.1:{port}"
    flags = ("--weight-transfer",) if transfer == "gloo" else ()
    procs = [_serve(toy_model, port, *flags)]
    _wait_up(root, procs[0])

    holder: list[Trainer] = []

    def kill_and_restart() -> None:
        policy = holder[0].policy
        assert isinstance(policy, ServerPolicy)
        deadline = time.monotonic() + 60
        while policy._in_flight == 0 and time.monotonic() < deadline:
            time.sleep(0.0005)
        procs[-1].send_signal(signal.SIGKILL)  # with the next step's requests in flight
        procs[-1].wait()
        time.sleep(1.0)  # the trainer finds nobody there for a while
        procs.append(_serve(toy_model, port, *flags))

    def on_step(m: dict[str, object]) -> None:
        if m["step"] == 1:
            threading.Thread(target=kill_and_restart, daemon=True).start()

    try:
        cfg = parse_config(
            small_config(
                str(tmp_path / "run"),
                run={"steps": 4},
                server={"url": f"{root}/v1", "wait_s": 120, "weight_transfer": transfer},
            )
        )
        trainer = Trainer(cfg, toy_model, on_step=on_step)
        holder.append(trainer)
        metrics = await trainer.run()
        policy = trainer.policy
        assert isinstance(policy, ServerPolicy)
        assert len(procs) == 2 and procs[0].returncode == -signal.SIGKILL
        assert policy.recoveries >= 1  # it found the new server and pushed to it
        lines = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
        assert [json.loads(ln)["step"] for ln in lines] == [1, 2, 3, 4]
        for m in metrics:  # no episode lost to the fault, none from the restarted base model
            assert m["episodes"] == 8 and m["excluded"] == 0, m
            assert m["groups_stale"] == 0 and m["staleness_max"] == 0, m
        # The restarted server holds the trainer's newest weights.
        health = httpx.get(f"{root}/health", timeout=5).json()
        assert policy._versions.get(health["policy_version"]) == policy.current_version()
        policy.close()
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()


def test_an_unreachable_server_is_a_clear_error(toy_model: Path, tmp_path: Path) -> None:
    cfg = small_config(str(tmp_path / "run"), server={"url": "http://127.0.0.1:9/v1"})
    with pytest.raises(PolicyError, match=r"127\.0\.0\.1:9/v1/models.*serve-model"):
        Trainer(parse_config(cfg), toy_model)
    (tmp_path / "c.toml").write_text("")
    r = CliRunner().invoke(app, ["train", str(tmp_path / "c.toml"), "--model", str(toy_model),
                                   "--server", "127.0.0.1:8000"])  # fmt: skip
    assert r.exit_code == 2 and "http(s) URL" in r.output


def test_raw_logprobs_at_another_temperature_are_refused(toy_model: Path, tmp_path: Path) -> None:
    with ModelServer(toy_model) as srv:
        with pytest.raises(PolicyError, match="--logprobs-mode tempered"):
            ServerPolicy(srv.base_url, toy_model, tmp_path, temperature=0.7)
    with ModelServer(toy_model, logprobs_mode="tempered") as srv:
        ServerPolicy(srv.base_url, toy_model, tmp_path, temperature=0.7).close()


async def test_async_training_through_a_server_bounds_staleness(
    toy_model: Path, tmp_path: Path
) -> None:
    with ModelServer(toy_model) as srv:
        over = {"steps": 3, "mode": "async", "max_staleness": 1}
        cfg = small_config(str(tmp_path / "run"), run=over, server={"url": srv.base_url})
        trainer = Trainer(parse_config(cfg), toy_model)
        metrics = await trainer.run()
        assert [m["step"] for m in metrics] == [1, 2, 3]
        for m in metrics:
            assert m["staleness_max"] <= 1 and m["excluded"] == 0
            assert m["groups_used"] + m["groups_stale"] + m["groups_no_signal"] == m["groups"]
        trainer.policy.close()


@pytest.mark.slow
@pytest.mark.parametrize("transfer", ["file", "gloo"])
def test_a_killed_trainer_resumes_and_brings_the_server_to_its_checkpoint(
    toy_model: Path, tmp_path: Path, transfer: str
) -> None:
    from safetensors.torch import load_file

    steps = 4
    run = tmp_path / "run"
    with ModelServer(toy_model, weight_transfer=transfer == "gloo") as srv:
        server = {"url": srv.base_url, "weight_transfer": transfer}
        cfg = small_config(str(run), run={"steps": steps}, server=server)
        kill_at_checkpoint(run_script(cfg, toy_model), run, steps // 2)
        assert not (run / f"ckpt-{steps:06d}").exists()
        p = run_script(cfg, toy_model)
        _, err = p.communicate(timeout=240)
        assert p.returncode == 0, err.decode()[-2000:]
        lines = (run / "metrics.jsonl").read_text().splitlines()
        assert [json.loads(ln)["step"] for ln in lines] == list(range(1, steps + 1))
        # 1 is the weights pushed at start; the resumed run goes on from the checkpoint's.
        assert [json.loads(ln)["version"] for ln in lines] == list(range(2, steps + 2))
        final = load_file(str(run / f"ckpt-{steps:06d}" / "model.safetensors"))
        served = srv.policy.model.state_dict()
        for k, v in final.items():
            assert torch.equal(served[k], v), k


async def test_one_outage_has_one_deadline_for_every_waiting_request(
    toy_model: Path, tmp_path: Path
) -> None:
    """Requests queued behind a server that never returns all fail when the outage's
    wait is over, as infra errors (a review found each one waiting wait_s more in turn)."""
    import asyncio

    from codegym.policies import SamplingParams

    srv = ModelServer(toy_model)
    srv.start()
    policy = ServerPolicy(srv.base_url, toy_model, tmp_path, wait_s=1.0)
    srv.stop()
    t0 = time.monotonic()
    results = await asyncio.gather(
        *(policy.generate_tokens([5, 6], SamplingParams(max_tokens=2, seed=i)) for i in range(8)),
        return_exceptions=True,
    )
    elapsed = time.monotonic() - t0
    assert all(isinstance(r, PolicyError) and r.kind == "connection" for r in results)
    assert elapsed < 6.0, elapsed  # one shared 1 s wait, not 8 of them in a row
    await policy.aclose()
    policy.close()


async def test_answers_without_logprobs_are_refused(toy_model: Path, tmp_path: Path) -> None:
    from dataclasses import replace

    from codegym.policies import SamplingParams

    with ModelServer(toy_model) as srv:
        policy = ServerPolicy(srv.base_url, toy_model, tmp_path)
        real = policy.client.generate_tokens

        async def no_logprobs(ids, params):  # type: ignore[no-untyped-def]
            return [replace(g, logprobs=None) for g in await real(ids, params)]

        policy.client.generate_tokens = no_logprobs  # type: ignore[method-assign]
        with pytest.raises(PolicyError, match="without logprobs"):
            await policy.generate_tokens([5, 6], SamplingParams(max_tokens=2))
        await policy.aclose()
        policy.close()


def test_a_health_answer_without_a_version_is_up_with_no_version() -> None:
    from codegym.train.server_policy import _reported_version

    assert _reported_version(httpx.Response(200, content=b"")) is None  # vLLM
    assert _reported_version(httpx.Response(200, json=[1])) is None
    assert _reported_version(httpx.Response(200, json={"policy_version": 3})) == 3
