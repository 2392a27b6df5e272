"""Shared pieces of the trainer tests: a tiny model, a reward with signal, a runner.

The toy tiny model (seconds to build) never passes a synthetic task, so a test-only env
gives a graded reward from the completion itself (the share of letters in it): every
group has variance, and GRPO has a real signal to follow. It runs through the real rollout
engine and trainer like ``CodeEnv`` does.

Run as a script (``python train_helpers.py CONFIG_JSON MODEL_DIR``) it trains to the end:
the kill-and-resume test starts it as a separate process so that it can ``kill -9`` it.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, ClassVar

from codegym.envs import Env, StepResult, Turn, register
from codegym.envs.env import ENVS
from codegym.models import PretrainConfig
from codegym.tasks import Task

SMALL = PretrainConfig(
    steps=4,
    batch_size=2,
    docs_per_cell=15,
    difficulties=(1,),
    vocab_size=300,
    n_layer=1,
    n_head=2,
    n_embd=32,
    threads=1,
)


class LetterShareEnv(Env):
    """Single turn; reward = share of letters in the completion (graded, nearly always varying)."""

    defaults: ClassVar[dict[str, Any]] = {}

    async def reset(self, task: Task, seed: int) -> list[dict[str, Any]]:
        return [{"role": "user", "content": task.prompt}]

    async def step(self, turn: Turn) -> StepResult:
        text = turn.text or " "
        r = sum(ch.isalpha() for ch in text) / len(text)
        return StepResult(done=True, reward=r, outcome="pass" if r > 0.5 else "fail")


class FlatEnv(LetterShareEnv):
    """Single turn; the same reward whatever the completion: no group has a signal."""

    async def step(self, turn: Turn) -> StepResult:
        return StepResult(done=True, reward=0.0, outcome="fail")


if "test_letters" not in ENVS:
    register("test_letters")(LetterShareEnv)
    register("test_flat")(FlatEnv)


def small_config(run_dir: str, **over: Any) -> dict[str, Any]:
    """A few-second training config on the toy model."""
    cfg: dict[str, Any] = {
        "model": {"threads": 1},
        "env": {"name": "test_letters", "options": {}},
        "run": {"steps": 4, "seed": 3},
        "optim": {"lr": 3e-3, "micro_batch": 4},
        "grpo": {"group_size": 4, "groups_per_step": 2},
        "sampling": {"max_new_tokens": 12, "stop": []},
        "tasks": {"train_tasks": 16},
        "checkpoint": {"dir": run_dir, "every": 1, "keep": 10},
    }
    for section, values in over.items():
        cfg[section] = {**cfg.get(section, {}), **values}
    return cfg


def run_script(cfg: dict[str, Any], model: Path) -> subprocess.Popen[bytes]:
    """This file as a separate training process (so a test can ``kill -9`` it)."""
    return subprocess.Popen(
        [sys.executable, __file__, json.dumps(cfg), str(model)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )


def kill_at_checkpoint(p: subprocess.Popen[bytes], run_dir: Path, step: int) -> None:
    """Wait (at most 240 s) for the run's checkpoint of ``step``, then ``kill -9`` it."""
    done = run_dir / f"ckpt-{step:06d}" / "COMPLETE"
    deadline = time.monotonic() + 240
    while not done.exists():
        assert p.poll() is None, p.stderr.read().decode()[-2000:] if p.stderr else ""
        assert time.monotonic() < deadline, f"no checkpoint of step {step}"
        time.sleep(0.02)
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    assert p.returncode == -signal.SIGKILL


def main() -> None:
    from codegym.train import Trainer, parse_config

    cfg = parse_config(json.loads(sys.argv[1]))
    trainer = Trainer(cfg, sys.argv[2])
    asyncio.run(trainer.run())


if __name__ == "__main__":
    main()
