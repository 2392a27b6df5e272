"""Data-parallel training (DDP over gloo, under torchrun): 2 processes, 1 process's weights."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
import torch
from safetensors.torch import load_file
from train_helpers import small_config

from codegym.train.distributed import World

HERE = Path(__file__).parent


def _launch(nproc: int, *args: str, timeout: float = 240) -> None:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
           "--nproc-per-node", str(nproc), str(HERE / "ddp_script.py"), *args]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(HERE)}
    p = subprocess.run(cmd, capture_output=True, timeout=timeout, env=env)
    assert p.returncode == 0, p.stderr.decode()[-3000:]


def _weights(folder: Path, rank: int) -> dict[str, torch.Tensor]:
    return load_file(str(folder / f"rank{rank}.safetensors"))


def test_shards_cover_every_item_once() -> None:
    items = list(range(11))
    parts = [World(r, 3).shard(items) for r in range(3)]
    assert sorted(x for p in parts for x in p) == items
    assert World().shard(items) == items


@pytest.mark.slow
@pytest.mark.parametrize("agg", ["token", "sequence"])
def test_two_processes_reach_the_weights_of_one_on_the_same_global_batch(
    toy_model: Path, tmp_path: Path, agg: str
) -> None:
    # 9 samples, micro-batches of 2: rank 0 has 3 micro-batches, rank 1 two (and a filler).
    # No clipping: a clipped gradient has the same norm whatever its scale. One pass: a
    # second one would start from weights that already differ by rounding.
    optim = {"micro_batch": 2, "max_grad_norm": 1e9}
    cfg = small_config(str(tmp_path / "run"), optim=optim, grpo={"loss_agg": agg})
    one, two = tmp_path / "one", tmp_path / "two"
    one.mkdir(), two.mkdir()
    _launch(1, "step", json.dumps(cfg), str(toy_model), str(one), "9")
    _launch(2, "step", json.dumps(cfg), str(toy_model), str(two), "9")
    a, b0, b1 = _weights(one, 0), _weights(two, 0), _weights(two, 1)
    start = load_file(str(toy_model / "model.safetensors"))
    assert any(not torch.equal(a[k], start[k]) for k in start if k in a)  # it trained
    # The gradients of the same global batch agree to rounding ...
    ga, gb = load_file(str(one / "grads0.safetensors")), load_file(str(two / "grads0.safetensors"))
    assert ga.keys() == gb.keys() and ga
    for k in ga:
        scale = float(ga[k].abs().max()) or 1.0
        torch.testing.assert_close(gb[k], ga[k], rtol=1e-4, atol=1e-5 * scale)
    for k in a:
        assert torch.equal(b0[k], b1[k]), k  # the ranks agree exactly
        # ... and so do the weights; Adam divides by sqrt(v), so rounding in a near-zero
        # gradient (|g| near Adam's eps) moves a weight by up to ~lr: 5% of one step.
        torch.testing.assert_close(b0[k], a[k], rtol=0, atol=0.05 * cfg["optim"]["lr"])


@pytest.mark.slow
def test_distributed_training_runs_each_task_once_and_writes_one_metrics_line_a_step(
    toy_model: Path, tmp_path: Path
) -> None:
    run = tmp_path / "run"
    cfg = small_config(str(run), run={"steps": 2}, grpo={"groups_per_step": 3})
    out = tmp_path / "out"
    out.mkdir()
    _launch(2, "train", json.dumps(cfg), str(toy_model), str(out))
    rows = [json.loads(ln) for ln in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]
    for r in rows:  # 3 groups split 2 + 1 over the ranks, all of them counted once
        assert r["groups"] == 3 and r["episodes"] == 3 * 4 and r["excluded"] == 0
    a, b = _weights(out, 0), _weights(out, 1)
    assert all(torch.equal(a[k], b[k]) for k in a)
    ckpt = load_file(str(run / "ckpt-000002" / "model.safetensors"))
    assert all(torch.equal(ckpt[k], a[k]) for k in ckpt)


@pytest.mark.slow
def test_train_command_launches_the_processes_itself(toy_model: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    (tmp_path / "c.toml").write_text(
        f'[run]\nsteps = 1\n[grpo]\ngroup_size = 2\ngroups_per_step = 2\n'
        f'[sampling]\nmax_new_tokens = 8\n[tasks]\ntrain_tasks = 8\nheldout_tasks = 4\n'
        f'[sandbox]\nworkers = 1\n[checkpoint]\ndir = "{run}"\n'
    )  # fmt: skip
    cmd = [sys.executable, "-m", "codegym.cli", "train", str(tmp_path / "c.toml"),
           "--model", str(toy_model), "--nproc-per-node", "2", "--quiet"]  # fmt: skip
    p = subprocess.run(
        cmd, capture_output=True, timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"}
    )
    assert p.returncode == 0, p.stderr.decode()[-3000:]
    # rank 0 reports, rank 1 is quiet
    assert (p.stdout + p.stderr).decode().count("trained model:") == 1
    rows = [json.loads(ln) for ln in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1] and rows[0]["episodes"] == 4
    assert (run / "final" / "config.json").is_file()


@pytest.mark.slow
@pytest.mark.parametrize("transfer", ["file", "gloo"])
def test_two_processes_train_through_one_server_that_is_killed_and_restarted(
    toy_model: Path, tmp_path: Path, transfer: str
) -> None:
    from test_server_training import _free_port, _serve, _wait_up

    port = _free_port()
    root = f"http://127.0.0.1:{port}"
    flags = ("--weight-transfer",) if transfer == "gloo" else ()
    procs = [_serve(toy_model, port, *flags)]
    _wait_up(root, procs[0])
    run = tmp_path / "run"
    server = {"url": f"{root}/v1", "wait_s": 120, "weight_transfer": transfer}
    cfg = small_config(str(run), run={"steps": 3}, grpo={"groups_per_step": 3}, server=server)
    out = tmp_path / "out"
    out.mkdir()
    metrics = run / "metrics.jsonl"

    def kill_after_step_1() -> None:
        deadline = time.monotonic() + 240
        while not (metrics.is_file() and metrics.read_text().strip()):
            if time.monotonic() > deadline:
                return
            time.sleep(0.01)
        procs[-1].send_signal(signal.SIGKILL)
        procs[-1].wait()
        time.sleep(1.0)
        procs.append(_serve(toy_model, port, *flags))

    killer = threading.Thread(target=kill_after_step_1, daemon=True)
    killer.start()
    try:
        _launch(2, "train", json.dumps(cfg), str(toy_model), str(out), timeout=400)
        killer.join(timeout=60)
        assert len(procs) == 2 and procs[0].returncode == -signal.SIGKILL
        rows = [json.loads(ln) for ln in metrics.read_text().splitlines()]
        assert [r["step"] for r in rows] == [1, 2, 3]
        assert [r["version"] for r in rows] == [2, 3, 4]  # the leader's pushes, counted once
        for r in rows:  # no episode lost to the kill, none scored from the restarted base
            assert r["groups"] == 3 and r["episodes"] == 12 and r["excluded"] == 0, r
        a, b = _weights(out, 0), _weights(out, 1)
        assert all(torch.equal(a[k], b[k]) for k in a)
        served_now = httpx.get(f"{root}/health", timeout=5).json()["policy_version"]
        assert served_now >= 1  # the restarted server was given weights again
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
