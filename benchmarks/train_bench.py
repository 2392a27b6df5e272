"""GRPO training steps per hour: in-process generation against a model server, sync and async.

    .venv/bin/python benchmarks/train_bench.py                      # 3 rounds x 10 steps
    .venv/bin/python benchmarks/train_bench.py --steps 4 --rounds 1 # a quick look

Three arms, same config and seed, each run from step 0 in a fresh checkpoint folder:
  in-process sync  ``local_policy`` samples in the trainer's process (the baseline: the
                   same ``TransformersPolicy`` sampler that ``serve-model`` runs);
  http sync        ``ServerPolicy`` against ``codegym serve-model`` (its own process);
  http async       the same server, ``run.mode = "async"`` (rollouts of t+1 overlap
                   training of t).
The server is started once on a free loopback port (``--threads 1``, ``--batch-size`` =
the trainer's ``sampling.max_batch``) and killed at the end; every run pushes its own
weights to it before its first step. Each round runs every arm once, the order rotated
round to round so the VM's drifting speed hits all arms alike.

The config is ``codegym demo``'s (tiny model, synthetic ``infer`` d1 tasks, 8 groups of 8
episodes a step, jail sandbox with 2 workers, torch threads 1) with ``max_new_tokens``
raised to 128 by default, so generation dominates a step; checkpoints only at the end.

Per run, over its steps after the first (step 1 is warm-up and left out): steps/hour =
3600 x steps / sum(step_s), generated tokens/s = tokens / sum(step_s), and the shares of
step time spent generating (``generate_s``: wall time with a request in flight),
training (``train_s``: the optimizer step) and waiting for the step's rollout
(``wait_rollout_s``; the rest of a step is mostly the weight push). In async the
generate share counts rollouts that overlap training, so the two can add past 100%. In
sync a step is its rollout, then training, then the push, so an async step can be no
shorter than a rollout: async / sync <= step_s / wait_rollout_s of sync (printed). The
table shows the median over rounds; the ratios are medians of the per-round ratios.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import copy
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from transformers.utils import logging as hf_logging

from codegym.cli.demo_cmd import DEMO_CONFIG
from codegym.models import ensure_tiny_model
from codegym.train import parse_config
from codegym.train.trainer import Trainer

ARMS = ("in-process sync", "http sync", "http async")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def model_server(model_dir: Path, batch: int) -> Iterator[str]:
    """``codegym serve-model`` in its own process; yields its ``/v1`` URL."""
    port = free_port()
    cmd = [sys.executable, "-m", "codegym.cli", "serve-model", "--model", str(model_dir),
           "--port", str(port), "--threads", "1", "--batch-size", str(batch),
           "--log-level", "warning"]  # fmt: skip
    proc = subprocess.Popen(cmd, env=os.environ | {"HF_HUB_DISABLE_PROGRESS_BARS": "1"})
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2):
                    break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(f"serve-model did not come up (exit {proc.poll()})") from None
                time.sleep(0.2)
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def run_arm(
    arm: str, a: argparse.Namespace, model_dir: Path, url: str, tmp: Path
) -> dict[str, float]:
    cfg = copy.deepcopy(DEMO_CONFIG)
    cfg["run"].update(steps=a.steps, mode="async" if "async" in arm else "sync", seed=a.seed)
    cfg["sampling"]["max_new_tokens"] = a.max_new_tokens
    cfg["checkpoint"] = {"dir": tempfile.mkdtemp(dir=tmp), "every": a.steps, "keep": 1}
    if arm.startswith("http"):
        cfg["server"] = {"url": url}
    trainer = Trainer(parse_config(cfg, "train_bench"), model_dir)
    try:
        rows = asyncio.run(trainer.run())[1:]  # step 1 is warm-up
    finally:
        close = getattr(trainer.policy, "close", None)
        if close is not None:
            close()
    wall = sum(r["step_s"] for r in rows)
    return {
        "steps_h": 3600 * len(rows) / wall,
        "tok_s": sum(r["tokens_generated"] for r in rows) / wall,
        "gen": sum(r["generate_s"] for r in rows) / wall,
        "train": sum(r["train_s"] for r in rows) / wall,
        "wait": sum(r["wait_rollout_s"] for r in rows) / wall,
        "stale": sum(r["groups_stale"] for r in rows),
    }


def line(m: dict[str, float]) -> str:
    return (
        f"{m['steps_h']:8,.0f} {m['tok_s']:7,.0f} {m['gen']:5.0%} {m['train']:6.0%} "
        f"{m['wait']:5.0%} {m['stale']:6.0f}"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=10, help="steps per run (the first is warm-up)")
    ap.add_argument("--rounds", type=int, default=3, help="runs of each arm, alternating")
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    if a.steps < 2:
        ap.error("--steps must be at least 2 (the first step is left out)")
    hf_logging.disable_progress_bar()  # type: ignore[no-untyped-call]
    model_dir = ensure_tiny_model()
    print(
        f"load average {os.getloadavg()[0]:.2f}, {os.cpu_count()} CPUs; {a.rounds} rounds x "
        f"{a.steps} steps, max_new_tokens {a.max_new_tokens}"
    )
    head = f"{'steps/h':>8} {'tok/s':>7} {'gen':>5} {'train':>6} {'wait':>5} {'stale':>6}"
    print(f"{'':8} {'arm':16} {head}", flush=True)
    runs: dict[str, list[dict[str, float]]] = {arm: [] for arm in ARMS}
    batch = DEMO_CONFIG["sampling"]["max_batch"]
    with (
        tempfile.TemporaryDirectory(prefix="train-bench-") as tmp,
        model_server(model_dir, batch) as url,
    ):
        for r in range(a.rounds):
            for arm in ARMS[r % len(ARMS) :] + ARMS[: r % len(ARMS)]:
                runs[arm].append(run_arm(arm, a, model_dir, url, Path(tmp)))
                print(f"round {r + 1:<2} {arm:16} {line(runs[arm][-1])}", flush=True)

    print(f"\n{'median':8} {'arm':16} {head}")
    med = {arm: {k: statistics.median(m[k] for m in ms) for k in ms[0]} for arm, ms in runs.items()}
    for arm in ARMS:
        print(f"{'':8} {arm:16} {line(med[arm])}")
    for num, den in (("http sync", "in-process sync"), ("http async", "http sync")):
        ratios = [n["steps_h"] / d["steps_h"] for n, d in zip(runs[num], runs[den], strict=True)]
        rounds = ", ".join(f"{x:.2f}" for x in ratios)
        print(f"{num} / {den}: {statistics.median(ratios):.2f}x steps/h (rounds: {rounds})")
    sync = med["http sync"]
    print(
        f"overlap bound: an async step lasts at least a rollout, {sync['wait']:.0%} of an http "
        f"sync step (train {sync['train']:.0%}, the rest mostly the weight push), so "
        f"async / sync <= {1 / sync['wait']:.2f}x"
    )


if __name__ == "__main__":
    main()
